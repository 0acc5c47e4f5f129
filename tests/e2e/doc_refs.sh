#!/usr/bin/env bash
# doc_refs.sh — the documents the code cites must be in the repository. Fails (listing
# file:line) when a file under src/, include/, tests/, scripts/, bench/, jobs/, input/, docs/,
# Makefile, README.md or output/README.md
#   * cites an outside document: the first design ("DESIGN §n", "DESIGN.md") or the first
#     semantics page ("spec §n", "spikingjelly.md"), which a clone of spikemesh does not have;
#   * cites `docs/<file>.md §n` (also "§n, §m", "§n–§m", across a comment line break) where
#     docs/<file>.md is missing or has no heading `## §n` (inside docs/, `[x](x.md) §n` too).
# Also checks that docs/architecture.md and docs/semantics.md number their sections §1, §2, ...
# in order, and that the checker itself catches planted bad citations in a temporary tree.
# Usage: tests/e2e/doc_refs.sh [--root DIR]   (DIR: the tree to check; default this repository)
# Needs bash and /usr/bin/python3 (standard library). ~1 s. Last line:
# "doc_refs: N passed, M failed"; exits non-zero on any failure.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ONLY_ROOT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --root) ONLY_ROOT="$(cd "$2" && pwd)"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "doc_refs: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PY="${PY:-/usr/bin/python3}"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }

# check TREE [--no-numbering]: prints one line per finding; exit 1 when there is any.
check() {
  "$PY" - "$@" <<'PYEOF'
import os, re, sys

root = sys.argv[1]
numbering = "--no-numbering" not in sys.argv[2:]
DIRS = ("src", "include", "tests", "scripts", "bench", "jobs", "input", "docs")
FILES = ("Makefile", "README.md", "output/README.md")
SELF = "doc_refs.sh"  # this checker: it spells the forbidden forms in its help and fixtures
SKIP_EXT = (".png", ".jpg", ".h5", ".pt", ".gz", ".xz", ".whl", ".so", ".o", ".a")
# Spelled in pieces so that this script does not cite what it forbids.
D, SP, SJ = "DES" + "IGN", "sp" + "ec", "spiking" + "jelly.md"
GAP = r"[\s/#*]*"  # spaces, a line break, comment leaders between a name and its section
OUTSIDE = [
    (re.compile(r"\b" + D + r"(?:\.md)?" + GAP + "§"), "cites the first design (" + D + " §n): cite docs/architecture.md §n"),
    (re.compile(r"\b" + D + r"\.md"), "names " + D + ".md, outside the repository: cite docs/architecture.md"),
    (re.compile(r"\b" + SP + GAP + "§"), "cites the first semantics page (" + SP + " §n): cite docs/semantics.md §n"),
    (re.compile(re.escape(SJ)), "names " + SJ + ", outside the repository: cite docs/semantics.md"),
]
NUM = r"§\s*(\d+)(?:\s*[–-]\s*§?\s*(\d+))?"
CITE = re.compile(r"\bdocs/([A-Za-z0-9_.-]+?)\.md" + GAP + NUM + r"((?:\s*(?:,|and|;)\s*" + NUM + r")*)")
LOCAL = re.compile(r"\]\(([A-Za-z0-9_-]+)\.md\)" + GAP + NUM + r"((?:\s*(?:,|and)\s*" + NUM + r")*)")
MORE = re.compile(NUM)
HEAD = re.compile(r"^#{1,6}\s+§(\d+)\b", re.M)

def files():
    out = []
    for d in DIRS:
        top = os.path.join(root, d)
        for dp, dns, fns in os.walk(top):
            dns[:] = sorted(n for n in dns if not n.startswith(".") and n != "__pycache__")
            for n in sorted(fns):
                if not n.endswith(SKIP_EXT) and not (dp == os.path.join(root, "tests", "e2e") and n == SELF):
                    out.append(os.path.relpath(os.path.join(dp, n), root))
    out += [f for f in FILES if os.path.isfile(os.path.join(root, f))]
    return out

heads = {}
def sections(doc):
    if doc not in heads:
        p = os.path.join(root, "docs", doc + ".md")
        heads[doc] = None if not os.path.isfile(p) else [int(n) for n in HEAD.findall(open(p, encoding="utf-8").read())]
    return heads[doc]

def numbers(m, first_group):
    ns = [m.group(first_group)] + ([m.group(first_group + 1)] if m.group(first_group + 1) else [])
    for mm in MORE.finditer(m.group(first_group + 2) or ""):
        ns += [mm.group(1)] + ([mm.group(2)] if mm.group(2) else [])
    return [int(n) for n in ns]

problems, cites = [], 0
for rel in files():
    try:
        text = open(os.path.join(root, rel), encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        continue
    line = lambda pos: text.count("\n", 0, pos) + 1
    for rx, why in OUTSIDE:
        for m in rx.finditer(text):
            problems.append(f"{rel}:{line(m.start())}: {why}: {' '.join(m.group(0).split())}")
    found = [(m, m.group(1)) for m in CITE.finditer(text)]
    if rel.startswith("docs/"):
        found += [(m, m.group(1)) for m in LOCAL.finditer(text)]
    for m, doc in found:
        cites += 1
        have = sections(doc)
        if have is None:
            problems.append(f"{rel}:{line(m.start())}: cites docs/{doc}.md, which does not exist: {' '.join(m.group(0).split())}")
            continue
        for n in numbers(m, 2):
            if n not in have:
                problems.append(f"{rel}:{line(m.start())}: cites docs/{doc}.md §{n}, which has no heading §{n} "
                                f"(it has §1..§{max(have) if have else 0}): {' '.join(m.group(0).split())}")
if numbering:
    for doc in ("architecture", "semantics"):
        have = sections(doc)
        if have is None:
            problems.append(f"docs/{doc}.md:1: missing")
        elif have != list(range(1, len(have) + 1)):
            problems.append(f"docs/{doc}.md:1: sections are not numbered §1, §2, ... in order: {have}")
for p in problems:
    print(p)
print(f"checked {cites} citation(s); {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PYEOF
}

if [ -n "$ONLY_ROOT" ]; then
  out=$(check "$ONLY_ROOT" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] && ok "$ONLY_ROOT: every citation resolves" || bad "$ONLY_ROOT: bad citations (above)"
  echo "doc_refs: $pass passed, $fail failed"
  [ $fail -eq 0 ]; exit
fi

# 1. this repository.
out=$(check "$ROOT" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "repository: no outside document cited; every docs/*.md §n exists ($(tail -1 <<<"$out"))"
else echo "$out" | sed 's/^/       /'; bad "repository: bad citations (listed above as file:line)"; fi

# 2. the checker catches what it must, on a small temporary tree.
TMP="$(mktemp -d "${TMPDIR:-/tmp}/doc_refs.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/docs" "$TMP/src/core" "$TMP/tests"
printf '# a\n\n## §1 One\n\ntext, see [b](b.md) §1\n\n## §2 Two\n' >"$TMP/docs/a.md"
printf '# b\n\n## §1 One\n' >"$TMP/docs/b.md"
printf '// good: docs/a.md §1, §2 and docs/b.md §1\n// also docs/a.md\n// §2 across a line break\n' >"$TMP/src/core/good.h"
out=$(check "$TMP" --no-numbering 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "a tree whose citations resolve passes"; else bad "good tree refused: $out"; fi

D="DES""IGN"; S="sp""ec"
printf '// one (%s §4) two\n' "$D" >"$TMP/src/core/d.h"
printf '# see %s\n' "$D.md" >"$TMP/tests/d.sh"
printf 'x = 1  # %s\n# §3 split over lines\n' "$S" >"$TMP/tests/s.py"
printf 'see /work/shared/%s/spiking%s\n' "$S" "jelly.md" >"$TMP/docs/c.md"
printf '// docs/a.md §3 and docs/a.md §1, §9\n// docs/zzz.md §1\n' >"$TMP/src/core/bad.cpp"
printf 'see [b](b.md) §4\n' >>"$TMP/docs/a.md"
out=$(check "$TMP" --no-numbering 2>&1); rc=$?
want=("src/core/d.h:1:" "tests/d.sh:1:" "tests/s.py:1:" "docs/c.md:1:" "src/core/bad.cpp:1: cites docs/a.md §3"
      "src/core/bad.cpp:1: cites docs/a.md §9" "src/core/bad.cpp:2: cites docs/zzz.md" "docs/a.md:8: cites docs/b.md §4")
missing=""
for w in "${want[@]}"; do grep -qF -- "$w" <<<"$out" || missing="$missing [$w]"; done
if [ $rc -eq 1 ] && [ -z "$missing" ]; then ok "planted bad citations are each reported with file:line"
else bad "planted bad citations: exit $rc, missing$missing: $out"; fi

mkdir -p "$TMP/n/docs"
printf '## §1 a\n## §3 c\n' >"$TMP/n/docs/architecture.md"
printf '## §1 a\n' >"$TMP/n/docs/semantics.md"
out=$(check "$TMP/n" 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "docs/architecture.md:1: sections are not numbered" <<<"$out"; then ok "a gap in the section numbers is reported"
else bad "section numbering: exit $rc: $out"; fi

echo "doc_refs: $pass passed, $fail failed"
[ $fail -eq 0 ]
