#!/usr/bin/env bash
# dp_train.sh — the real `spikemesh train` under `mpirun -np 2`: data parallel (dp, ZeRO-2,
# FSDP) reproduces the one-rank losses (fp64, --sync-bn, same global batch) within 1e-9 and
# writes metrics.h5 with comm columns; a checkpoint written by dp=2 ZeRO resumes on one rank;
# SIGUSR1 to mpirun stops every rank at the same step with a checkpoint (exit 0) and
# --resume auto finishes the run; bad configurations (global batch not divisible, tp > 1,
# ranks disagreeing on the configuration) exit non-zero on every rank with one
# "spikemesh: error:" line and never hang.
# Usage: tests/e2e/dp_train.sh [path/to/spikemesh]   (default: $BIN, else build/bin/spikemesh)
# Needs mpirun and python3 ($PY, default /usr/bin/python3) with h5py and numpy.
# Last line: "dp_train: N passed, M failed"; exits non-zero on any failure.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${1:-${BIN:-$ROOT/build/bin/spikemesh}}")
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(timeout 120 mpirun --bind-to none --oversubscribe)
T=$(mktemp -d /tmp/spikemesh_dp_train.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1

PASS=0
FAIL=0
pass() { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1: $2"; }

if [ ! -x "$BIN" ]; then echo "dp_train: $BIN not built"; echo "dp_train: 0 passed, 1 failed"; exit 1; fi
if ! command -v mpirun >/dev/null; then echo "dp_train: no mpirun"; echo "dp_train: 0 passed, 1 failed"; exit 1; fi

# A CIFAR10-DVS-like toy: synthetic events [4, 2, 16, 16], a two-block conv-BN-LIF VGG.
"$BIN" data synth-dvs --out "$T/dvs.h5" --T 4 --size 16 --train 48 --test 12 >/dev/null || {
  echo "dp_train: cannot make the dataset"; echo "dp_train: 0 passed, 1 failed"; exit 1; }
cp "$ROOT/tests/e2e/lib/tiny_dvs.toml" "$T/tiny.toml"
BASE=("$BIN" train --data "$T/dvs.h5" --precision fp64 --sync-bn --seed 3 --output "$T/out" --log-every 100)
TRAIN=("${BASE[@]}" --model-spec "$T/tiny.toml" --global-batch-size 8 --lr 0.01)

# same_losses A B [FIRST_STEP]: /step/loss of run B equals run A's (from step FIRST_STEP) within 1e-9.
same_losses() {
  "$PY" - "$T/out/$1/metrics.h5" "$T/out/$2/metrics.h5" "${3:-1}" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
first = int(sys.argv[3])
la, sa, lb = a["step/loss"][:], a["step/step"][:], b["step/loss"][:]
la = la[sa >= first]
ok = len(la) == len(lb) and len(lb) > 0 and np.all(np.abs(la - lb) <= 1e-9 * np.abs(la))
if not ok:
    print("losses differ:", la, lb)
sys.exit(0 if ok else 1)
EOF
}

# ---- equivalence: one rank vs dp, zero2, fsdp on two ranks ---------------------------------
"${TRAIN[@]}" --epochs 2 --run-name one >"$T/one.log" 2>&1 || fail "one-rank run" "$(tail -2 "$T/one.log")"
for mode in "dp" "dp --optimizer-sharding zero2" "fsdp"; do
  name=$(echo "$mode" | tr -d ' -' | sed 's/optimizersharding//')
  # shellcheck disable=SC2086
  if "${MPI[@]}" -np 2 "${TRAIN[@]}" --epochs 2 --run-name "$name" --distributed-mode $mode >"$T/$name.log" 2>&1 &&
    same_losses one "$name"; then
    pass "mpirun -np 2 --distributed-mode $mode reproduces the one-rank losses"
  else
    fail "mpirun -np 2 --distributed-mode $mode" "$(tail -3 "$T/$name.log")"
  fi
done
if "$PY" -c "
import h5py, sys
f = h5py.File('$T/out/dp/metrics.h5', 'r')
sys.exit(0 if all(k in f['step'] for k in ('comm_ms', 'comm_mb')) and (f['step/comm_mb'][:] > 0).all() else 1)"; then
  pass "metrics.h5 has /step/comm_ms and /step/comm_mb"
else
  fail "comm metrics" "missing /step/comm_ms or /step/comm_mb"
fi
if [ "$(grep -c '^spikemesh train:' "$T/out/dp/log.txt")" -eq 1 ]; then
  pass "one log.txt header (rank 0 writes the log)"
else
  fail "log written once" "$(head -3 "$T/out/dp/log.txt")"
fi

# ---- a dp=2 ZeRO checkpoint resumes on one rank ------------------------------------------------
"${MPI[@]}" -np 2 "${TRAIN[@]}" --epochs 2 --max-steps 5 --run-name z2 --distributed-mode dp \
  --optimizer-sharding zero >"$T/z2.log" 2>&1
if "${TRAIN[@]}" --epochs 2 --run-name z2to1 --resume "$T/out/z2/ckpt_000000005.h5" >"$T/z2to1.log" 2>&1 &&
  same_losses one z2to1 6; then
  pass "dp=2 ZeRO checkpoint resumes on one rank with the same trajectory"
else
  fail "dp=2 ZeRO checkpoint resumes on one rank" "$(tail -3 "$T/z2to1.log")"
fi

# ---- SIGUSR1 to mpirun: every rank stops at the same step, checkpoints, exit 0 -----------------
# (mpirun itself, not through `timeout`: mpirun forwards SIGUSR1 to its ranks)
mpirun --bind-to none --oversubscribe -np 2 "${TRAIN[@]}" --epochs 400 --run-name sig --distributed-mode fsdp \
  >"$T/sig.log" 2>&1 &
PID=$!
for _ in $(seq 1 1200); do
  [ -f "$T/out/sig/metrics.h5" ] && grep -q "^spikemesh train:" "$T/out/sig/log.txt" 2>/dev/null && break
  sleep 0.05
done
sleep 1
kill -USR1 "$PID" 2>/dev/null
for _ in $(seq 1 600); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$PID" 2>/dev/null; then kill -TERM "$PID"; sleep 2; kill -KILL "$PID" 2>/dev/null; fi
wait "$PID"
RC=$?
CK=$(ls "$T/out/sig"/ckpt_*.h5 2>/dev/null | tail -n 1)
if [ "$RC" -eq 0 ] && [ -n "$CK" ] && grep -q "stop requested" "$T/out/sig/log.txt"; then
  pass "SIGUSR1 under mpirun: checkpoint at a common step, exit 0"
else
  fail "SIGUSR1 under mpirun" "exit $RC, checkpoint '${CK}', $(tail -2 "$T/sig.log")"
fi
STEP=$(basename "${CK:-ckpt_0.h5}" .h5 | sed 's/ckpt_0*//')
STEP=${STEP:-0}
if "${MPI[@]}" -np 2 "${TRAIN[@]}" --epochs 400 --max-steps $((STEP + 2)) --run-name sig --distributed-mode fsdp \
  --resume auto >"$T/sig2.log" 2>&1 && grep -q "resumed from $CK" "$T/out/sig/log.txt"; then
  pass "resume auto after SIGUSR1 under mpirun"
else
  fail "resume after SIGUSR1 under mpirun" "$(tail -3 "$T/sig2.log")"
fi

# ---- bad configurations: non-zero exit, one error line, no hang, nothing written ---------------
# expect_mpi_error NAME NEEDLE -- MPIRUN-ARGS...
expect_mpi_error() {
  local name=$1 needle=$2
  shift 3
  "${MPI[@]}" "$@" >"$T/bad.out" 2>"$T/bad.err" </dev/null
  local rc=$? n
  n=$(grep -c '^spikemesh: error:' "$T/bad.err")
  if [ "$rc" -eq 124 ]; then fail "$name" "hung (killed by timeout)"
  elif [ "$rc" -eq 0 ]; then fail "$name" "exit code 0"
  elif [ "$n" -ne 1 ]; then fail "$name" "$n 'spikemesh: error:' lines: $(head -3 "$T/bad.err")"
  elif ! grep '^spikemesh: error:' "$T/bad.err" | grep -qF -- "$needle"; then
    fail "$name" "message does not name '$needle': $(grep '^spikemesh: error:' "$T/bad.err")"
  else pass "$name"; fi
}
expect_mpi_error "global batch not divisible by dp" "--global-batch-size 7" -- \
  -np 2 "${BASE[@]}" --model-spec "$T/tiny.toml" --run-name bad1 --distributed-mode dp --global-batch-size 7
[ -e "$T/out/bad1" ] && fail "nothing written for a bad configuration" "$T/out/bad1 exists"
expect_mpi_error "dataset shorter than one global batch" "fewer than one global batch" -- \
  -np 2 "${BASE[@]}" --model-spec "$T/tiny.toml" --run-name bad2 --distributed-mode dp --global-batch-size 64
expect_mpi_error "fsdp with pipeline parallelism refused" "FSDP is not combined with pipeline parallelism" -- \
  -np 2 "${TRAIN[@]}" --run-name bad3 --distributed-mode fsdp --mesh-shape 1 1 2
expect_mpi_error "two ranks without a distributed mode" "--distributed-mode" -- \
  -np 2 "${TRAIN[@]}" --run-name bad4
expect_mpi_error "ranks disagreeing on the configuration" "disagree" -- \
  -np 1 "${BASE[@]}" --model-spec "$T/tiny.toml" --run-name bad5 --distributed-mode dp --lr 0.1 : \
  -np 1 "${BASE[@]}" --model-spec "$T/tiny.toml" --run-name bad5 --distributed-mode dp --lr 0.2
sed 's/name = "tiny_dvs"/name = "other_dvs"/' "$T/tiny.toml" >"$T/other.toml"
expect_mpi_error "a checkpoint of another model" "ckpt_000000005.h5" -- \
  -np 2 "${BASE[@]}" --model-spec "$T/other.toml" --global-batch-size 8 --run-name bad6 --distributed-mode fsdp \
  --resume "$T/out/z2/ckpt_000000005.h5"

echo "dp_train: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
