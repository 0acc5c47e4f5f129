#!/usr/bin/env bash
# gpu_errors.sh — the real `spikemesh` binary's device and precision choices (spikemesh bench,
# and spikemesh train on a tiny synthetic DVS dataset):
#  * without a usable GPU (CPU-only build, no driver, no device): --device cuda fails with one
#    line "spikemesh: error: --device cuda: no usable GPU (rank 0 on HOST: reason)" and a
#    non-zero exit; --device auto runs on the CPU after a one-line notice;
#  * anywhere: an unknown --device or --precision, and bf16/fp16 on the CPU, are one-line errors;
#    so are an unknown SPIKEMESH_CUDNN_API and bench --kernel conv-layout without a GPU;
#  * with a GPU: --device cuda/auto run on it (bf16 and fp16 too), fp64 there is refused;
#    bench --kernel conv-layout prints its table; SPIKEMESH_CUDNN_API=graph and legacy both run;
#  * the GPU numerics flags (--conv-algos, --conv-fp32-precision, --matmul-fp32-precision): a
#    non-default value given for a CPU or fp64 run is a one-line error naming the flag; the same
#    values from the environment are ignored there (config.toml records exact/ieee/ieee); a resume
#    whose flag differs from the run's recorded value warns once and continues with the flag.
#    (The out-of-memory message is checked by the unit test GpuAllocator.OutOfMemoryIsOneClearMessage:
#    no built-in model fills an 80 GB GPU within cuDNN's 2^31-element tensor limit.)
# Every error must exit non-zero (not by a signal, no core dump) with exactly one stderr line
# starting "spikemesh: error:". Usage: tests/e2e/gpu_errors.sh [path/to/spikemesh]
# Exits non-zero on any failure; last line: "gpu_errors: N passed, M failed".
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${1:-${BIN:-$ROOT/build/bin/spikemesh}}")
export OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_ess_singleton_isolated=1
export SPIKEMESH_MODELS=${SPIKEMESH_MODELS:-$ROOT/input/models}  # any build directory finds the built-in models
T=$(mktemp -d /tmp/spikemesh_gpu_errors.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1

PASS=0
FAIL=0
pass() { PASS=$((PASS + 1)); echo "ok   $1"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $1: $2"; }

if [ ! -x "$BIN" ]; then echo "gpu_errors: $BIN not built"; echo "gpu_errors: 0 passed, 1 failed"; exit 1; fi

# expect_error NAME NEEDLE... -- COMMAND...
expect_error() {
  local name=$1 needles=() rc why=""
  shift
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  rm -f "$T"/core*
  "$@" >"$T/stdout" 2>"$T/err" </dev/null
  rc=$?
  local lines first
  lines=$(grep -c '' "$T/err")
  first=$(head -n 1 "$T/err")
  if [ "$rc" -eq 0 ]; then why="exit code 0"
  elif [ "$rc" -ge 128 ]; then why="killed by signal $((rc - 128))"
  elif ls "$T"/core* >/dev/null 2>&1; then why="core dumped"
  elif [ "$lines" -ne 1 ]; then why="$lines stderr lines (want 1)"
  elif [[ "$first" != "spikemesh: error:"* ]]; then why="stderr does not start with 'spikemesh: error:'"
  else
    for n in "${needles[@]}"; do
      [[ "$first" == *"$n"* ]] || { why="message does not name '$n'"; break; }
    done
  fi
  if [ -z "$why" ]; then pass "$name"; else fail "$name" "$why (exit $rc)"; sed 's/^/       stderr: /' "$T/err" | head -n 5; fi
}

# expect_ok NAME NEEDLE... -- COMMAND...: exit 0 and stdout+stderr contain every NEEDLE.
expect_ok() {
  local name=$1 needles=() rc why=""
  shift
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  "$@" >"$T/out" 2>&1 </dev/null
  rc=$?
  if [ "$rc" -ne 0 ]; then why="exit code $rc"
  else
    for n in "${needles[@]}"; do grep -qF -- "$n" "$T/out" || { why="output does not contain '$n'"; break; }; done
  fi
  if [ -z "$why" ]; then pass "$name"; else fail "$name" "$why"; sed 's/^/       output: /' "$T/out" | tail -n 5; fi
}

TINY=("$BIN" bench --model fmnist_csnn --var C=4 --T 2 --batch-size 2 --steps 1 --warmup 0)

expect_error "unknown device" "--device tpu" "cpu, cuda, auto" -- "${TINY[@]}" --device tpu
expect_error "unsupported precision" "--precision fp8" "fp32, bf16, fp16, fp64" -- "${TINY[@]}" --precision fp8
expect_error "bf16 on the CPU" "--precision bf16" "GPU only" -- "${TINY[@]}" --device cpu --precision bf16
expect_error "fp16 on the CPU" "--precision fp16" "GPU only" -- "${TINY[@]}" --device cpu --precision fp16
# the environment's settings are checked at start-up, on every device
expect_error "unknown SPIKEMESH_CONV_ALGOS" "SPIKEMESH_CONV_ALGOS=fastest" "exact, deterministic, fast" "-tuned" -- \
  env SPIKEMESH_CONV_ALGOS=fastest "${TINY[@]}" --device cpu
expect_error "unknown SPIKEMESH_CONV_FP32_PRECISION" "SPIKEMESH_CONV_FP32_PRECISION=half" "ieee, tf32" -- \
  env SPIKEMESH_CONV_FP32_PRECISION=half "${TINY[@]}" --device cpu
expect_error "unknown --matmul-fp32-precision" "--matmul-fp32-precision TF32" "ieee, tf32" -- \
  "${TINY[@]}" --matmul-fp32-precision TF32
expect_error "--conv-fp32-precision tf32 on the CPU" "--conv-fp32-precision tf32" "only on CUDA devices" "--device cpu" -- \
  "${TINY[@]}" --device cpu --conv-fp32-precision tf32
expect_error "--matmul-fp32-precision tf32 with fp64" "--matmul-fp32-precision tf32" "--precision fp64" -- \
  "${TINY[@]}" --precision fp64 --matmul-fp32-precision tf32
expect_ok "GPU numerics from the environment: ignored on the CPU" "on cpu" -- \
  env SPIKEMESH_CONV_ALGOS=fast-tuned SPIKEMESH_CONV_FP32_PRECISION=tf32 SPIKEMESH_MATMUL_FP32_PRECISION=tf32 \
  "${TINY[@]}" --device cpu --conv-algos exact
expect_error "unknown SPIKEMESH_LOG_LEVEL" "SPIKEMESH_LOG_LEVEL=loud" "debug, info, warn, error" -- \
  env SPIKEMESH_LOG_LEVEL=loud "${TINY[@]}" --device cpu
expect_ok "SPIKEMESH_LOG_LEVEL=debug names the CPU kernels" "oneDNN conv2d forward" -- \
  env SPIKEMESH_LOG_LEVEL=debug "${TINY[@]}" --device cpu
expect_error "unknown SPIKEMESH_CUDNN_API" "SPIKEMESH_CUDNN_API=v8" "auto" "graph, legacy" -- \
  env SPIKEMESH_CUDNN_API=v8 "${TINY[@]}" --device cpu
# cuDNN's bf16 layout benchmark: a GPU tool, refused by name elsewhere
LAYOUT=("$BIN" bench --kernel conv-layout --conv-shape 8,16,12,3 --batch-size 2 --T 2 --steps 2 --warmup 1)
expect_error "bench --kernel conv-layout --device cpu" "--kernel conv-layout" "--device cpu" -- "${LAYOUT[@]}" --device cpu

# spikemesh train: the same choices; --device defaults to auto.
"$BIN" data synth-dvs --out "$T/dvs.h5" --T 2 --train 8 --test 4 >/dev/null 2>&1 || fail "synth-dvs" "could not make data"
TRAIN=("$BIN" train --model cifar10dvs_vgg --data "$T/dvs.h5" --batch-size 2 --max-steps 1 --output "$T/runs")
expect_error "train: bf16 on the CPU" "--precision bf16" "GPU only" -- "${TRAIN[@]}" --run-name a --device cpu --precision bf16
expect_ok "train: fp64 with the default device runs on the CPU" "fp64" "test accuracy" -- \
  "${TRAIN[@]}" --run-name b --precision fp64
expect_error "train: --conv-algos fast on the CPU" "--conv-algos fast" "--device cpu" -- \
  "${TRAIN[@]}" --run-name n1 --device cpu --conv-algos fast
expect_ok "train: GPU numerics from the environment on the CPU" "test accuracy" -- \
  env SPIKEMESH_CONV_FP32_PRECISION=tf32 SPIKEMESH_CONV_ALGOS=fast "${TRAIN[@]}" --run-name n2 --device cpu
if grep -qx "conv-algos = 'exact'" "$T/runs/n2/config.toml" && grep -qx "conv-fp32-precision = 'ieee'" "$T/runs/n2/config.toml" &&
  grep -qx "matmul-fp32-precision = 'ieee'" "$T/runs/n2/config.toml"; then
  pass "train: config.toml records the numerics the CPU run used (exact/ieee/ieee)"
else
  fail "train: config.toml numerics" "$(grep -e '-algos' -e 'fp32-precision' "$T/runs/n2/config.toml" 2>&1 | tr '\n' ' ')"
fi
# A resume reads the run's recorded value; a flag that changes it wins with one warning.
sed -i "s/^conv-algos = 'exact'$/conv-algos = 'fast'/" "$T/runs/n2/config.toml"
expect_ok "train --resume: a flag changing the recorded --conv-algos warns once" \
  "--conv-algos exact differs from the run's recorded fast: the resumed run continues with exact" "test accuracy" -- \
  "$BIN" train --model cifar10dvs_vgg --data "$T/dvs.h5" --batch-size 2 --max-steps 2 --output "$T/runs" \
  --run-name n2 --device cpu --resume auto --conv-algos exact

if nvidia-smi -L >/dev/null 2>&1; then
  echo "(a GPU is visible: checking the GPU paths)"
  expect_ok "--device cuda runs on the GPU" "on cuda:0" "cudaMalloc calls in the timed steps" -- "${TINY[@]}" --device cuda
  expect_ok "--device auto picks the GPU" "device: cuda:0" "on cuda:0" -- "${TINY[@]}" --device auto
  expect_ok "bf16 on the GPU" "bf16 on cuda:0" -- "${TINY[@]}" --device cuda --precision bf16
  expect_ok "fp16 on the GPU (loss scaling)" "loss scale" -- "${TINY[@]}" --device cuda --precision fp16
  expect_error "fp64 on the GPU" "--precision fp64" "CPU only" -- "${TINY[@]}" --device cuda --precision fp64
  expect_ok "train on the GPU" "cuda:0" "test accuracy" -- "${TRAIN[@]}" --run-name c --device cuda
  expect_ok "train: the default device is the GPU" "device: cuda:0" "test accuracy" -- "${TRAIN[@]}" --run-name d
  expect_ok "train: bf16 on the GPU" "bf16 activations" "test accuracy" -- "${TRAIN[@]}" --run-name e --precision bf16
  expect_error "train: fp64 on the GPU" "--precision fp64" "CPU only" -- "${TRAIN[@]}" --run-name f --device cuda --precision fp64
  expect_ok "bench --kernel conv-layout times NCHW and NHWC" "conv-layout: bf16" "8,16,12,3" "fwd" "bwd-data" \
    "bwd-filter" "total" -- "${LAYOUT[@]}"
  for api in graph legacy; do
    expect_ok "SPIKEMESH_CUDNN_API=$api runs the GPU step" "on cuda:0" -- env SPIKEMESH_CUDNN_API=$api "${TINY[@]}" --device cuda
  done
  expect_ok "SPIKEMESH_LOG_LEVEL=debug names the cuDNN engine per shape" "cuDNN graph fwd f32" ": engine " "workspace" -- \
    env SPIKEMESH_LOG_LEVEL=debug "${TINY[@]}" --device cuda
else
  echo "(no GPU visible: checking the no-GPU paths)"
  expect_error "--device cuda without a GPU" "--device cuda: no usable GPU" "rank 0" -- "${TINY[@]}" --device cuda
  expect_ok "--device auto falls back to the CPU" "--device auto: no usable GPU" "running on the CPU" "on cpu" -- \
    "${TINY[@]}" --device auto
  expect_error "train --device cuda without a GPU" "--device cuda: no usable GPU" "rank 0" -- "${TRAIN[@]}" --run-name g --device cuda
  expect_error "train: bf16 without a GPU" "--precision bf16" "needs a GPU" -- "${TRAIN[@]}" --run-name h --precision bf16
  expect_error "bench --kernel conv-layout without a GPU" "--kernel conv-layout needs a GPU" -- "${LAYOUT[@]}"
  expect_ok "train: the default device falls back to the CPU" "no usable GPU" "running on the CPU" "test accuracy" -- \
    "${TRAIN[@]}" --run-name i
fi

echo "gpu_errors: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
