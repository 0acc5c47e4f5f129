#!/usr/bin/env bash
# pp_schedules.sh — the pipeline schedules side by side on one configuration: for each of
# gpipe, 1f1b, interleaved (2 virtual stages) and zero_bubble (2 virtual stages), `spikemesh
# bench --distributed-mode pp` on 2 ranks bound to their own cores, in interleaved rounds;
# prints a markdown table of medians: step latency, samples/s, measured bubble, the bubble the
# simulator gives with the costs measured in the same steps, and each stage's peak memory.
# Usage: bench/pp_schedules.sh [ROUNDS] [extra bench flags...]
#   e.g. bench/pp_schedules.sh 3 --model cifar10dvs_vgg --batch-size 8 --T 4 --steps 5 --warmup 2
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
ROUNDS="${1:-3}"; shift || true
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--model cifar10dvs_vgg --batch-size 8 --T 4 --steps 5 --warmup 2)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
LOG="$(mktemp /tmp/pp_schedules.XXXXXX.jsonl)"
for r in $(seq 1 "$ROUNDS"); do
  for s in "gpipe 1" "1f1b 1" "interleaved 2" "zero_bubble 2"; do
    set -- $s
    echo "round $r/$ROUNDS: $1 (v$2)" >&2
    mpirun --bind-to core -np 2 "$BIN" bench "${ARGS[@]}" --distributed-mode pp --mesh-shape 1 1 2 \
      --pp-schedule "$1" --pp-virtual-stages "$2" --json | grep '^{' >>"$LOG"
  done
done
/usr/bin/python3 - "$LOG" <<'PYEOF'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in recs:
    by.setdefault((r["pp_schedule"], r["pp_virtual_stages"]), []).append(r)
r0 = recs[0]
print(f"{r0['model']} b{r0['batch_size']} T{r0['T']}, pp 2, {r0['pp_microbatches']} microbatches, "
      f"{len(recs) // len(by)} rounds (medians; range of step ms in brackets)\n")
print("| schedule | step ms | samples/s | bubble measured | bubble simulated (measured costs) | bubble simulated (F=B=W) | peak MiB stage 0 / 1 |")
print("|---|---|---|---|---|---|---|")
for (k, v), rs in by.items():
    med = lambda f: statistics.median(f(r) for r in rs)
    ms = [r["step_latency_ms"] for r in rs]
    print(f"| {k} (v{v}) | {med(lambda r: r['step_latency_ms']):.0f} [{min(ms):.0f}–{max(ms):.0f}] | "
          f"{med(lambda r: r['global_throughput_sps']):.2f} | {100 * med(lambda r: r['pp_bubble_measured']):.1f}% | "
          f"{100 * med(lambda r: r['pp_bubble_simulated']):.1f}% | {100 * med(lambda r: r['pp_bubble_simulated_unit_costs']):.1f}% | "
          f"{med(lambda r: r['pp_stage_peak_allocated_mb'][0]):.0f} / {med(lambda r: r['pp_stage_peak_allocated_mb'][1]):.0f} |")
PYEOF
echo "records: $LOG" >&2
