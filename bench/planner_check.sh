#!/usr/bin/env bash
# planner_check.sh — the layout cost model (docs/architecture.md §5b) against measurement: for
# each model and world size, `spikemesh plan --prefer` writes every feasible layout's predicted
# step time and peak memory (calibrating first if needed), then `spikemesh bench` runs each of
# those layouts on this machine; bench/planner_check.py joins them into a table, the accuracy
# figures, the picks of --prefer speed/memory against the measured best, SpikingJelly's rule,
# and a scatter plot (PNG).
#
#   bash bench/planner_check.sh            every layout of cifar10dvs_vgg (T 4) and spikformer_cifar
#                                          (T 4) at 2 and 4 ranks, global batch 8 (~30 min on 2 cores)
#   MEMOPT=0 bash bench/planner_check.sh   memopt level 0 layouts only (about half)
#   PREDICT_ONLY=1 bash bench/planner_check.sh   predictions again (a new calibration; with
#                                          KEEP_CALIBRATION=1 the earlier one), the measurements
#                                          of an earlier run kept: the report only
# Environment: BIN (build/bin/spikemesh), OUT (bench/planner_check: predictions, measurements,
# calibration_w2.json, calibration_w4.json, table.md, planner_check.png), WORLDS ("2 4"), BATCH (8, global), STEPS (3),
# WARMUP (1), MODELS ("vgg spikformer"). Peak memory is the allocator's (max over ranks).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN=${BIN:-build/bin/spikemesh}
OUT=${OUT:-bench/planner_check}
WORLDS=${WORLDS:-"2 4"}
BATCH=${BATCH:-8}
STEPS=${STEPS:-3}
WARMUP=${WARMUP:-1}
MEMOPT=${MEMOPT:-1}
MODELS=${MODELS:-"vgg spikformer"}
PREDICT_ONLY=${PREDICT_ONLY:-0}
PY=${PY:-/usr/bin/python3}
[ -x "$BIN" ] || { echo "planner_check: $BIN not found (make first, or set BIN)" >&2; exit 2; }
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMP_NUM_THREADS  # spikemesh divides the cores among the ranks of the node, as in training
MPIRUN=(mpirun --oversubscribe --bind-to none)
# one calibration file per world size (the machine's fingerprint includes it), so that a later
# PREDICT_ONLY=1 run with KEEP_CALIBRATION=1 predicts from the very measurements the runs used
KEEP_CALIBRATION=${KEEP_CALIBRATION:-0}
[ "$PREDICT_ONLY" = 1 ] && [ "$KEEP_CALIBRATION" != 1 ] && rm -f "$OUT"/calibration_w*.json
model_args() {
  case $1 in
    vgg) echo "--model cifar10dvs_vgg --T 4" ;;
    spikformer) echo "--model spikformer_cifar" ;;
    *) echo "planner_check: unknown model '$1' (vgg, spikformer)" >&2; exit 2 ;;
  esac
}
start=$SECONDS
for name in $MODELS; do
  read -r -a MARGS <<<"$(model_args "$name")"
  for W in $WORLDS; do
    pred="$OUT/pred_${name}_w${W}.jsonl" meas="$OUT/measured_${name}_w${W}.jsonl" CAL="$OUT/calibration_w${W}.json"
    [ "$PREDICT_ONLY" = 1 ] || : >"$meas"
    echo "== $name, $W ranks, global batch $BATCH: predictions"
    "${MPIRUN[@]}" -np "$W" "$BIN" plan "${MARGS[@]}" --global-batch-size "$BATCH" --batch-size 1 --prefer memory \
      --calibration "$CAL" --top 3 --predictions "$OUT/pred_${name}_w${W}_memory.jsonl" --device cpu
    "${MPIRUN[@]}" -np "$W" "$BIN" plan "${MARGS[@]}" --global-batch-size "$BATCH" --batch-size 1 --prefer speed \
      --calibration "$CAL" --top 3 --predictions "$pred" --device cpu
    [ "$PREDICT_ONLY" = 1 ] && continue
    n=0
    while IFS= read -r args; do
      n=$((n + 1))
      [ "$MEMOPT" = 0 ] && [[ "$args" == *"--memopt-level 1"* ]] && continue
      echo "-- [$((SECONDS - start)) s] $name W=$W: $args"
      # shellcheck disable=SC2086
      "${MPIRUN[@]}" -np "$W" "$BIN" bench "${MARGS[@]}" $args --steps "$STEPS" --warmup "$WARMUP" --device cpu \
        --result-log "$meas" </dev/null >"$OUT/last_bench.log" 2>&1 ||
        { echo "planner_check: bench failed ($args):"; tail -5 "$OUT/last_bench.log"; }
    done < <("$PY" bench/planner_check.py --bench-args "$pred" --batch "$BATCH")
  done
done
"$PY" bench/planner_check.py --report "$OUT" --batch "$BATCH"
echo "planner_check: $((SECONDS - start)) s; table $OUT/table.md, plot $OUT/planner_check.png"
