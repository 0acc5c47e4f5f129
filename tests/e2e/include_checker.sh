#!/usr/bin/env bash
# include_checker.sh — self-test of scripts/check_includes.sh on small temporary trees: a tree
# that keeps the module order passes; one bad include (layers -> comm, a sibling), an upward
# include (core -> app, also through a relative path) or MPI_COMM_WORLD outside main.cpp /
# comm/mesh*.cpp fails with file:line; mentions inside comments and strings do not count;
# --report lists but exits 0. Needs only bash and /usr/bin/python3. ~1 s.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHECK="$ROOT/scripts/check_includes.sh"
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/include_checker.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

# good_tree DIR: every include points down or sideways within a module.
good_tree() {
  local d=$1
  mkdir -p "$d"/include/spikemesh/{core,comm,layers,app} "$d"/src/{core,comm,layers,app}
  echo '#pragma once' >"$d/include/spikemesh/core/tensor.h"
  printf '#pragma once\n#include "spikemesh/core/tensor.h"\n' >"$d/include/spikemesh/comm/comm.h"
  printf '#pragma once\n#include <vector>\n#include "spikemesh/core/tensor.h"\n' >"$d/include/spikemesh/layers/layer.h"
  printf '#pragma once\nint x;\n' >"$d/src/layers/private.h"
  printf '#include "spikemesh/layers/layer.h"\n#include "private.h"\n// never #include "spikemesh/comm/comm.h" here; no MPI_COMM_WORLD either\nconst char* s = "MPI_COMM_WORLD";\n' \
    >"$d/src/layers/layer.cpp"
  printf '#include <mpi.h>\n#include "spikemesh/comm/comm.h"\nvoid f() { (void)MPI_COMM_WORLD; }\n' >"$d/src/comm/mesh.cpp"
  printf '#include "spikemesh/layers/layer.h"\n#include "spikemesh/comm/comm.h"\nint main() { return MPI_COMM_WORLD != 0; }\n' \
    >"$d/src/app/main.cpp"
}

# expect_fail NAME NEEDLE DIR: the checker exits 1 and prints NEEDLE.
expect_fail() {
  local name=$1 needle=$2 dir=$3 out rc
  out=$("$CHECK" --root "$dir" 2>&1); rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$needle" <<<"$out"; then ok "$name"
  else bad "$name (exit $rc, want 1 and '$needle'): $out"; fi
}

good_tree "$TMP/good"
out=$("$CHECK" --root "$TMP/good" 2>&1) && grep -q "0 problem(s)" <<<"$out" && ok "a good tree passes" \
  || bad "a good tree passes: $out"

good_tree "$TMP/sibling"
sed -i '1a #include "spikemesh/comm/comm.h"' "$TMP/sibling/src/layers/layer.cpp"
expect_fail "layers -> comm (sibling) fails" 'src/layers/layer.cpp:2: layers may not include comm' "$TMP/sibling"

good_tree "$TMP/upward"
printf '#pragma once\n#include <spikemesh/layers/layer.h>\n' >"$TMP/upward/include/spikemesh/core/bad.h"
expect_fail "core -> layers (upward, <...>) fails" 'include/spikemesh/core/bad.h:2: core may not include layers' "$TMP/upward"

good_tree "$TMP/relative"
printf '#include "../layers/private.h"\n' >"$TMP/relative/src/core/rel.cpp"
expect_fail "relative include of another module's private header fails" 'src/core/rel.cpp:1: core may not include layers' \
  "$TMP/relative"

good_tree "$TMP/world"
printf 'void g(int c) { if (c) (void)MPI_COMM_WORLD; }\n' >"$TMP/world/src/layers/world.cpp"
expect_fail "MPI_COMM_WORLD outside main.cpp / comm/mesh fails" 'src/layers/world.cpp:1: names MPI_COMM_WORLD' "$TMP/world"

out=$("$CHECK" --report --root "$TMP/sibling" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "layers may not include comm" <<<"$out" && ok "--report lists but exits 0" \
  || bad "--report lists but exits 0 (exit $rc): $out"

echo "include_checker: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
