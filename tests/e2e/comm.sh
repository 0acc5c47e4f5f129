#!/usr/bin/env bash
# comm.sh — the real `spikemesh` binary under mpirun: `plan` prints the mesh groups, `commtest`
# runs every collective on small sizes with no wrong result, a bad mesh gives ONE error line
# (from rank 0) and a non-zero exit without hanging, and the --comm-timeout watchdog ends a
# job whose rank never joins, naming the operation, the comm and the missing rank.
# Usage: tests/e2e/comm.sh [path/to/spikemesh]   (default: $BIN, else build/bin/spikemesh)
# Exits non-zero on any failure; last line: "comm: N passed, M failed".
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${1:-${BIN:-$ROOT/build/bin/spikemesh}}")
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d /tmp/spikemesh_comm_e2e.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
MPIRUN="mpirun --bind-to none"

PASS=0
FAIL=0
pass() { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1: $2"; }

if [ ! -x "$BIN" ]; then echo "comm: $BIN not built"; echo "comm: 0 passed, 1 failed"; exit 1; fi

# 1. plan at np 2 and np 4: groups as documented (tp fastest, then dp, then pp).
if timeout 60 $MPIRUN -np 2 "$BIN" plan --mesh-shape 2 1 1 >out 2>err; then
  if grep -q "^mesh dp=2 tp=1 pp=1: 2 ranks" out && grep -q "^dp groups (1 x 2 ranks): {0,1}$" out &&
     grep -q "^tp groups (2 x 1 rank): {0} {1}$" out && [ "$(grep -cE '^ +[01] +[01] +0 +0 +0  ' out)" -eq 2 ]; then
    pass "plan --mesh-shape 2 1 1 at np 2"
  else fail "plan --mesh-shape 2 1 1 at np 2" "unexpected output: $(cat out)"; fi
else fail "plan --mesh-shape 2 1 1 at np 2" "exit $?: $(cat err)"; fi

if timeout 60 $MPIRUN -np 4 --oversubscribe "$BIN" plan --mesh-shape 2 2 1 >out 2>err; then
  if grep -q "^dp groups (2 x 2 ranks): {0,2} {1,3}$" out && grep -q "^tp groups (2 x 2 ranks): {0,1} {2,3}$" out; then
    pass "plan --mesh-shape 2 2 1 at np 4"
  else fail "plan --mesh-shape 2 2 1 at np 4" "unexpected output: $(cat out)"; fi
else fail "plan --mesh-shape 2 2 1 at np 4" "exit $?: $(cat err)"; fi

# 2. commtest, small sizes, two dtypes: every row present, no wrong result, exit 0.
for dt in f32 bf16; do
  if timeout 120 $MPIRUN -np 2 "$BIN" commtest --max-bytes 65536 --iters 3 --warmup 1 --dtype $dt >out 2>err; then
    rows=$(grep -cE '^(all_reduce|reduce_scatter|all_gather|broadcast|sendrecv|barrier) ' out)
    wrong=$(awk '$1 ~ /^(all_reduce|reduce_scatter|all_gather|broadcast|sendrecv|barrier)$/ && $NF != 0' out | wc -l)
    if [ "$rows" -ge 60 ] && [ "$wrong" -eq 0 ] && grep -q "commtest passed" out; then
      pass "commtest --dtype $dt at np 2 ($rows rows)"
    else fail "commtest --dtype $dt at np 2" "$rows rows, $wrong with wrong results: $(cat out)"; fi
  else fail "commtest --dtype $dt at np 2" "exit $?: $(tail -5 err)"; fi
done

# 3. bad mesh: one error line (rank 0 only), non-zero exit, no hang.
bad_mesh() {  # NAME NEEDLE NP ARGS...
  local name=$1 needle=$2 np=$3
  shift 3
  local t0=$SECONDS
  timeout 60 $MPIRUN -np "$np" --oversubscribe "$BIN" "$@" >out 2>err
  local rc=$?
  local lines
  lines=$(grep -c "^spikemesh: error:" err)
  if [ $rc -eq 124 ]; then fail "$name" "hung (killed by timeout)"
  elif [ $rc -eq 0 ]; then fail "$name" "exit 0"
  elif [ "$lines" -ne 1 ]; then fail "$name" "$lines error lines: $(cat err)"
  elif ! grep -q -- "$needle" err; then fail "$name" "message lacks '$needle': $(grep '^spikemesh' err)"
  else pass "$name (exit $rc in $((SECONDS - t0)) s)"; fi
}
bad_mesh "bad mesh 3 1 1 at np 2" "needs 3 ranks, but this job has 2" 2 plan --mesh-shape 3 1 1
bad_mesh "zero mesh dim at np 2" "must be >= 1" 2 plan --mesh-shape 2 0 1
bad_mesh "negative mesh dim at np 2" "must be >= 1" 2 plan --mesh-shape -2 1 1
bad_mesh "commtest bad mesh at np 4" "needs 8 ranks, but this job has 4" 4 commtest --mesh-shape 2 2 2
bad_mesh "commtest --comm nccl without GPU" "--comm nccl" 2 commtest --comm nccl --device cuda

# 4. watchdog: rank 1 never joins; the job must end within the timeout with one clear message.
t0=$SECONDS
timeout 60 $MPIRUN -np 2 "$BIN" commtest --max-bytes 64 --comm-timeout 3 --hang-rank 1 >out 2>err
rc=$?
took=$((SECONDS - t0))
if [ $rc -eq 124 ]; then fail "watchdog" "job hung past 60 s"
elif [ $rc -eq 0 ]; then fail "watchdog" "exit 0"
elif ! grep -q "comm timeout: all_reduce(sum) of 1 x f32 on host over comm 'world'.*waiting for data from world rank(s) 1" err; then
  fail "watchdog" "message: $(grep 'spikemesh' err)"
elif [ $took -gt 30 ]; then fail "watchdog" "took $took s for a 3 s timeout"
else pass "watchdog --comm-timeout 3 (exit $rc after $took s)"; fi

echo "comm: $PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
