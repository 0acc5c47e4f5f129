#!/usr/bin/env bash
# project_words.sh — the repository speaks of the project only. Fails (listing file:line) when
# a tracked text file (`git ls-files`; binaries and files that are not UTF-8 are skipped)
#   * cites an issue by number: the word "issue" (any case, singular or plural) followed by a
#     number, with or without "#" or "-" between them, or "#" and a number standing alone (after
#     a space, a bracket or a quote, not part of a word or a colour);
#   * names a tool of the workplace the project was developed in rather than the project: the
#     benchmarking and studio commands of the build farm, the remote GPU machine's call names
#     and its accounting words, the helper sessions that worked on the code.
# Say what is meant instead ("paired A/B timings", "a GPU machine without MPI").
# Also checks, on a small temporary git tree, that each forbidden form is caught and that
# ordinary text (a hex colour, "#include", "release", an anchor link) is not.
# Usage: tests/e2e/project_words.sh [--root DIR]   (DIR: a git work tree; default this repository)
# Needs bash, git and /usr/bin/python3 (standard library). ~1 s. Last line:
# "project_words: N passed, M failed"; exits non-zero on any failure.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ONLY_ROOT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --root) ONLY_ROOT="$(cd "$2" && pwd)"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "project_words: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PY="${PY:-/usr/bin/python3}"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }

# check TREE: prints one line per finding (file:line: what: the words); exit 1 when there is any.
check() {
  "$PY" - "$@" <<'PYEOF'
import re, subprocess, sys

root = sys.argv[1]
# Every forbidden word is spelled in pieces so that this script does not flag itself.
ISSUE = "iss" + "ue"
FARM = "fa" + "rm"
RULES = [
    (re.compile(r"\b" + ISSUE + r"s?[\s-]*(?:#|no\.?\s*|number\s*)?\d+\b", re.I), "cites an issue by number"),
    (re.compile(r"(?:^|(?<=[\s(\[{'\"`,;]))#\d{1,5}\b(?![\w-])"), "cites an issue by number"),
    (re.compile(r"\b" + FARM + r"-(?:ben" + r"ch|stu" + r"dio)\b|\b" + FARM + r"-[a-z]+\b", re.I), "names an outside tool"),
    (re.compile(r"\bdev" + r"ice[ -]to" + r"ol\b", re.I), "names an outside tool"),
    (re.compile(r"\bhel" + r"per[ -]sess" + r"ions?\b", re.I), "names an outside tool"),
    (re.compile(r"\b(?:give" + r"_back|budget" + r"_left\w*|files" + r"_fetch|files" + r"_at|can_start" + r"_another)\b"),
     "names an outside tool"),
    (re.compile(r"\bl" + r"ease[sd]?\b", re.I), "names an outside tool"),
]
SELF = "tests/e2e/project_words.sh"

out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True).stdout
files = [f for f in out.decode("utf-8", "replace").split("\0") if f and f != SELF]
problems = []
scanned = 0
for rel in files:
    try:
        data = open(f"{root}/{rel}", "rb").read()
    except OSError:
        continue  # listed but absent (a deleted, uncommitted file)
    if b"\0" in data:
        continue
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        continue
    scanned += 1
    for n, line in enumerate(text.split("\n"), 1):
        for rx, why in RULES:
            m = rx.search(line)
            if m:
                problems.append(f"{rel}:{n}: {why}: {m.group(0).strip()!r}")
for p in problems:
    print(p)
print(f"scanned {scanned} text file(s); {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PYEOF
}

if [ -n "$ONLY_ROOT" ]; then
  out=$(check "$ONLY_ROOT" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] && ok "$ONLY_ROOT: speaks of the project only" || bad "$ONLY_ROOT: findings (above)"
  echo "project_words: $pass passed, $fail failed"
  [ $fail -eq 0 ]; exit
fi

# 1. this repository.
out=$(check "$ROOT" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "repository: no issue number, no outside tool ($(tail -1 <<<"$out"))"
else echo "$out" | sed 's/^/       /'; bad "repository: findings (listed above as file:line)"; fi

# 2. the checker catches what it must, and only that, on a small temporary git tree.
TMP="$(mktemp -d "${TMPDIR:-/tmp}/project_words.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
git -C "$TMP" init -q 2>/dev/null || { bad "git init in $TMP failed"; echo "project_words: $pass passed, $fail failed"; exit 1; }
mkdir -p "$TMP/src" "$TMP/docs" "$TMP/tests"
I="iss""ue"; F="fa""rm"; L="le""ase"
printf '// fine: #include <x>, colour "#555555", see [a](#usage), release 2, rank #a\nint x = 1;\n' >"$TMP/src/good.cpp"
printf '# fine\n\nNothing here names anything outside.\n' >"$TMP/docs/good.md"
git -C "$TMP" add -A
out=$(check "$TMP" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "a tree of ordinary text passes"; else bad "ordinary text refused: $out"; fi

printf '// one\n// fixed in %s 37 (see also %ss #12)\n' "$I" "$I" >"$TMP/src/bad.cpp"
printf 'text\nmeasured with `%s-bench -n 5 --vs`\nthen (#44) again\n' "$F" >"$TMP/docs/bad.md"
printf '# a GPU %s is spent\n# the dev%s to%s copies 64 MiB\n# then give%s_back\n' "$L" "ice" "ol" "" >"$TMP/tests/bad.sh"
printf 'a hel%s sess%s wrote this\n' "per" "ion" >"$TMP/docs/who.md"
printf 'bin\0ary %s 37\n' "$I" >"$TMP/docs/blob.bin"
git -C "$TMP" add -A
out=$(check "$TMP" 2>&1); rc=$?
want=("src/bad.cpp:2: cites an issue" "docs/bad.md:2: names an outside tool" "docs/bad.md:3: cites an issue"
      "tests/bad.sh:1: names an outside tool" "tests/bad.sh:2: names an outside tool" "tests/bad.sh:3: names an outside tool"
      "docs/who.md:1: names an outside tool")
missing=""
for w in "${want[@]}"; do grep -qF -- "$w" <<<"$out" || missing="$missing [$w]"; done
if [ $rc -eq 1 ] && [ -z "$missing" ]; then ok "planted words are each reported with file:line"
else bad "planted words: exit $rc, missing$missing: $out"; fi
if grep -qF "src/good.cpp" <<<"$out" || grep -qF "docs/blob.bin" <<<"$out"; then
  bad "ordinary text or a binary file was reported: $out"
else ok "ordinary text and binary files are not reported"; fi

echo "project_words: $pass passed, $fail failed"
[ $fail -eq 0 ]
