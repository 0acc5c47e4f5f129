#!/usr/bin/env bash
# function_length.sh — no function in src/ or include/ is longer than 80 lines. Measures every
# function body of the C++ and CUDA sources (.h .hpp .cuh .cpp .cu): from the line of the
# function's name to its closing brace, with comments, string literals and preprocessor lines
# blanked first; lambdas and local classes count as part of the function that holds them.
# Fails listing file:line:name:length for each function over the limit, except the TABLES
# allowlisted below (each with its reason): a table of keys or entries reads as one piece.
# Also checks, on a small temporary tree, that a planted long function is reported.
# Usage: tests/e2e/function_length.sh [--root DIR] [--report] [--top N]
#   --root DIR   the tree to check (default: this repository)
#   --report     list the findings (allowlisted ones marked) and exit 0; no self-test
#   --top N      with --report: also list the N longest functions
# Needs bash and /usr/bin/python3 (standard library). ~5 s. Last line:
# "function_length: N passed, M failed"; exits non-zero on any failure.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ONLY_ROOT=""; REPORT=0; TOP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) ONLY_ROOT="$(cd "$2" && pwd)"; shift 2 ;;
    --report) REPORT=1; shift ;;
    --top) TOP="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "function_length: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PY="${PY:-/usr/bin/python3}"
LIMIT=80
# Tables allowed over the limit: "file:function" then " — " and the reason (one line each).
ALLOW=(
)
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }

# measure TREE [--report] [--top N]: one line per function over the limit; exit 1 when any is
# not allowlisted. The allowlist travels in FL_ALLOW, one entry a line.
measure() {
  FL_ALLOW="$(printf '%s\n' "${ALLOW[@]}")" "$PY" - "$LIMIT" "$@" <<'PYEOF'
import os, re, sys
def strip(text):
    """Blank comments, string/char literals and preprocessor lines; keep newlines."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c); i += 1; continue
        if at_line_start and c == "#":
            # preprocessor directive, with backslash continuations
            while i < n:
                if text[i] == "\n":
                    if i > 0 and text[i - 1] == "\\":
                        out.append("\n"); i += 1; continue
                    break
                out.append(" "); i += 1
            continue
        at_line_start = False
        if c == "\n":
            out.append(c); i += 1; at_line_start = True; continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j; continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j; continue
        m = re.match(r'(?:u8|[uUL])?R"([^()\\ ]{0,16})\(', text[i:i + 24])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end])); i = end; continue
        if c == "'" and i > 0 and text[i - 1].isdigit() and i + 1 < n and text[i + 1].isalnum():
            out.append(" "); i += 1; continue  # digit separator
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c if j - i >= 2 else c); i = j; continue
        out.append(c); i += 1
    return "".join(out)

SKIP_NAMES = {"__launch_bounds__", "alignas", "__attribute__", "__declspec", "decltype", "__align__", "noexcept", "throw"}
NAME_AT_END = re.compile(r"((?:[A-Za-z_]\w*\s*(?:<[^<>;{}()]*>)?\s*::\s*)*~?[A-Za-z_]\w*)\s*$")

def match_close(s, i, open_c, close_c):
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_c: depth += 1
        elif s[j] == close_c:
            depth -= 1
            if depth == 0: return j
    return len(s) - 1

def drop_template_prefix(h):
    while True:
        m = re.match(r"\s*template\s*<", h)
        if not m: return h
        depth, j = 0, m.end() - 1
        while j < len(h):
            if h[j] == "<": depth += 1
            elif h[j] == ">":
                depth -= 1
                if depth == 0: break
            j += 1
        h = h[j + 1:]

def top_level(h):
    """Yield (index, char) of h outside (), [] and {}."""
    depth = 0
    for k, ch in enumerate(h):
        if ch in "([{": depth += 1
        elif ch in ")]}": depth -= 1
        elif depth == 0: yield k, ch

def classify(h):
    h = drop_template_prefix(h)
    h = re.sub(r"\b(public|private|protected)\s*:(?!:)", " ", h)
    hs = h.strip()
    if re.match(r"(?:typedef\s+)?(namespace|class|struct|union)\b", hs) or (re.match(r"extern\b", hs) and "(" not in hs):
        return "container", None
    if re.match(r"enum\b", hs) or not hs:
        return "other", None
    for k, ch in top_level(h):
        if ch == "=" and not re.search(r"operator\s*[-+*/%^&|<>!=]*$", h[:k]) and h[k + 1:k + 2] != "=" and h[k - 1:k] not in ("=", "!", "<", ">"):
            return "other", None
    # the parameter list: the first paren group not after an attribute name
    k = 0
    while True:
        p = h.find("(", k)
        if p < 0: return "other", None
        before = h[:p]
        if re.search(r"\boperator\s*$", before) and h[p:p + 2].replace(" ", "") .startswith("()"):
            q = h.find(")", p)
            name = NAME_AT_END.search(before.rstrip()[:-len("operator")] + "operator")
            return "function", (re.sub(r"\s+", "", name.group(1)) + "()" if name else "operator()", q + 1)
        m = re.search(r"\boperator\s*([^\w\s(]+)\s*$", before)
        if m:
            name = NAME_AT_END.search(before[:m.start()] + "operator")
            return "function", ((re.sub(r"\s+", "", name.group(1)) if name else "operator") + m.group(1), p)
        m = NAME_AT_END.search(before)
        close = match_close(h, p, "(", ")")
        if m and m.group(1).split("::")[-1].strip() not in SKIP_NAMES:
            return "function", (re.sub(r"\s+", "", m.group(1)), p)
        k = close + 1

def functions(text):
    s = strip(text)
    line_of = lambda pos: s.count("\n", 0, pos) + 1
    found, stack = [], []
    i, start, n = 0, 0, len(s)
    while i < n:
        c = s[i]
        if c == ";":
            start = i + 1
        elif c == "}":
            if stack: stack.pop()
            start = i + 1
        elif c == "{":
            kind, info = classify(s[start:i])
            if kind == "container":
                stack.append("c"); start = i + 1
            elif kind == "function":
                name, params_at = info
                head = s[start:i]
                pclose = match_close(head, params_at, "(", ")") if "(" in head[params_at:params_at + 1] else params_at
                rest = head[pclose + 1:]
                in_init = re.search(r"(?<!:):(?!:)", rest) is not None
                prev = s[:i].rstrip()[-1:]
                if in_init and (prev.isalnum() or prev in "_>"):
                    i = match_close(s, i, "{", "}") + 1; continue
                end = match_close(s, i, "{", "}")
                m = re.search(re.escape(name.split("::")[-1]) if name.split("::")[-1].isidentifier() else r"\S", head)
                first_line = line_of(start + (m.start() if m else 0))
                found.append((first_line, name, line_of(end) - first_line + 1))
                i, start = end + 1, end + 1; continue
            else:
                i = match_close(s, i, "{", "}") + 1; continue
        i += 1
    return found


limit, root = int(sys.argv[1]), sys.argv[2]
report = "--report" in sys.argv[3:]
top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv[3:] else 0
allow = {}
for entry in os.environ.get("FL_ALLOW", "").splitlines():
    if entry.strip():
        key, _, why = entry.partition(" — ")
        allow[key.strip()] = why.strip()
EXT = (".h", ".hpp", ".cuh", ".cpp", ".cu")
every, long_ones = [], []
for d in ("src", "include"):
    for dp, dns, fns in os.walk(os.path.join(root, d)):
        dns[:] = sorted(x for x in dns if not x.startswith("."))
        for fn in sorted(fns):
            if fn.endswith(EXT):
                rel = os.path.relpath(os.path.join(dp, fn), root)
                text = open(os.path.join(dp, fn), encoding="utf-8", errors="replace").read()
                for line, name, length in functions(text):
                    every.append((length, rel, line, name))
failed, used = 0, set()
for length, rel, line, name in sorted(every, key=lambda t: (t[1], t[2])):
    if length > limit:
        key = f"{rel}:{name}"
        if key in allow:
            used.add(key)
            print(f"{rel}:{line}:{name}:{length} (allowlisted table: {allow[key]})")
        else:
            failed += 1
            print(f"{rel}:{line}:{name}:{length}")
for key in sorted(set(allow) - used):
    failed += 1
    print(f"{key}: allowlisted but not found over {limit} lines: drop it from the allowlist")
if top:
    print(f"the {top} longest functions:")
    for length, rel, line, name in sorted(every, key=lambda t: -t[0])[:top]:
        print(f"  {rel}:{line}:{name}:{length}")
print(f"measured {len(every)} function(s); {failed} over {limit} lines outside the allowlist")
sys.exit(0 if report or not failed else 1)
PYEOF
}

if [ "$REPORT" = 1 ]; then
  measure "${ONLY_ROOT:-$ROOT}" --report --top "$TOP"; exit 0
fi
if [ -n "$ONLY_ROOT" ]; then
  out=$(measure "$ONLY_ROOT" 2>&1); rc=$?
  echo "$out"
  [ $rc -eq 0 ] && ok "$ONLY_ROOT: no function over $LIMIT lines" || bad "$ONLY_ROOT: functions over $LIMIT lines (above)"
  echo "function_length: $pass passed, $fail failed"
  [ $fail -eq 0 ]; exit
fi

# 1. this repository.
out=$(measure "$ROOT" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "repository: no function over $LIMIT lines outside the allowlist ($(tail -1 <<<"$out"))"
else echo "$out" | sed 's/^/       /'; bad "repository: functions over $LIMIT lines (listed above as file:line:name:length)"; fi

# 2. the checker catches what it must, on a small temporary tree.
TMP="$(mktemp -d "${TMPDIR:-/tmp}/function_length.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/src/core" "$TMP/include/x"
body() { local k; for ((k = 0; k < $1; k++)); do echo "  total += $k;  // { not a brace that counts"; done; }
{ echo '// fine: comments, strings and lambdas'
  echo 'namespace sm {'
  echo 'struct Box {'
  echo '  int small() const { return 1; }'
  echo '};'
  echo 'static const char* kText = "}}}{{{";'
  echo 'int short_one(int a) {'
  echo '  auto f = [&](int b) { return a + b; };'
  echo '  /* } */ return f(1);'
  echo '}'
  echo '}  // namespace sm'
} >"$TMP/src/core/good.cpp"
ALLOW=()
out=$(measure "$TMP" 2>&1); rc=$?
if [ $rc -eq 0 ]; then ok "a tree of short functions passes"; else bad "short functions refused: $out"; fi

{ echo 'namespace sm {'
  echo 'Thing::Thing(int n) : n_{n}, m_(n) {'
  body 79
  echo '}'
  echo 'template <typename T>'
  echo '__global__ void __launch_bounds__(256, 2) long_kernel(const T* x) {'
  echo '  int total = 0;'
  echo '  auto add = [&](int v) {'
  body 78
  echo '  };'
  echo '}'
  echo 'const int kTable[] = {'
  body 90 | sed 's/total += \([0-9]*\);/\1,/'
  echo '};'
  echo '}  // namespace sm'
} >"$TMP/include/x/long.cuh"
out=$(measure "$TMP" 2>&1); rc=$?
want=("include/x/long.cuh:2:Thing::Thing:81" "include/x/long.cuh:84:long_kernel:83")
missing=""
for w in "${want[@]}"; do grep -qxF -- "$w" <<<"$out" || missing="$missing [$w]"; done
if [ $rc -eq 1 ] && [ -z "$missing" ] && ! grep -q kTable <<<"$out"; then
  ok "planted long functions are reported as file:line:name:length (a lambda counts in its function; a data table is no function)"
else bad "planted long functions: exit $rc, missing$missing: $out"; fi

ALLOW=("include/x/long.cuh:Thing::Thing — a table" "include/x/long.cuh:long_kernel — a table")
out=$(measure "$TMP" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qF "(allowlisted table: a table)" <<<"$out"; then ok "an allowlisted table passes and is named as such"
else bad "allowlist: exit $rc: $out"; fi

ALLOW=("src/core/good.cpp:gone — a table")
out=$(measure "$TMP" 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qF "src/core/good.cpp:gone: allowlisted but not found" <<<"$out"; then ok "a stale allowlist entry is reported"
else bad "stale allowlist entry: exit $rc: $out"; fi

echo "function_length: $pass passed, $fail failed"
[ $fail -eq 0 ]
