#!/usr/bin/env bash
# gpu_check.sh — the whole GPU procedure in one call on a GPU machine, sized to fit:
# one command of at most ~540 s on a bare GPU machine (no MPI/HDF5/oneDNN, no network).
#
#   bash scripts/gpu_check.sh            on the GPU machine: run(command=..., carry=['.device'],
#                                        timeout_s=540)
#   bash scripts/gpu_check.sh --no-gpu   the rehearsal (make gpu-rehearsal): every step that needs
#                                        no GPU, on a bare root, so a broken bundle shows up here
#
# Order (fail fast, correctness before speed, where the time goes, peers while time lasts):
#   0. preflight — tools (timeout, tar; Python's tarfile when xz is missing), unpack
#      .device/spikemesh.tar.xz, glibc >= the bundle's need (.device/manifest.txt), `ldd` of
#      every bundled program and library with nothing "not found", `nvidia-smi -L` lists a GPU
#      (a machine without a driver FAILS here: it does not skip its way to a pass),
#      `spikemesh --help`. Any failure ends the script at once (exit 2).
#   1. correctness — MPI sanity on the CPU (mpirun -np 2: commtest, a dp train, a pp train);
#      unit *Gpu* tests; `mpirun -np 2 spikemesh_mpi_tests` *Gpu* tests (both ranks on the one
#      GPU: the staged path); tests/e2e/gpu_errors.sh; compute-sanitizer memcheck on a short
#      GPU test subset. With a GPU visible, a skipped GPU test is a FAILURE (tests that need
#      more GPUs than the machine has are named *MultiGpu* and left out). --no-gpu runs the CPU
#      unit tests instead.
#   2. bench — spikemesh's benchmarks at the default numerics: fused LIF kernel vs device copy;
#      cifar10dvs_vgg T10 b2/b32 and spikformer_ti 224 b4 T8, fp32 and bf16 (CUDA graphs auto),
#      vgg b2 fp32 without graphs, spikformer_ti bf16 at --memopt-level 1 and 4 (the CUDA
#      allocator's peaks). --no-gpu: a CPU `bench --profile` (its record and tables).
#   2a. profile — `bench --profile` (one eager step, CUDA events around every leaf layer's
#      pass): vgg b32 fp32 (default numerics, and fast-tuned with TF32 convolutions), vgg b32
#      bf16, spikformer_ti fp32; the tables go to bench.log, every row to the records'
#      layer_profile in bench.jsonl; then a check that the fp32 profiles are there and plausible
#      (rows positive, their sum within the step), its lines also in the summary.
#   2b. conv — vgg b32 fp32 under --conv-algos exact|deterministic|fast (each also -tuned) x
#      --conv-fp32-precision ieee|tf32 with SPIKEMESH_LOG_LEVEL=debug (bench.log names every
#      engine chosen); vgg b2 fp32 with SPIKEMESH_CONV_ALGOS=fast-tuned (the variable as the
#      flags' default); vgg b32 bf16 fast-tuned; spikformer_ti fp32 fast-tuned with conv and
#      matmul precision ieee, then tf32; `bench --kernel conv-layout` (bf16 NCHW vs NHWC
#      convolutions) as information only: its failure fails nothing, and a build without it
#      gets a note.
#   2c. auto — mpirun -np 2 spikemesh calibrate --device cuda --model cifar10dvs_vgg: the cost
#      model's calibration and profile on the GPU, the ranking `--distributed-mode auto` uses.
#   3. the peers on the same GPU — SpikingJelly 2.0 eager (wheels from .device/wheels; vgg b32
#      fp32 both strict and with --tf32 on), then the PyTorch twin and SpikingJelly under
#      torch.compile — while the budget lasts.
# Deadline: no step starts after GPU_CHECK_BUDGET_S (default 480 s; 1500 with --no-gpu) and no
# step runs past GPU_CHECK_HARD_S (default budget + 45 s); every step runs under `timeout`.
# A correctness step left out by the deadline counts as a failure; a peer or an informational
# step left out or failing does not.
# The summary and the side-by-side table (bench/compare.py --all, with each row's convolution
# policy and fp32 precisions) are printed by an EXIT trap, so they come back even when the
# deadline or a timeout cut the run.
# Python runs with the machine's own PATH and LD_LIBRARY_PATH (never the bundle's libraries).
# GPU_CHECK_PARTS (default all) picks step groups for a short targeted rerun, comma-
# separated from: cpu unit graphs mpi errors memcheck bench profile conv auto peers-eager
# peers-compile. A group not picked is listed as "----" and counts neither as a pass nor as a
# failure; preflight always runs.
# Files in $OUT (default /tmp/gpu_check), 7 at most: summary.txt preflight.log tests.log
# mpi_tests.log checks.log bench.log (with the profile tables) bench.jsonl (with the profiles).
# Exit: 0 all correctness steps passed; 1 a correctness step failed or was not run; 2 preflight.
set -uo pipefail

if [ "${1:-}" = "--gtest-no-skip" ]; then  # internal: run a gtest command; exit 3 if it skipped any test
  shift
  tmp=$(mktemp); "$@" 2>&1 | tee "$tmp"; rc=${PIPESTATUS[0]}
  # counts from gtest's summary lines (printed with --gtest_brief too; under mpirun once per rank)
  ran=$(sed -nE 's/^\[==========\] ([0-9]+) tests? from .* ran.*/\1/p' "$tmp" | sort -n | tail -1)
  nskip=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) tests?.*/\1/p' "$tmp" | sort -n | tail -1)
  names=$(grep -E '^\[  SKIPPED \] [A-Za-z_]' "$tmp" | sed 's/ (.*//' | sort -u)
  rm -f "$tmp"
  if [ "$rc" -eq 0 ] && [ "${nskip:-0}" -gt 0 ]; then
    echo "gpu_check: a GPU is visible but ${nskip} GPU test(s) were skipped${names:+:}"; [ -n "$names" ] && echo "$names"
    exit 3
  fi
  [ "$rc" -eq 0 ] && [ "${ran:-0}" -eq 0 ] && { echo "gpu_check: the filter matched no test"; exit 4; }
  exit "$rc"
fi

MODE=gpu
case "${1:-}" in
  --no-gpu) MODE=rehearsal ;;
  "") ;;
  -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "gpu_check: unknown argument '$1' (use --no-gpu or nothing)" >&2; exit 2 ;;
esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"
if [ "$MODE" = gpu ]; then BUDGET=${GPU_CHECK_BUDGET_S:-480}; else BUDGET=${GPU_CHECK_BUDGET_S:-1500}; fi
HARD=${GPU_CHECK_HARD_S:-$((BUDGET + 45))}
START=$SECONDS
SUM=$OUT/summary.txt PRE=$OUT/preflight.log TESTS=$OUT/tests.log MPIT=$OUT/mpi_tests.log
CHECKS=$OUT/checks.log BLOG=$OUT/bench.log JSONL=$OUT/bench.jsonl
: >"$SUM"; : >"$PRE"
status=0
PARTS=${GPU_CHECK_PARTS:-cpu,unit,graphs,mpi,errors,memcheck,bench,profile,conv,auto,peers-eager,peers-compile}
PART=""  # the group of the steps that follow; set before each group
for p in ${PARTS//,/ }; do
  case $p in cpu|unit|graphs|mpi|errors|memcheck|bench|profile|conv|auto|peers-eager|peers-compile) ;;
    *) echo "gpu_check: unknown group '$p' in GPU_CHECK_PARTS (cpu unit graphs mpi errors memcheck bench profile conv auto peers-eager peers-compile)" >&2; exit 2 ;;
  esac
done
ORIG_PATH=$PATH ORIG_LD=${LD_LIBRARY_PATH:-}
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)

say() { echo "$*" | tee -a "$SUM"; }
used() { echo $((SECONDS - START)); }

finish() {
  local rc=$?
  trap - EXIT
  [ "$rc" -eq 2 ] && status=2
  if [ -s "$JSONL" ] && command -v python3 >/dev/null; then
    echo; echo "== spikemesh and its peers on this machine (bench/compare.py --all $(basename "$JSONL")) =="
    timeout 30 env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" python3 bench/compare.py --all "$JSONL" 2>&1 |
      tee -a "$SUM"
  fi
  say ""
  say "gpu_check ($MODE): $(used) s; $(grep -c '^ok ' "$SUM") steps ok, $(grep -c '^FAIL' "$SUM") failed," \
      "$(grep -c '^SKIP' "$SUM") left out by the deadline; exit $status"
  rm -rf "$WORK"
  exit "$status"
}
trap finish EXIT

die() { say "PREFLIGHT FAILED: $*"; status=2; exit 2; }

# step KIND NAME LIMIT_S LOG COMMAND...   KIND: must (a failure or omission fails the run) | peer |
# info (neither: a peer's run, or a measurement that is informational)
step() {
  local kind=$1 name=$2 limit=$3 log=$4; shift 4
  local left=$((HARD - (SECONDS - START)))
  if [[ ",$PARTS," != *",$PART,"* ]]; then
    say "----  $name (not picked: GPU_CHECK_PARTS=$PARTS)"
    return 0
  fi
  if [ $((SECONDS - START)) -ge "$BUDGET" ] || [ "$left" -lt 15 ]; then
    say "SKIP  $name (deadline: $(used) s of $BUDGET used)"
    [ "$kind" = must ] && status=1
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "===== $name ($(date -u +%T), limit ${limit} s): $*" >>"$log"
  local t0=$SECONDS rc
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1 </dev/null
  rc=$?
  local took=$((SECONDS - t0)) why
  case $rc in
    0) say "ok    $name (${took} s)"; return 0 ;;
    124|137) why="timed out after ${limit} s" ;;
    *) why="exit $rc" ;;
  esac
  if [ "$kind" = must ]; then
    status=1; say "FAIL  $name: $why (${took} s; $(basename "$log"))"
  else
    say "$kind  $name: $why (${took} s; $(basename "$log"))"
  fi
  tail -n 6 "$log" | sed 's/^/        /' | tee -a "$SUM"
  return 0
}

# ---- 0. preflight ------------------------------------------------------------------------
say "gpu_check ($MODE) on $(hostname) at $(date -u +%FT%TZ); budget ${BUDGET} s, hard stop ${HARD} s"
command -v timeout >/dev/null || die "'timeout' (coreutils) is missing"
command -v tar >/dev/null || die "'tar' is missing"
[ -f .device/spikemesh.tar.xz ] || die "no .device/spikemesh.tar.xz: run scripts/gpu_bundle.sh here first and carry .device"
B=$WORK/bundle; mkdir -p "$B"
if command -v xz >/dev/null; then
  timeout 120 tar -xJf .device/spikemesh.tar.xz -C "$B" 2>>"$PRE" || die "could not unpack the bundle with tar/xz ($PRE)"
elif command -v python3 >/dev/null; then
  echo "xz missing: unpacking with Python's tarfile" >>"$PRE"
  timeout 120 env PATH="$ORIG_PATH" python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
    .device/spikemesh.tar.xz "$B" 2>>"$PRE" || die "could not unpack the bundle with Python's tarfile ($PRE)"
else
  die "neither xz nor python3 is available to unpack the bundle"
fi
say "ok    unpacked the bundle ($(used) s)"
# shellcheck disable=SC1091
. "$B/env.sh" || die "the bundle's env.sh failed"
SM=$B/bin/spikemesh
# hwloc (inside Open MPI) reports a sandbox's partial /sys CPU topology on stderr; spikemesh's
# one-line error contract (gpu_errors.sh) must not fail on a message that is not ours.
export HWLOC_HIDE_ERRORS=1
# PMIx warns on every start when its zlib compression plugin does not load (seen on the H200
# machine, 2026-11-27, not on the rehearsal root): compression only matters for large PMIx data
# at start-up on many nodes, never for one machine. The plugins' ldd goes to preflight.log.
export PMIX_MCA_pcompress_base_silence_warning=1
find "$B/lib" -name '*.so' -path '*pmix*' 2>/dev/null | while read -r f; do
  echo "ldd $f:"; ldd "$f" 2>&1 | grep -v '=> /\|linux-vdso\|ld-linux'; done >>"$PRE"
for p in spikemesh spikemesh_tests spikemesh_mpi_tests mpirun; do [ -x "$B/bin/$p" ] || die "the bundle lacks bin/$p"; done
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
need=$(awk '$1 == "glibc_needed" {print $2}' .device/manifest.txt 2>/dev/null)
if [ -n "$need" ] && [ -n "$have" ]; then
  [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" = "$need" ] ||
    die "this machine's glibc $have is older than the $need the bundle needs"
  say "ok    glibc $have >= $need"
fi
missing=$( (find "$B/bin" -type f; find "$B/applib" -name '*.so*') | while read -r f; do
  ldd "$f" 2>/dev/null | grep 'not found' | sed "s|^|$(basename "$f"): |"; done | sort -u)
echo "$missing" >>"$PRE"
[ -z "$missing" ] || die "libraries not found: $(echo "$missing" | head -5 | tr '\n' ';')"
say "ok    ldd: every bundled program and library resolves"
if [ "$MODE" = gpu ]; then
  gpus=$(timeout 30 nvidia-smi -L 2>>"$PRE")
  [ -n "$gpus" ] || die "no GPU visible: nvidia-smi -L lists none (driver missing?) — nothing would be verified"
  timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$SUM"
fi
timeout 30 "$SM" --help >>"$PRE" 2>&1 || die "spikemesh --help fails ($PRE)"
[ "$(timeout 30 "$SM" --help 2>&1 | grep -ci 'warning\|mca')" -eq 0 ] || die "spikemesh --help prints MCA warnings ($PRE)"
say "ok    spikemesh --help ($(used) s)"

# ---- 1. correctness ------------------------------------------------------------------------
PART=cpu
MPIRUN=(mpirun --bind-to none --oversubscribe)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} SPIKEMESH_MODELS=$ROOT/input/models
DATA=$WORK/dvs.h5
step must "CPU: make a tiny DVS dataset" 60 "$CHECKS" "$SM" data synth-dvs --out "$DATA" --T 2 --train 16 --test 8
step must "CPU: mpirun -np 2 commtest" 90 "$CHECKS" "${MPIRUN[@]}" -np 2 "$SM" commtest --max-bytes 65536 --iters 2 --warmup 1
CPUTRAIN=("$SM" train --model cifar10dvs_vgg --data "$DATA" --T 2 --global-batch-size 4 --max-steps 2
          --device cpu --output "$WORK/runs" --log-every 1)
step must "CPU: mpirun -np 2 train --distributed-mode dp" 120 "$CHECKS" "${MPIRUN[@]}" -np 2 "${CPUTRAIN[@]}" \
  --run-name dp --distributed-mode dp
step must "CPU: mpirun -np 2 train --distributed-mode pp (1f1b)" 120 "$CHECKS" "${MPIRUN[@]}" -np 2 "${CPUTRAIN[@]}" \
  --run-name pp --mesh-shape 1 1 2 --distributed-mode pp --pp-schedule 1f1b
NOSKIP=(bash "$ROOT/scripts/gpu_check.sh" --gtest-no-skip)
GTEST=(--gtest_color=no --gtest_brief=1)
if [ "$MODE" = gpu ]; then
  # CUDA graphs run first-contact code in one process: their tests get their own step, so a
  # crash there cannot take the other GPU tests' results with it.
  PART=unit
  step must "unit *Gpu* tests (no skips)" 240 "$TESTS" "${NOSKIP[@]}" "$B/bin/spikemesh_tests" "${GTEST[@]}" \
    --gtest_filter='*Gpu*:-*MultiGpu*:*CudaGraph*'
  PART=graphs
  step must "unit CUDA-graph tests (graph replay = eager, bitwise)" 120 "$TESTS" "${NOSKIP[@]}" \
    "$B/bin/spikemesh_tests" "${GTEST[@]}" --gtest_filter='*CudaGraph*'
  PART=mpi
  step must "mpirun -np 2 spikemesh_mpi_tests *Gpu* (one GPU, staged)" 180 "$MPIT" "${NOSKIP[@]}" "${MPIRUN[@]}" -np 2 \
    "$B/bin/spikemesh_mpi_tests" "${GTEST[@]}" --gtest_filter='*Gpu*:-*MultiGpu*'
else
  PART=unit
  step must "CPU unit tests (all but *Gpu*)" 900 "$TESTS" "$B/bin/spikemesh_tests" "${GTEST[@]}" --gtest_filter='-*Gpu*'
  step must "GPU unit tests without a GPU (they must skip, not fail)" 120 "$TESTS" "$B/bin/spikemesh_tests" \
    "${GTEST[@]}" --gtest_filter='*Gpu*'
  PART=mpi
  step must "mpirun -np 2 spikemesh_mpi_tests Comm*" 240 "$MPIT" "${MPIRUN[@]}" -np 2 \
    "$B/bin/spikemesh_mpi_tests" "${GTEST[@]}" --gtest_filter='Comm*:Mesh*'
fi
PART=errors
step must "tests/e2e/gpu_errors.sh (device and precision choices of the real binary)" 180 "$CHECKS" \
  env BIN="$SM" bash tests/e2e/gpu_errors.sh "$SM"
PART=memcheck
if [ "$MODE" = gpu ] && [[ ",$PARTS," == *",memcheck,"* ]]; then
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$CS" ]; then
    say "note  compute-sanitizer not found: memcheck not run"
  else
    MEMCHECK=(env "PATH=$ORIG_PATH:$PATH" "$CS" --tool memcheck --error-exitcode 9 --print-limit 20
              "$B/bin/spikemesh_tests" --gtest_color=no --gtest_brief=1
              --gtest_filter='GpuNeuron.SpikesAndGradientsMatchCpu:GpuNeuron.OddShapesAndLongSequences:GpuNeuron.Bf16AndF16Activations:GpuNeuron.BinaryInputFromPackedBits:GpuPool.*:GpuElementwise.*:GpuLoss.*:GpuPipelinePack.*')
    # gVisor-like runtimes refuse the sanitizer ("Device not supported"): probed first on one
    # small test, so that a runtime's limit is a note, not a failure of our kernels.
    probe=$(timeout 60 "${MEMCHECK[@]:0:9}" "$B/bin/spikemesh_tests" --gtest_color=no \
            --gtest_filter='GpuElementwise.CastsRoundToNearestEven' 2>&1)
    if grep -q "Device not supported\|Unable to find\|error 999" <<<"$probe"; then
      say "note  compute-sanitizer cannot attach to this GPU runtime: memcheck not run ($(grep -m1 -o 'Device not supported\|Unable to find[^.]*\|error 999' <<<"$probe"))"
    else
      step must "compute-sanitizer memcheck (neuron, bit-pack, pool, elementwise, loss kernels)" 120 "$CHECKS" "${MEMCHECK[@]}"
    fi
  fi
fi

# ---- 2. spikemesh's benchmarks ---------------------------------------------------------------
PART=bench
VGG=(--model cifar10dvs_vgg --T 10 --steps 20 --warmup 5)
SPK=(--model spikformer_ti --image-size 224 --batch-size 4 --T 8 --steps 20 --warmup 5)
if [ "$MODE" = gpu ]; then
  step must "spikemesh bench --kernel lif (fused LIF vs device copy)" 60 "$BLOG" "$SM" bench --kernel lif --device cuda
  for prec in fp32 bf16; do
    for b in 2 32; do
      step must "spikemesh cifar10dvs_vgg b$b $prec" 90 "$BLOG" "$SM" bench "${VGG[@]}" --batch-size "$b" \
        --device cuda --precision "$prec" --result-log "$JSONL"
    done
    step must "spikemesh spikformer_ti 224 b4 $prec" 120 "$BLOG" "$SM" bench "${SPK[@]}" --device cuda \
      --precision "$prec" --result-log "$JSONL"
  done
  # the launch-overhead cut measured: the same small-batch step without CUDA graphs
  step must "spikemesh cifar10dvs_vgg b2 fp32 --cuda-graphs off" 90 "$BLOG" "$SM" bench "${VGG[@]}" --batch-size 2 \
    --device cuda --precision fp32 --cuda-graphs off --result-log "$JSONL"
  # memopt on the device: levels 1 and 4 of spikformer_ti bf16 (level 0 is the bf16 run above),
  # the CUDA allocator's peaks in the records
  for lvl in 1 4; do
    step must "spikemesh spikformer_ti 224 b4 bf16 --memopt-level $lvl" 120 "$BLOG" "$SM" bench "${SPK[@]}" \
      --device cuda --precision bf16 --memopt-level "$lvl" --result-log "$JSONL"
  done
  grep -h "ssa forward" "$TESTS" 2>/dev/null | sed 's/^/note  /' | tee -a "$SUM"
  grep -hi "GB/s" "$BLOG" 2>/dev/null | head -4 | sed 's/^/note  /' | tee -a "$SUM"
else
  step must "spikemesh bench --profile on the CPU (the record and the tables)" 120 "$BLOG" "$SM" bench \
    --model fmnist_csnn --var C=4 --T 2 --batch-size 2 --steps 2 --warmup 1 --device cpu --profile --result-log "$JSONL"
  step must "bench --profile's CPU table in bench.log" 10 "$BLOG" grep -q "per layer type (ms per step, leaf layers, CPU)" "$BLOG"
fi

# ---- 2a. where the time goes: one step per layer and pass, CUDA events (bench --profile) -------
# Own runs (the same configurations as above): a profile that fails cannot take the plain
# records with it. The table goes to bench.log, every row to the record's layer_profile.
PART=profile
# $WORK/profile_check.py JSONL: the vgg b32 fp32 and spikformer_ti fp32 records carry a profile
# whose rows are positive and fit in its step (run by the machine's python3)
cat >"$WORK/profile_check.py" <<'PYEOF'
import json, sys
try:
    recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
except OSError as e:
    sys.exit(f"no records: {e}")
bad = []
for model, batch in (("cifar10dvs_vgg", 32), ("spikformer_ti", 4)):
    p = [r["layer_profile"] for r in recs if r.get("backend") == "spikemesh" and r.get("model") == model
         and r.get("batch_size") == batch and r.get("precision") == "fp32" and "layer_profile" in r]
    if not p:
        bad.append(f"{model} b{batch} fp32: no record with layer_profile"); continue
    for q in p:
        rows = q["rows"]; total = sum(x["ms"] for x in rows)
        top = ", ".join(f'{x["layer"]} {x["pass"]} {x["ms"]:.2f} ms' for x in rows[:3])
        print(f"{model} b{batch} fp32: step {q['step_ms']:.2f} ms, {len(rows)} rows, layers {total:.2f} ms; top: {top}")
        if not rows or q["step_ms"] <= 0 or any(x["ms"] < 0 for x in rows) or total > 1.02 * q["step_ms"] + 0.05:
            bad.append(f"{model}: implausible profile")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PYEOF
if [ "$MODE" = gpu ]; then
  step must "spikemesh cifar10dvs_vgg b32 fp32 --profile" 90 "$BLOG" "$SM" bench "${VGG[@]}" --batch-size 32 \
    --device cuda --precision fp32 --profile --result-log "$JSONL"
  step must "spikemesh cifar10dvs_vgg b32 fp32 --conv-algos fast-tuned --conv-fp32-precision tf32 --profile" 90 "$BLOG" \
    "$SM" bench "${VGG[@]}" --batch-size 32 --device cuda --precision fp32 --conv-algos fast-tuned \
    --conv-fp32-precision tf32 --profile --result-log "$JSONL"
  step must "spikemesh cifar10dvs_vgg b32 bf16 --profile" 90 "$BLOG" "$SM" bench "${VGG[@]}" --batch-size 32 \
    --device cuda --precision bf16 --profile --result-log "$JSONL"
  step must "spikemesh spikformer_ti 224 b4 fp32 --profile" 120 "$BLOG" "$SM" bench "${SPK[@]}" --device cuda \
    --precision fp32 --profile --result-log "$JSONL"
  step must "the profiles are in bench.jsonl (rows positive, within the step)" 30 "$BLOG" \
    env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" python3 "$WORK/profile_check.py" "$JSONL"
  grep -q "^ok    the profiles are in" "$SUM" && grep -A4 "^===== the profiles are in" "$BLOG" | tail -n +2 |
    grep -v '^$' | sed 's/^/note  /' | tee -a "$SUM"
fi

# ---- 2b. GPU numerics: convolution policy x fp32 precision; 2c. the cost model on the GPU -----
# --conv-algos exact|deterministic|fast (each also -tuned) x --conv-fp32-precision ieee|tf32 at
# vgg b32 fp32, with SPIKEMESH_LOG_LEVEL=debug so that bench.log names every engine chosen; the
# environment variable as the flags' default once (vgg b2); bf16 and spikformer_ti fp32 under
# fast-tuned, the latter also with TF32 matrix products; the bf16 NCHW/NHWC convolution timing.
if [ "$MODE" = gpu ]; then
  PART=conv
  for fp in ieee tf32; do
    for policy in exact exact-tuned deterministic deterministic-tuned fast fast-tuned; do
      step must "spikemesh cifar10dvs_vgg b32 fp32 --conv-algos $policy --conv-fp32-precision $fp" 90 "$BLOG" \
        env SPIKEMESH_LOG_LEVEL=debug "$SM" bench "${VGG[@]}" --batch-size 32 --device cuda --precision fp32 \
        --conv-algos "$policy" --conv-fp32-precision "$fp" --result-log "$JSONL"
    done
  done
  step must "spikemesh cifar10dvs_vgg b2 fp32 SPIKEMESH_CONV_ALGOS=fast-tuned (the variable as the default)" 90 "$BLOG" \
    env SPIKEMESH_CONV_ALGOS=fast-tuned "$SM" bench "${VGG[@]}" --batch-size 2 --device cuda --precision fp32 \
    --result-log "$JSONL"
  step must "spikemesh cifar10dvs_vgg b32 bf16 --conv-algos fast-tuned" 90 "$BLOG" "$SM" bench "${VGG[@]}" \
    --batch-size 32 --device cuda --precision bf16 --conv-algos fast-tuned --result-log "$JSONL"
  for fp in ieee tf32; do
    step must "spikemesh spikformer_ti 224 b4 fp32 --conv-algos fast-tuned --conv-fp32-precision $fp --matmul-fp32-precision $fp" 120 \
      "$BLOG" "$SM" bench "${SPK[@]}" --device cuda --precision fp32 --conv-algos fast-tuned \
      --conv-fp32-precision "$fp" --matmul-fp32-precision "$fp" --result-log "$JSONL"
  done
  # informational (a failure does not fail the check): a build without this kernel benchmark
  # says so in a note instead
  if timeout 30 "$SM" bench --help 2>/dev/null | grep -q "conv-layout"; then
    step info "spikemesh bench --kernel conv-layout (bf16 NCHW vs NHWC convolutions)" 90 "$BLOG" \
      "$SM" bench --kernel conv-layout --device cuda --batch-size 32 --T 10
  elif [[ ",$PARTS," == *",conv,"* ]]; then
    say "note  bench --kernel conv-layout is not in this build: left out"
  fi
  PART=auto
  step must "mpirun -np 2 spikemesh calibrate --device cuda --model cifar10dvs_vgg (cost model on the GPU)" 150 \
    "$CHECKS" "${MPIRUN[@]}" -np 2 "$SM" calibrate --device cuda --model cifar10dvs_vgg --T 4 --batch-size 4 \
    --calibration "$WORK/calibration.json" --top 8
fi

# ---- 3. the peers on the same GPU (budget permitting) ------------------------------------------
PART=peers-eager
[[ ",$PARTS," == *",peers-eager,"* ]] || PART=peers-compile  # the compiled SpikingJelly needs the wheels too
SJ_SITE=""
if ls .device/wheels/*.whl >/dev/null 2>&1; then
  SJ_SITE=$WORK/site
  step peer "unpack SpikingJelly wheels" 60 "$BLOG" env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" python3 -c \
    'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SJ_SITE" .device/wheels/*.whl
else
  say "note  no .device/wheels: SpikingJelly will not run (scripts/gpu_bundle.sh downloads them)"
fi
PART=peers-eager
if [ "$MODE" = gpu ]; then
  peer_run() {  # peer_run LABEL LIMIT SCRIPT ARGS...
    local label=$1 limit=$2 script=$3; shift 3
    step peer "$label" "$limit" "$BLOG" env PATH="$ORIG_PATH" LD_LIBRARY_PATH="$ORIG_LD" \
      PYTHONPATH="${SJ_SITE:+$SJ_SITE:}$ROOT/bench" PYTHONUNBUFFERED=1 python3 "$script" "$@" --device cuda \
      --result-log "$JSONL"
  }
  for prec in fp32 bf16; do
    for b in 2 32; do
      peer_run "SpikingJelly eager vgg b$b $prec" 90 bench/sj_bench.py "${VGG[@]}" --batch-size "$b" --precision "$prec" --no-compile
    done
    # fp32 b32 also with TF32 (PyTorch's default for convolutions): the TF32 target's peer
    [ "$prec" = fp32 ] && peer_run "SpikingJelly eager vgg b32 fp32 --tf32 on" 90 bench/sj_bench.py "${VGG[@]}" \
      --batch-size 32 --precision fp32 --tf32 on --no-compile
    peer_run "SpikingJelly eager spikformer_ti b4 $prec" 120 bench/sj_bench.py "${SPK[@]}" --precision "$prec" --no-compile
  done
  PART=peers-compile
  for prec in fp32 bf16; do
    peer_run "PyTorch twin torch.compile vgg b2 $prec" 150 bench/torch_bench.py "${VGG[@]}" --batch-size 2 --precision "$prec" --compile
    peer_run "SpikingJelly torch.compile vgg b2 $prec" 150 bench/sj_bench.py "${VGG[@]}" --batch-size 2 --precision "$prec" --compile
  done
  for prec in fp32 bf16; do
    peer_run "PyTorch twin torch.compile vgg b32 $prec" 150 bench/torch_bench.py "${VGG[@]}" --batch-size 32 --precision "$prec" --compile
    peer_run "PyTorch twin torch.compile spikformer_ti b4 $prec" 180 bench/torch_bench.py "${SPK[@]}" --precision "$prec" --compile
  done
elif [ -n "$SJ_SITE" ]; then
  step must "SpikingJelly wheels unpacked (spikingjelly/activation_based present)" 10 "$BLOG" \
    test -f "$SJ_SITE/spikingjelly/activation_based/neuron/__init__.py" -o -f "$SJ_SITE/spikingjelly/activation_based/neuron.py"
fi
exit "$status"
