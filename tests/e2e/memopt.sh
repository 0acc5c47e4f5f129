#!/usr/bin/env bash
# memopt.sh — memopt from the command line: `spikemesh train` at --memopt-level 1..4 (and a
# --memory-budget-mb search from level 0) reproduces the level-0 losses (fp64, a two-block
# conv-BN-LIF VGG with dropout on synthetic events) alone and under `mpirun -np 2` (dp with
# synced BN, pp 1f1b), logs what memopt chose, and writes step_peak_mem_mb; `spikemesh bench`
# records the memopt fields for real; `spikemesh plan --memopt-level 4` prints the per-unit
# choice with measured and predicted peaks, and under `mpirun` with a pipeline, per stage; bad memopt flags exit non-zero on every rank with
# one message naming the flag.
# Usage: tests/e2e/memopt.sh [path/to/spikemesh]   (default: $BIN, else build/bin/spikemesh)
# Last line: "memopt: N passed, M failed"; exits non-zero on any failure.
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${1:-${BIN:-$ROOT/build/bin/spikemesh}}")
PY=${PY:-/usr/bin/python3}
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(timeout 180 mpirun --bind-to none --oversubscribe)
T=$(mktemp -d /tmp/spikemesh_memopt.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1

PASS=0
FAIL=0
pass() { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1: $2"; }
finish() { echo "memopt: $PASS passed, $FAIL failed"; [ "$FAIL" -eq 0 ]; exit $?; }

if [ ! -x "$BIN" ]; then echo "memopt: $BIN not built"; FAIL=1; finish; fi
"$BIN" data synth-dvs --out "$T/dvs.h5" --T 4 --size 16 --train 32 --test 8 >/dev/null || { FAIL=1; finish; }
cat >"$T/tiny.toml" <<'EOF'
[model]
name = "tiny_dvs"
input = [2, 16, 16]
num_classes = 10
T = 4
loss = "mean_ce"
input_kind = "events"

[neurons.lif]
type = "lif"
tau = 1.333
decay_input = false
detach_reset = true
surrogate = "atan"

[[unit]]
name = "features.0"
layers = [
  { type = "conv2d", name = "proj_bn.0", in_channels = 2, out_channels = 8, kernel_size = 3, padding = 1, bias = false },
  { type = "batchnorm2d", name = "proj_bn.1", num_features = 8 },
  { type = "neuron", name = "neuron", neuron = "lif" },
]

[[unit]]
name = "features.1"
layers = [
  { type = "avgpool2d", name = "proj_bn.0", kernel_size = 2 },
  { type = "conv2d", name = "proj_bn.1", in_channels = 8, out_channels = 8, kernel_size = 3, padding = 1, bias = false },
  { type = "batchnorm2d", name = "proj_bn.2", num_features = 8 },
  { type = "neuron", name = "neuron", neuron = "lif" },
]

[[unit]]
name = "classifier"
layers = [
  { type = "avgpool2d", name = "pool", kernel_size = 2 },
  { type = "flatten", name = "flatten" },
  { type = "dropout", name = "drop", p = 0.25 },
  { type = "linear", in_features = 128, out_features = 10 },
]
EOF
TRAIN=("$BIN" train --data "$T/dvs.h5" --model-spec "$T/tiny.toml" --precision fp64 --sync-bn --seed 3
       --output "$T/out" --log-every 100 --global-batch-size 8 --lr 0.01 --epochs 2)

# same_losses A B: /step/loss of run B equals run A's within 1e-9 (relative); B has step_peak_mem_mb.
same_losses() {
  "$PY" - "$T/out/$1/metrics.h5" "$T/out/$2/metrics.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
la, lb = a["step/loss"][:], b["step/loss"][:]
ok = len(la) == len(lb) and len(lb) > 0 and np.all(np.abs(la - lb) <= 1e-9 * np.abs(la))
ok = ok and "step_peak_mem_mb" in b["step"] and (b["step/step_peak_mem_mb"][:] > 0).all()
if not ok:
    print("losses differ:", la, lb)
sys.exit(0 if ok else 1)
EOF
}

"${TRAIN[@]}" --run-name l0 >"$T/l0.log" 2>&1 || fail "level 0 run" "$(tail -2 "$T/l0.log")"
for L in 1 2 3 4; do
  if "${TRAIN[@]}" --run-name "l$L" --memopt-level $L >"$T/l$L.log" 2>&1 && same_losses l0 "l$L" &&
    grep -q "memopt per unit" "$T/out/l$L/log.txt"; then
    pass "train --memopt-level $L reproduces the level-0 losses and logs its choice"
  else
    fail "train --memopt-level $L" "$(tail -3 "$T/l$L.log")"
  fi
done
if "${TRAIN[@]}" --run-name budget --memory-budget-mb 1000000 >"$T/budget.log" 2>&1 && same_losses l0 budget &&
  grep -q "memopt search: 0 trial steps" "$T/budget.log"; then
  pass "--memory-budget-mb from level 0 stops at level 0 when it fits"
else
  fail "--memory-budget-mb 1000000" "$(grep -m2 memopt "$T/budget.log")"
fi
if "${MPI[@]}" -np 2 "${TRAIN[@]}" --run-name dp4 --distributed-mode dp --memopt-level 4 >"$T/dp4.log" 2>&1 &&
  same_losses l0 dp4; then
  pass "mpirun -np 2 dp --memopt-level 4 reproduces the one-rank losses"
else
  fail "dp memopt 4" "$(tail -3 "$T/dp4.log")"
fi
if "${MPI[@]}" -np 2 "${TRAIN[@]}" --run-name pp3 --distributed-mode pp --mesh-shape 1 1 2 --pp-microbatches 2 \
     --pp-layout "2|1" --memopt-level 3 >"$T/pp3.log" 2>&1 &&
  "${TRAIN[@]}" --run-name acc2 --grad-accum 2 >"$T/acc2.log" 2>&1 && same_losses acc2 pp3; then
  pass "mpirun -np 2 pp --memopt-level 3 reproduces one rank with --grad-accum 2"
else
  fail "pp memopt 3" "$(tail -3 "$T/pp3.log")"
fi

# bench: the record's memopt fields
if "$BIN" bench --model-spec "$T/tiny.toml" --batch-size 4 --steps 1 --warmup 0 --memopt-level 4 --json \
     >"$T/bench.log" 2>&1 && tail -n 1 "$T/bench.log" | "$PY" -c '
import json, sys
r = json.loads(sys.stdin.read())
ok = r["memopt_level"] == 4 and r["memopt_compress_x"] is True and r["optimize_ms"] > 0 and 0 <= r["memopt_trial_steps"] <= 2
sys.exit(0 if ok else 1)'; then
  pass "bench --memopt-level 4 records memopt_level, memopt_compress_x, optimize_ms, memopt_trial_steps"
else
  fail "bench memopt record" "$(tail -2 "$T/bench.log")"
fi
if "$BIN" plan --model-spec "$T/tiny.toml" --batch-size 4 --memopt-level 4 >"$T/plan.log" 2>&1 &&
  grep -q "memopt plan of tiny_dvs: level 4" "$T/plan.log" && grep -q "features.1" "$T/plan.log" &&
  grep -q "measured peak" "$T/plan.log"; then
  pass "plan --memopt-level 4 prints the per-unit choice and peaks"
else
  fail "plan memopt" "$(tail -3 "$T/plan.log")"
fi

# plan under mpirun with a pipeline: each pipeline rank's stage measured under the mesh (its units,
# choices and peak), the stages' units disjoint and covering the model; with the default ratio
# one of the two stages runs level 0.
if "${MPI[@]}" -np 2 "$BIN" plan --model-spec "$T/tiny.toml" --batch-size 4 --mesh-shape 1 1 2 --pp-layout "2|1" \
     --pp-microbatches 2 --memopt-level 2 --pp-memopt-stage-budget-ratio 1 >"$T/plan_pp.log" 2>&1 &&
  "$PY" - "$T/plan_pp.log" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
part = text.split("per pipeline stage", 1)[1]
ranks = re.split(r"\n  pipeline rank ", part)[1:]
units = [set(re.findall(r"^  (features\.\d|classifier) ", r, re.M)) for r in ranks]
peaks = [float(re.search(r"measured peak ([0-9.]+) MB", r).group(1)) for r in ranks]
ok = len(ranks) == 2 and units[0] == {"features.0", "features.1"} and units[1] == {"classifier"} and min(peaks) > 0
if not ok:
    print(part)
sys.exit(0 if ok else 1)
EOF
then
  if "${MPI[@]}" -np 2 "$BIN" plan --model-spec "$T/tiny.toml" --batch-size 4 --mesh-shape 1 1 2 --pp-layout "2|1" \
       --pp-microbatches 2 --memopt-level 1 >"$T/plan_pp_half.log" 2>&1 &&
    [ "$(grep -c "level 0 (its stages are not among memopt's)" "$T/plan_pp_half.log")" = 1 ]; then
    pass "plan under mpirun measures memopt per pipeline stage (its units, choices, peak; level 0 off memopt's stages)"
  else
    fail "plan per stage, ratio 0.5" "$(tail -4 "$T/plan_pp_half.log")"
  fi
else
  fail "plan per pipeline stage" "$(tail -6 "$T/plan_pp.log")"
fi

# bad flags: one message naming the flag, non-zero exit on every rank
bad() {  # NAME NEEDLE -- ARGS
  local name=$1 needle=$2; shift 3
  local out rc
  out=$("${MPI[@]}" -np 2 "${TRAIN[@]}" --run-name bad "$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && echo "$out" | grep -q -- "$needle"; then pass "$name"; else fail "$name" "rc $rc: $(echo "$out" | tail -2)"; fi
}
bad "--memopt-level 5 is refused naming the flag" "memopt-level" -- --memopt-level 5
bad "--pp-memopt-stage-budget-ratio 0 is refused naming the flag" "pp-memopt-stage-budget-ratio" -- \
  --memopt-level 1 --pp-memopt-stage-budget-ratio 0
bad "a budget no configuration meets names the flag and the smallest peak" "memory-budget-mb 0.001: no memopt configuration reaches it; the smallest peak" -- \
  --memopt-level 1 --memory-budget-mb 0.001 --distributed-mode dp
finish
