#!/usr/bin/env bash
# gpu_check.sh — the whole GPU procedure in one call on a GPU machine (issue "CUDA backend"):
#   1. unpack .device/spikemesh.tar.xz (made by scripts/gpu_bundle.sh) and source its env.sh;
#   2. every *Gpu* unit test (kernels vs the CPU reference, whole steps GPU vs CPU, bf16,
#      spikemesh train on the GPU), then tests/e2e/gpu_errors.sh with the bundled binary;
#   3. the fused LIF kernel benchmark (CUDA events; GB/s vs a device-to-device copy);
#   4. cifar10dvs_vgg, T 10, batch 2 and 32, fp32 and bf16: spikemesh bench beside
#      bench/torch_bench.py (torch.compile) on the same GPU, appended to $OUT/bench.jsonl;
#   5. spikformer_ti 224 px, batch 4, T 8, fp32 and bf16 the same way (issue 12's GPU target),
#      and the SSA forward paths (popcount vs GEMM) from GpuSsa.ForwardPathTimings;
#   6. the side-by-side table last (bench/compare.py), so it is in the reply's tail.
# Logs go to $OUT (or /tmp/gpu_check). Any failing step is reported and the rest still runs;
# the exit status is non-zero when a test failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"
cd "$ROOT"
B=$(mktemp -d); tar -xJf .device/spikemesh.tar.xz -C "$B" && . "$B/env.sh" || { echo "no bundle: run scripts/gpu_bundle.sh first"; exit 2; }
SM=$B/bin/spikemesh
PY=${PY:-$(command -v python3)}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
status=0
echo "== GPU unit tests =="
"$B/bin/spikemesh_tests" --gtest_filter='*Gpu*' --gtest_color=no --gtest_brief=1 > "$OUT/gpu_tests.log" 2>&1 || status=1
tail -25 "$OUT/gpu_tests.log"
echo "== device paths of the real binary (bench and train: cuda, auto, bf16, fp16, errors) =="
BIN=$SM bash tests/e2e/gpu_errors.sh > "$OUT/gpu_errors.log" 2>&1 || status=1; tail -14 "$OUT/gpu_errors.log"
echo "== LIF kernel =="
"$SM" bench --kernel lif --device cuda 2>&1 | tee "$OUT/lif.log" | tail -12
LOG=$OUT/bench.jsonl
for prec in fp32 bf16; do
  for b in 2 32; do
    args=(--model cifar10dvs_vgg --batch-size "$b" --T 10 --steps 20 --warmup 5)
    echo "== bench $prec batch $b =="
    "$SM" bench "${args[@]}" --device cuda --precision "$prec" --result-log "$LOG" 2>&1 | tail -6 || status=1
    "$PY" bench/torch_bench.py "${args[@]}" --device cuda --precision "$prec" --compile --result-log "$LOG" 2>&1 | tail -4 || true
  done
done
echo "== SSA forward paths (GpuSsa.ForwardPathTimings) =="
grep "ssa forward" "$OUT/gpu_tests.log" || "$B/bin/spikemesh_tests" --gtest_filter='GpuSsa.ForwardPathTimings' --gtest_color=no 2>&1 | grep "ssa forward"
for prec in fp32 bf16; do
  args=(--model spikformer_ti --image-size 224 --batch-size 4 --T 8 --steps 20 --warmup 5)
  echo "== bench spikformer_ti $prec batch 4 =="
  "$SM" bench "${args[@]}" --device cuda --precision "$prec" --result-log "$LOG" 2>&1 | tail -6 || status=1
  "$PY" bench/torch_bench.py "${args[@]}" --device cuda --precision "$prec" --compile --result-log "$LOG" 2>&1 | tail -4 || true
done
echo "== spikemesh vs PyTorch (torch.compile), same GPU =="
"$PY" bench/compare.py "$LOG"
exit $status
