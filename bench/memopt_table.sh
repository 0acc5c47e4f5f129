#!/usr/bin/env bash
# bench/memopt_table.sh — memopt levels side by side (docs/memopt.md; table in docs/results.md): spikemesh bench at
# every --memopt-level on the configurations of the memopt targets, one process at a time, records appended
# to $OUT (JSON lines), then a Markdown table of peak allocated MB, peak RSS, step time and
# search time (in level-0 steps too), each level's ratio to level 0 of the same configuration,
# and SpikingJelly's published memopt figures beside it as context.
#   BIN=build/bin/spikemesh OUT=output/memopt.jsonl bash bench/memopt_table.sh [quick]
# quick: small sizes (a smoke run of the script itself, seconds).
set -euo pipefail
BIN=${BIN:-build/bin/spikemesh}
OUT=${OUT:-output/memopt.jsonl}
PY=${PY:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$(dirname "$OUT")"
: > "$OUT"
run() {  # label, then bench flags
  local label=$1; shift
  echo "== $label: $BIN bench $*" >&2
  "$BIN" bench --json "$@" | tail -n 1 | "$PY" -c 'import json,sys; r=json.loads(sys.stdin.read()); r["label"]=sys.argv[1]; print(json.dumps(r))' "$label" >> "$OUT"
}
if [ "${1:-}" = quick ]; then
  for L in 0 1 2 3 4; do
    run "csnn b8 T4" --model fmnist_csnn --var C=8 --batch-size 8 --T 4 --steps 2 --warmup 1 --memopt-level $L
  done
else
  for L in 0 1 2 3 4; do
    run "spikformer_ti 224 b4 T8" --model spikformer_ti --batch-size 4 --T 8 --steps 3 --warmup 1 --memopt-level $L
  done
  for L in 0 1 2 3 4; do
    run "cifar10dvs_vgg b8 T10" --model cifar10dvs_vgg --batch-size 8 --T 10 --steps 2 --warmup 1 --memopt-level $L
  done
  for T in 8 32; do
    for L in 0 3; do
      run "cifar10dvs_vgg b2 T$T" --model cifar10dvs_vgg --batch-size 2 --T $T --steps 2 --warmup 1 --memopt-level $L
    done
  done
fi
"$PY" - "$OUT" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = {}
for r in rows:
    if r["memopt_level"] == 0:
        base[r["label"]] = r
print("| configuration | level | peak allocated MB | x level 0 | peak RSS MB | step ms | x level 0 | search ms (trial steps) | search in level-0 steps |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    b = base.get(r["label"])
    pr = r["peak_allocated_mb"] / b["peak_allocated_mb"] if b else float("nan")
    tr = r["step_latency_ms"] / b["step_latency_ms"] if b else float("nan")
    sr = r["optimize_ms"] / b["step_latency_ms"] if b else float("nan")
    print(f'| {r["label"]} | {r["memopt_level"]} | {r["peak_allocated_mb"]:.0f} | {pr:.2f} | {r["peak_rss_mb"]:.0f} | '
          f'{r["step_latency_ms"]:.0f} | {tr:.2f} | {r["optimize_ms"]:.0f} ({r.get("memopt_trial_steps", 0)}) | {sr:.2f} |')
print()
print("SpikingJelly's published memopt figures (its memopt tutorial, RTX 4090; context, not a same-machine ratio):")
print()
print("| configuration | level | peak MB | x level 0 | step time x level 0 | search |")
print("|---|---|---|---|---|---|")
print("| CIFAR10DVSVGG N=8 T=10 | 0 | 1022 | 1.00 | 1.00 | |")
print("| CIFAR10DVSVGG N=8 T=10 | 4 (exhaustive) | 589 | 0.58 | 1.00 | 451 s |")
print("| spikformer_ti 224 b4 T8 | 0 | 2070 | 1.00 | 1.00 | |")
print("| spikformer_ti 224 b4 T8 | 1 | 1298 | 0.63 | 1.56 | |")
PYEOF
