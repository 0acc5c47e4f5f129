#!/usr/bin/env bash
# check_includes.sh — module dependency check (docs/architecture.md §1). Fails (exit 1) listing
# file:line and the offending line when
#   * a module includes a higher module, or a same-level sibling it may not;
#   * a file other than src/app/main.cpp and src/comm/mesh*.cpp names MPI_COMM_WORLD.
# Module order, lowest first (a module may include itself and any strictly lower module):
#   core < kernels < {comm, layers} < io < {data, models, optim} < parallel < train
#        < {planner, bench} < app
# Same-level siblings may not include each other (comm <-> layers, data <-> models <-> optim,
# planner <-> bench).
# Checked: every .h/.hpp/.cuh/.cpp/.cc/.cu under include/spikemesh/<module>/ and src/<module>/
# (sub-folders such as kernels/cuda/ and private headers included). An include counts when it
# names "spikemesh/<module>/..." or is a relative include that resolves to a file of another
# module. Comments and string literals are ignored (so is MPI_COMM_WORLD inside them).
# Usage: scripts/check_includes.sh [--report] [--root DIR]
#   --report  print the findings but exit 0 (while known violations are being fixed)
#   --root    the tree to check (default: this repository); used by tests/e2e/include_checker.sh
# Needs /usr/bin/python3 (standard library only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPORT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --report) REPORT=1; shift ;;
    --root) ROOT="$(cd "$2" && pwd)"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check_includes: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
exec "${PY:-/usr/bin/python3}" - "$ROOT" "$REPORT" <<'PYEOF'
import os, re, sys

root, report = sys.argv[1], sys.argv[2] == "1"
LEVEL = {"core": 0, "kernels": 1, "comm": 2, "layers": 2, "io": 3,
         "data": 4, "models": 4, "optim": 4, "parallel": 5, "train": 6,
         "planner": 7, "bench": 7, "app": 8}
# Same-level pairs that ARE allowed (none today: comm/layers and data/models stay apart).
SIBLINGS_OK = set()
WORLD_OK = re.compile(r"^(src/app/main\.cpp|src/comm/mesh[^/]*\.cpp)$")
EXTS = (".h", ".hpp", ".cuh", ".cpp", ".cc", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SPIKEMESH = re.compile(r"^spikemesh/([^/]+)/")

def may_include(a, b):
    if a == b:
        return True
    la, lb = LEVEL[a], LEVEL[b]
    return lb < la or (la == lb and (a, b) in SIBLINGS_OK)

def strip(text):
    """Blank out comments and string/char literals, keeping line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            # A raw string R"(...)" is rare here; treat it as an ordinary literal.
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n and text[j] == c else ""))
            i = j + 1 if j < n and text[j] == c else j
        else:
            out.append(c)
            i += 1
    return "".join(out)

def module_of(rel):
    """Module of a repository-relative path, or None outside include/spikemesh and src."""
    parts = rel.split("/")
    if len(parts) >= 4 and parts[0] == "include" and parts[1] == "spikemesh":
        return parts[2]
    if len(parts) >= 3 and parts[0] == "src":
        return parts[1]
    return None

files = []
for top in (os.path.join(root, "include", "spikemesh"), os.path.join(root, "src")):
    for d, dirs, names in os.walk(top):
        dirs.sort()
        for name in sorted(names):
            if name.endswith(EXTS):
                files.append(os.path.relpath(os.path.join(d, name), root))

problems = []
for rel in files:
    mod = module_of(rel)
    if mod is None:  # a file directly in src/ or include/spikemesh/
        problems.append(f"{rel}:1: not inside a module folder (modules: {', '.join(LEVEL)})")
        continue
    if mod not in LEVEL:
        problems.append(f"{rel}:1: unknown module '{mod}' (add it to scripts/check_includes.sh and docs/architecture.md §1)")
        continue
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        raw = f.read()
    raw_lines = raw.split("\n")
    code_lines = strip(raw).split("\n")
    for ln, raw_line in enumerate(raw_lines, 1):
        m = INCLUDE.match(raw_line)
        # Only real directives: the '#' must survive comment stripping.
        if m and ln <= len(code_lines) and code_lines[ln - 1].lstrip().startswith("#"):
            target, tmod = m.group(2), None
            s = SPIKEMESH.match(target)
            if s:
                tmod = s.group(1)
            elif m.group(1) == '"':
                p = os.path.normpath(os.path.join(os.path.dirname(rel), target))
                if os.path.exists(os.path.join(root, p)):
                    tmod = module_of(p)
            if tmod is None:
                continue
            if tmod not in LEVEL:
                problems.append(f"{rel}:{ln}: {mod} includes unknown module '{tmod}': {raw_line.strip()}")
            elif not may_include(mod, tmod):
                why = "a higher module" if LEVEL[tmod] > LEVEL[mod] else "a sibling at the same level"
                problems.append(f"{rel}:{ln}: {mod} may not include {tmod} ({why}): {raw_line.strip()}")
        if not WORLD_OK.match(rel) and ln <= len(code_lines) and re.search(r"\bMPI_COMM_WORLD\b", code_lines[ln - 1]):
            problems.append(f"{rel}:{ln}: names MPI_COMM_WORLD (only src/app/main.cpp and src/comm/mesh*.cpp may): "
                            f"{raw_line.strip()}")

for p in problems:
    print(p)
nfiles = len({p.split(":", 1)[0] for p in problems})
print(f"check_includes: {len(problems)} problem(s) in {nfiles} file(s) of {len(files)} checked"
      + (" (report mode: not failing)" if report and problems else ""))
sys.exit(1 if problems and not report else 0)
PYEOF
