#!/usr/bin/env bash
# reliability.sh — the reliability guarantees at the real binary: no hang on any collective, every
# numeric flag in its documented range, bounded reads of every user-named text file, and the
# config precedence of --var. Each error case must end every rank with a non-zero exit (not a
# signal, no core), print "spikemesh: error:" exactly once (over all ranks) naming the flag,
# file or operation, and finish within its time limit:
#   * MPMD runs whose ranks read different datasets (one working directory per rank, a relative
#     --data): dp, tp and pp, each refused before the first collective read (< 60 s);
#   * the guard of collective file I/O (tests/mpi/test_blocking_guard.cpp BlockingGuardAbort):
#     ranks at different operations, a rank that never arrives, a body stuck in the library;
#   * flags out of range (threads above the machine, NaN and negative clipping, 32-bit
#     overflow of pp x virtual stages, mesh dims, pp flags without pp), on train, bench, plan;
#   * /dev/zero and a binary file as --config, --model-spec and --pp-schedule-file;
#   * `--config ... --var E=32` overrides E alone; plan and model read --config.
# Usage: BIN=build/bin/spikemesh bash tests/e2e/reliability.sh
# Last line: "reliability: N passed, M failed"; exit status non-zero on any failure.
E2E_NAME=reliability
. "$(dirname "$0")/lib/common.sh"
export OMPI_MCA_ess_singleton_isolated=1
MPI_TESTS="${MPI_TESTS:-$(dirname "$BIN")/spikemesh_mpi_tests}"
MPIRUN=(mpirun --bind-to none --oversubscribe)
cd "$TMP" || exit 1

# expect_fail NAME LIMIT_S NEEDLE... -- COMMAND...: COMMAND exits non-zero (< 128: not killed by a
# signal, and not our timeout) within LIMIT_S seconds, and its output (stdout and stderr) holds
# exactly one "spikemesh: error:" line, on stderr, which contains every NEEDLE and no raw
# control byte.
expect_fail() {
  local name=$1 limit=$2 needles=() rc why="" t0 t1
  shift 2
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  t0=$(date +%s)
  timeout "$((limit + 30))" "$@" >"$TMP/stdout" 2>"$TMP/out" </dev/null
  rc=$?
  t1=$(date +%s)
  local n line
  n=$(grep -c "spikemesh: error:" "$TMP/out" "$TMP/stdout" | awk -F: '{s += $NF} END {print s}')
  line=$(grep -m1 "spikemesh: error:" "$TMP/out")
  if [ "$rc" -eq 124 ]; then why="hung: killed after $((limit + 30)) s"
  elif [ "$rc" -eq 0 ]; then why="exit status 0"
  elif [ "$rc" -ge 128 ]; then why="killed by signal $((rc - 128))"
  elif [ $((t1 - t0)) -gt "$limit" ]; then why="took $((t1 - t0)) s (limit $limit s)"
  elif [ "$n" -ne 1 ]; then why="$n 'spikemesh: error:' lines (want 1)"
  elif printf '%s' "$line" | LC_ALL=C grep -q '[[:cntrl:]]'; then why="raw control bytes in the message"
  else
    for x in "${needles[@]}"; do [[ "$line" == *"$x"* ]] || { why="message does not name '$x'"; break; }; done
  fi
  if [ -z "$why" ]; then ok "$name ($((t1 - t0)) s)"; else bad "$name: $why (exit $rc)"; head -c 2000 "$TMP/out" | sed 's/^/       | /'; fi
}

# ---- datasets: the same schema, 64 vs 128 training samples (a stale node-local copy) ----------
mkdir -p A B
"$PY" - <<'PYEOF' || { bad "cannot write datasets"; echo "reliability: $pass passed, $fail failed"; exit 1; }
import h5py, numpy as np
rng = np.random.default_rng(0)
def ds(path, ntr, nte=16):
    with h5py.File(path, "w") as f:
        f.attrs["num_classes"] = 10; f.attrs["layout"] = "NCHW"; f.attrs["T"] = 0; f.attrs["x_scale"] = 1 / 255.0
        for s, n in (("train", ntr), ("test", nte)):
            f[s + "/x"] = (rng.random((n, 1, 28, 28)) * 255).astype(np.uint8)
            f[s + "/y"] = rng.integers(0, 10, n).astype(np.int64)
ds("A/d.h5", 64); ds("B/d.h5", 128); ds("good.h5", 32)
PYEOF
SMALL=(--model fmnist_csnn --var C=8 --T 2 --batch-size 4 --max-steps 3 --log-every 1 --output "$TMP/runs")

echo "== ranks reading different datasets (MPMD, one working directory each) =="
for case in "dp:2 1 1" "tp:1 2 1" "pp:1 1 2"; do
  mode=${case%%:*}; shape=${case#*:}
  args=(train "${SMALL[@]}" --data d.h5 --run-name "mpmd_$mode" --mesh-shape $shape --distributed-mode "$mode"
        --comm-timeout 10)
  expect_fail "different datasets under $mode" 60 "--data d.h5" "different datasets" "$TMP/A/d.h5" "$TMP/B/d.h5" -- \
    "${MPIRUN[@]}" -np 1 --wdir "$TMP/A" "$BIN" "${args[@]}" : -np 1 --wdir "$TMP/B" "$BIN" "${args[@]}"
done

# The same relative --model-spec naming different models in the two working directories.
cp "$ROOT/input/models/fmnist_csnn.toml" A/net.toml
sed 's/^C *= *[0-9]*/C = 12/' "$ROOT/input/models/fmnist_csnn.toml" >B/net.toml
if cmp -s A/net.toml B/net.toml; then bad "cannot make two different specs (fmnist_csnn.toml has no 'C = N' line)"; else
  args=(train --model-spec net.toml --T 2 --batch-size 4 --max-steps 2 --output "$TMP/runs" --run-name mpmd_spec
        --data "$TMP/good.h5" --distributed-mode dp --comm-timeout 10)
  expect_fail "different model specs under dp" 60 "the ranks disagree on the model" "rank 1" -- \
    "${MPIRUN[@]}" -np 1 --wdir "$TMP/A" "$BIN" "${args[@]}" : -np 1 --wdir "$TMP/B" "$BIN" "${args[@]}"
fi

# A relative --output in two working directories: checkpoints are written collectively into
# one file, so every rank must see rank 0's run directory.
args=(train --model fmnist_csnn --var C=8 --T 2 --batch-size 4 --max-steps 2 --data "$TMP/good.h5" --output runs
      --run-name rel --distributed-mode dp --comm-timeout 10)
expect_fail "--output not shared between ranks" 60 "--output" "rank 1" "does not see the directory" -- \
  "${MPIRUN[@]}" -np 1 --wdir "$TMP/A" "$BIN" "${args[@]}" : -np 1 --wdir "$TMP/B" "$BIN" "${args[@]}"

# A NaN in one f32 training sample that only rank 1 reads: that rank names itself, the job ends.
"$PY" - <<'PYEOF'
import h5py, numpy as np
rng = np.random.default_rng(1)
with h5py.File("nan.h5", "w") as f:
    f.attrs["num_classes"] = 10; f.attrs["layout"] = "NCHW"; f.attrs["T"] = 0; f.attrs["x_scale"] = 1.0
    for s, n in (("train", 32), ("test", 16)):
        x = rng.random((n, 1, 28, 28)).astype(np.float32)
        if s == "train": x[21, 0, 3, 3] = np.nan
        f[s + "/x"] = x; f[s + "/y"] = rng.integers(0, 10, n).astype(np.int64)
PYEOF
expect_fail "a NaN sample read by one rank under dp" 60 "nan.h5: /train/x[21] holds NaN" "rank 1" -- \
  "${MPIRUN[@]}" -np 2 "$BIN" train "${SMALL[@]}" --data nan.h5 --no-shuffle --run-name nan --distributed-mode dp

echo "== the guard of collective file I/O =="
if [ -x "$MPI_TESTS" ]; then
  for c in "mismatch:reached different collective operations:a collective read of /test/x:closing a dataset" \
           "missing:comm timeout:waiting for data from world rank(s) 1:while arriving at a collective read" \
           "stuck:comm timeout:a body blocked in MPI:every rank had arrived"; do
    IFS=: read -r name n1 n2 n3 <<<"$c"
    expect_fail "guard: $name" 30 "$n1" "$n2" "$n3" -- env SPIKEMESH_GUARD_ABORT_CASE="$name" \
      "${MPIRUN[@]}" -np 2 "$MPI_TESTS" --gtest_filter='BlockingGuardAbort.*' --gtest_color=no
  done
else
  bad "guard cases: $MPI_TESTS not built"
fi

echo "== numeric flags in their ranges =="
TRAIN1=("$BIN" train "${SMALL[@]}" --data good.h5)
expect_fail "train --threads 100000" 20 "--threads" "100000" "CPUs" -- "${TRAIN1[@]}" --threads 100000
expect_fail "bench --threads 100000" 20 "--threads" "100000" -- "$BIN" bench --model fmnist_csnn --var C=4 --T 2 \
  --steps 1 --warmup 0 --threads 100000
expect_fail "--clip-grad-norm -1" 20 "--clip-grad-norm" "-1" -- "${TRAIN1[@]}" --clip-grad-norm -1
expect_fail "--clip-grad-norm nan" 20 "--clip-grad-norm" "finite" -- "${TRAIN1[@]}" --clip-grad-norm nan
printf 'clip-grad-norm = nan\n' >nan.toml
expect_fail "config clip-grad-norm = nan" 20 "nan.toml: clip-grad-norm" "finite" -- "${TRAIN1[@]}" --config nan.toml
expect_fail "--tp-mesh-dim 5 on one rank" 20 "--tp-mesh-dim" -- "${TRAIN1[@]}" --tp-mesh-dim 5
expect_fail "--dp-mesh-dim -7 on one rank" 20 "--dp-mesh-dim" -- "${TRAIN1[@]}" --dp-mesh-dim -7
expect_fail "--tp-mesh-dim without --mesh-shape on one rank" 20 "--tp-mesh-dim" "--mesh-shape" -- "${TRAIN1[@]}" --tp-mesh-dim 1
expect_fail "--seed beyond 64 bits" 20 "--seed" "64 bits" -- "${TRAIN1[@]}" --seed 99999999999999999999
expect_fail "--distributed-mode tp on one rank" 20 "--distributed-mode tp" "mpirun -np 2" -- "${TRAIN1[@]}" \
  --distributed-mode tp
if grep -q "with 1 ranks" "$TMP/out"; then bad "tp on one rank still suggests 'with 1 ranks'"; else ok "no 'with 1 ranks' advice"; fi
expect_fail "--pp-microbatches in a dp run" 30 "--pp-microbatches" "pipeline size > 1" -- \
  "${MPIRUN[@]}" -np 2 "$BIN" train "${SMALL[@]}" --data good.h5 --distributed-mode dp --pp-microbatches 3
expect_fail "--pp-virtual-stages 2147483647" 30 "--pp-virtual-stages" "1024" -- \
  "${MPIRUN[@]}" -np 2 "$BIN" train "${SMALL[@]}" --data good.h5 --mesh-shape 1 1 2 --distributed-mode pp \
  --pp-virtual-stages 2147483647
expect_fail "plan: a mesh beyond 2^20 ranks" 20 "--mesh-shape" -- "$BIN" plan --mesh-shape 1048576 1048576 --model fmnist_csnn
expect_fail "plan --pp-virtual-stages 0" 20 "--pp-virtual-stages" -- "$BIN" plan --mesh-shape 1 1 2 --model fmnist_csnn \
  --pp-virtual-stages 0

echo "== bounded, text-only reads of the files a user names =="
head -c 3000 /dev/urandom >binary.bin
printf '\001\002 model = "x"\n' >ctrl.toml
expect_fail "--config /dev/zero" 20 "--config /dev/zero" "more than" -- "$BIN" train --config /dev/zero
expect_fail "--config binary" 20 "--config" "binary.bin" -- "$BIN" train --config binary.bin
expect_fail "--config with control bytes" 20 "ctrl.toml" "byte 0 is 0x01" -- "$BIN" train --config ctrl.toml
printf 'data = "good.h5"\n[}\n' >crash.toml
expect_fail "--config that crashes toml++ 3.3.0" 20 "crash.toml" "names no key" -- "$BIN" train --config crash.toml
expect_fail "--model-spec /dev/zero" 20 "model spec /dev/zero" -- "$BIN" model --model-spec /dev/zero
expect_fail "plan --pp-schedule-file /dev/zero" 20 "--pp-schedule-file" "/dev/zero" -- \
  "$BIN" plan --mesh-shape 1 1 2 --model fmnist_csnn --var C=4 --T 2 --pp-schedule-file /dev/zero
expect_fail "train --pp-schedule-file /dev/zero under mpirun" 60 "--pp-schedule-file" "/dev/zero" -- \
  "${MPIRUN[@]}" -np 2 "$BIN" train "${SMALL[@]}" --data good.h5 --mesh-shape 1 1 2 --distributed-mode pp \
  --pp-schedule-file /dev/zero

expect_fail "bench --result-log /dev/zero" 60 "--result-log /dev/zero" "more than" -- \
  "$BIN" bench --model fmnist_csnn --var C=4 --T 2 --steps 1 --warmup 0 --result-log /dev/zero
# A damaged IDX header asking for 2^32 x 2^32 bytes: refused before any allocation.
mkdir -p idx
printf '\000\000\010\003\377\377\377\377\377\377\377\377\000\000\000\001' >idx/train-images-idx3-ubyte
printf '\000\000\010\001\000\000\000\001\000' >idx/train-labels-idx1-ubyte
expect_fail "data: a damaged IDX header" 20 "train-images-idx3-ubyte" "GiB" -- \
  "$BIN" data fashion-mnist --src idx --out idx/out.h5

echo "== --config precedence: --var overrides one variable; plan and model read --config =="
SPEC_CFG="$ROOT/input/configs/fmnist_spikformer.toml"
want=$("$BIN" model --model spikformer_cifar --var E=32 --var heads=2 --var depth=2 --var image_size=28 \
       --var in_channels=1 --var num_classes=10 --T 4 2>&1 | grep -i "parameters" | head -1)
got=$("$BIN" model --config "$SPEC_CFG" --var E=32 2>&1 | grep -i "parameters" | head -1)
if [ -n "$want" ] && [ "$want" = "$got" ]; then ok "model --config ... --var E=32 keeps the config's heads/depth"
else bad "model --config --var E=32: '$got' vs '$want'"; fi
if "$BIN" train --config "$SPEC_CFG" --var E=32 --data good.h5 --max-steps 1 --batch-size 4 --eval-batch-size 4 \
     --output "$TMP/runs" --run-name prec --log-every 1 >prec.log 2>&1; then ok "train --config ... --var E=32 runs"
else bad "train --config ... --var E=32 failed"; sed 's/^/       | /' prec.log | head -5; fi
printf 'model = "fmnist_csnn"\nvar = ["C=8"]\nT = 2\nmesh-shape = [1, 1, 2]\nbatch-size = 8\npp-schedule = "gpipe"\n' >plan.toml
if "$BIN" plan --config plan.toml >plan.log 2>&1 && grep -q "pp=2" plan.log && grep -q "gpipe" plan.log; then
  ok "plan --config: the config's mesh and schedule"
else bad "plan --config"; sed 's/^/       | /' plan.log | head -5; fi
if "$BIN" plan --config plan.toml --pp-schedule 1f1b >plan2.log 2>&1 && grep -q "1f1b" plan2.log; then
  ok "plan --config: a flag overrides one key"
else bad "plan --config with --pp-schedule"; sed 's/^/       | /' plan2.log | head -5; fi

echo "reliability: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
