#!/usr/bin/env bash
# bad_files.sh — the real `spikemesh` binary on checkpoints and pipeline schedule files that are
# damaged, hostile or merely different. Every refusal: a non-zero exit
# on every rank (not a signal, no hang), exactly one "spikemesh: error:" line naming the file and
# the culprit (tensor, /meta field, line), no raw bytes of the file and no Open MPI abort noise.
#   checkpoints: NaN in the weights with the crc32 recomputed (refused; loaded with one warning
#     under --allow-nonfinite-checkpoint), a tensor without its crc32 attribute, /meta step -5
#     (train and `ckpt info`), a truncated file resumed at tp 2 under mpirun, and a resume with
#     other settings (one warning listing them);
#   schedule files (train under mpirun and `spikemesh plan`): /dev/zero, a binary file, a file
#     using microbatch 99 (names the file, never --pp-microbatches), 3 lines at pp 2.
# Usage: BIN=build/bin/spikemesh tests/e2e/bad_files.sh   (needs $PY with h5py and numpy)
E2E_NAME=bad_files
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
[ -x "$BIN" ] || { echo "bad_files: $BIN not built"; echo "bad_files: 0 passed, 1 failed"; exit 1; }
MPI=(timeout 120 mpirun --bind-to none --oversubscribe)

# ---- inputs: a Fashion-MNIST-shaped dataset and one good checkpoint ----------------------------
fmnist_h5 good.h5 || { bad "craft dataset"; echo "bad_files: $pass passed, $fail failed"; exit 1; }
TRAIN=("$BIN" train --var C=4 --data good.h5 --batch-size 8 --output out --device cpu --log-every 1)
if "${TRAIN[@]}" --max-steps 2 --run-name good >good.log 2>&1 && [ -f out/good/ckpt_000000002.h5 ]; then
  ok "good run"
else bad "good run"; tail -3 good.log; fi
GOOD=out/good/ckpt_000000002.h5

# craft KIND OUT: a copy of $GOOD damaged in one way.
craft() {
  "$PY" - "$GOOD" "$2" "$1" <<'EOF'
import sys, shutil, zlib, h5py, numpy as np
src, dst, kind = sys.argv[1:4]
shutil.copy(src, dst)
with h5py.File(dst, "r+") as f:
    if kind == "nan":  # a diverged run's save: NaN in a weight, crc32 recomputed so the checksum passes
        d = f["params/conv_fc.4.weight"]; v = d[()]; v.flat[5] = np.nan; d[...] = v
        d.attrs["crc32"] = np.int64(zlib.crc32(np.ascontiguousarray(v).tobytes()))
    elif kind == "nocrc":
        del f["optim/conv_fc.9.weight/exp_avg"].attrs["crc32"]
    elif kind == "step":
        del f["meta"].attrs["step"]; f["meta"].attrs["step"] = np.int64(-5)
EOF
}
craft nan nan.h5
craft nocrc nocrc.h5
craft step step.h5
head -c $(( $(stat -c %s "$GOOD") * 6 / 10 )) "$GOOD" >trunc.h5

# ---- checkpoints ------------------------------------------------------------------------------
expect_error "NaN weights refused naming file, tensor and element" nan.h5 "/params/conv_fc.4.weight" \
  "first at element 5" "--allow-nonfinite-checkpoint" -- "${TRAIN[@]}" --max-steps 3 --run-name r1 --resume nan.h5
if "${TRAIN[@]}" --max-steps 3 --run-name r2 --resume nan.h5 --allow-nonfinite-checkpoint >allow.log 2>allow.err; then
  if [ "$(grep -c 'non-finite' allow.err)" -eq 1 ] && grep 'non-finite' allow.err | grep -q '/params/conv_fc.4.weight'; then
    ok "--allow-nonfinite-checkpoint loads it with one warning naming the tensor"
  else bad "--allow-nonfinite-checkpoint warning"; cat allow.err; fi
else bad "--allow-nonfinite-checkpoint exits 0"; tail -3 allow.err; fi
expect_error "NaN weights refused at tp 2 (every rank, one message)" nan.h5 "/params/conv_fc.4.weight" -- \
  "${MPI[@]}" -np 2 "${TRAIN[@]}" --max-steps 3 --run-name r3 --resume nan.h5 --mesh-shape 1 2 1 --distributed-mode tp
expect_error "missing crc32 attribute" nocrc.h5 "/optim/conv_fc.9.weight/exp_avg" "no crc32 attribute" -- \
  "${TRAIN[@]}" --max-steps 3 --run-name r4 --resume nocrc.h5
expect_error "/meta step -5 (train)" step.h5 "'step'" "-5" -- "${TRAIN[@]}" --max-steps 3 --run-name r5 --resume step.h5
expect_error "/meta step -5 (ckpt info)" step.h5 "'step'" "-5" -- "$BIN" ckpt info step.h5
expect_error "truncated checkpoint at tp 2: one message, no Open MPI abort" trunc.h5 -- \
  "${MPI[@]}" -np 2 "${TRAIN[@]}" --max-steps 3 --run-name r6 --resume trunc.h5 --mesh-shape 1 2 1 --distributed-mode tp
expect_error "truncated checkpoint (ckpt info)" trunc.h5 -- "$BIN" ckpt info trunc.h5
# Another --T, --seed and --batch-size than the checkpoint's: it resumes, with ONE warning naming each.
if "${TRAIN[@]}" --max-steps 3 --run-name r7 --resume "$GOOD" --T 2 --seed 5 >diff.log 2>diff.err; then
  W=$(grep -c 'change the training trajectory' diff.err)
  if [ "$W" -eq 1 ] && grep 'trajectory' diff.err | grep -q 'T: checkpoint 0, now 2' &&
     grep 'trajectory' diff.err | grep -q 'seed: checkpoint 1, now 5'; then
    ok "resume with other settings: one warning naming each"
  else bad "resume with other settings: $W warnings"; cat diff.err; fi
else bad "resume with other settings exits 0"; tail -3 diff.err; fi
if "${TRAIN[@]}" --max-steps 3 --run-name r8 --resume "$GOOD" --threads 1 --keep 2 --ckpt-every 5 >same.log 2>same.err &&
   ! grep -q 'trajectory' same.err; then ok "resume with only run-length/output settings changed: no warning"
else bad "resume with the same settings warned"; cat same.err; fi

# ---- pipeline schedule files -------------------------------------------------------------------
PP=(--mesh-shape 1 1 2 --distributed-mode pp)
PLAN=("$BIN" plan --mesh-shape 1 1 2 --model fmnist_csnn --var C=4 --batch-size 8)
printf '0F0 0F99\n1F0\n' >mb99.pp
printf '0F0 0SF0\n1RF0 1F0\n2F0\n' >three.pp
printf '0F0\001\002\033[31m\377\376 garbage\n1F0\n' >binary.pp
for where in train plan; do
  if [ "$where" = train ]; then RUN=("${MPI[@]}" -np 2 "${TRAIN[@]}" --max-steps 1 --run-name pp "${PP[@]}")
  else RUN=("${PLAN[@]}"); fi
  expect_error "$where: --pp-schedule-file /dev/zero" "/dev/zero" -- "${RUN[@]}" --pp-schedule-file /dev/zero
  expect_error "$where: binary schedule file, not echoed" "binary.pp" "not a text file" -- \
    "${RUN[@]}" --pp-schedule-file binary.pp
  expect_error "$where: schedule using microbatch 99" "mb99.pp" "microbatches 0..99 (100" "line 1" -- \
    "${RUN[@]}" --pp-schedule-file mb99.pp
  if grep -q -- '--pp-microbatches' err.log; then bad "$where: microbatch 99 cites --pp-microbatches"; fi
  expect_error "$where: 3-line schedule at pp 2" "three.pp" "has 3 lines" "pp = 2" -- \
    "${RUN[@]}" --pp-schedule-file three.pp
  if grep -q 'mod 3' err.log; then bad "$where: 3-line file explained by 'mod 3'"; fi
done

echo "bad_files: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
