#!/usr/bin/env bash
# io_retry.sh — transient I/O errors (core/io_retry.h), injected with the test hook
# SPIKEMESH_TEST_IO_FAULTS on a tiny fmnist_csnn (C=4, T=2, fp64, 8 steps), retry delay 10 ms:
#   * two failed training reads on one rank: each retried and named on stderr with the rank; the
#     run ends normally with exactly the parameters of a run without faults (bitwise);
#   * reads that keep failing on rank 1 of 2 (dp) in the middle of the run: every rank stops at the
#     same step, a checkpoint of the last completed step is written, one "spikemesh: error:" line
#     names the file and that checkpoint, every rank exits non-zero; `--resume auto` then ends
#     with the parameters of the uninterrupted run (bitwise);
#   * a checkpoint write that fails twice: retried (the warning names the step and the attempt),
#     the run ends normally; one that keeps failing: one error line "checkpoint ... not written
#     (the previous checkpoint is intact)", the previous checkpoint still loads, no .tmp left;
#   * reads outside training (`data bench`) that keep failing on rank 1 of 2 end the job with one
#     message instead of leaving rank 0 waiting;
#   * a malformed SPIKEMESH_IO_RETRIES is refused naming the variable.
# Usage: BIN=build/bin/spikemesh tests/e2e/io_retry.sh   (needs $PY with h5py)
E2E_NAME=io_retry
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
[ -x "$BIN" ] || { echo "io_retry: $BIN not built"; echo "io_retry: 0 passed, 1 failed"; exit 1; }
finish() { echo "io_retry: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
export SPIKEMESH_IO_RETRY_DELAY_MS=10
MPI=(timeout 120 mpirun --bind-to none --oversubscribe -np 2)
T=(train --model fmnist_csnn --var C=4 --T 2 --data data.h5 --output out --device cpu --max-steps 8 --log-every 1
   --seed 4 --precision fp64)
fmnist_h5 data.h5 || { bad "craft dataset"; finish; }
same() { ckpt_same "$1" "$2" --group params; }  # every parameter bitwise equal

# ---- training reads ------------------------------------------------------------------------------
"$BIN" "${T[@]}" --batch-size 4 --run-name clean1 >clean1.log 2>&1 || bad "reference run (one rank)"
SPIKEMESH_TEST_IO_FAULTS=dataset-read:2@3 "$BIN" "${T[@]}" --batch-size 4 --run-name flaky >flaky.log 2>&1; rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'failed (attempt [12] of 4): data.h5: H5Dread failed: Input/output error' flaky.log)" -eq 2 ] &&
   grep -q "warning (rank 0 on " flaky.log && same out/flaky/ckpt_000000008.h5 out/clean1/ckpt_000000008.h5
then ok "two failed reads retried and named; the run's parameters equal a clean run's"
else bad "retried reads (exit $rc)"; grep -E "warning|error" flaky.log | head -n 4 | sed 's/^/       /'; fi

DP=("${T[@]}" --distributed-mode dp --batch-size 2)
"${MPI[@]}" "$BIN" "${DP[@]}" --run-name clean2 >clean2.log 2>&1 || bad "reference run (dp 2)"
SPIKEMESH_TEST_IO_FAULTS=dataset-read:4@4 SPIKEMESH_TEST_IO_FAULT_RANK=1 "${MPI[@]}" "$BIN" "${DP[@]}" --run-name lost \
  >lost.out 2>lost.err; rc=$?
ck=$(ls out/lost/ckpt_*.h5 2>/dev/null | tail -n 1)
if [ $rc -ne 0 ] && [ "$(grep -c '^spikemesh: error:' lost.err)" -eq 1 ] && [ -n "$ck" ] &&
   grep -q "^spikemesh: error: I/O failed after retries: reading 2 samples of /train/x of data.h5: data.h5: H5Dread failed: Input/output error (injected for a test) (4 attempts) (rank 1 on [^)]*) (checkpoint of step [0-9]* written: $ck; rerun with --resume auto" lost.err &&
   grep -q "warning (rank 1 on " lost.err && ! grep -qE "MPI_ABORT|mpirun noticed" lost.err lost.out
then ok "reads failing on rank 1: every rank stops, $(basename "$ck") written, one error line, exit $rc"
else bad "persistent read failure (exit $rc, checkpoint '$ck')"; grep -E "error|ABORT" lost.err | head -n 4 | sed 's/^/       /'; fi
if "${MPI[@]}" "$BIN" "${DP[@]}" --run-name lost --resume auto >lost2.log 2>&1 &&
   same out/lost/ckpt_000000008.h5 out/clean2/ckpt_000000008.h5
then ok "--resume auto after the failure ends with the uninterrupted run's parameters (bitwise)"
else bad "resume after the read failure"; tail -n 3 lost2.log | sed 's/^/       /'; fi

# A reader outside training (data bench) that gives up on rank 1 alone: that rank names itself and
# the job ends (no rank waits forever in the next collective).
SPIKEMESH_TEST_IO_FAULTS=dataset-read:99@2 SPIKEMESH_TEST_IO_FAULT_RANK=1 "${MPI[@]}" "$BIN" data bench data.h5 \
  --batch-size 4 --batches 4 --prefetch 1 >bench.out 2>bench.err; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^spikemesh: error:' bench.err)" -eq 1 ] &&
   grep -q "^spikemesh: error: I/O failed after retries: reading 4 samples of /train/x of data.h5: .*(4 attempts) (rank 1 on " bench.err
then ok "data bench: reads that keep failing on rank 1 of 2 end the job with one error naming the file and rank"
else bad "data bench with reads failing on rank 1 (exit $rc)"; grep -E "error" bench.err | head -n 3 | sed 's/^/       /'; fi

# ---- checkpoint writes ----------------------------------------------------------------------------
SPIKEMESH_TEST_IO_FAULTS=checkpoint-write:2 "$BIN" "${T[@]}" --batch-size 4 --ckpt-every 4 --run-name ckw >ckw.log 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "writing the checkpoint of step 4 failed (attempt 2 of 4): checkpoint out/ckw/ckpt_000000004.h5 not written" ckw.log &&
   same out/ckw/ckpt_000000008.h5 out/clean1/ckpt_000000008.h5
then ok "a checkpoint write failing twice is retried; the run ends normally"
else bad "retried checkpoint write (exit $rc)"; grep -E "warning|error" ckw.log | head -n 3 | sed 's/^/       /'; fi
SPIKEMESH_TEST_IO_FAULTS=checkpoint-write:9@1 "${MPI[@]}" "$BIN" "${DP[@]}" --ckpt-every 4 --run-name ckbad >ckbad.out 2>ckbad.err; rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^spikemesh: error:' ckbad.err)" -eq 1 ] &&
   grep -q "^spikemesh: error: I/O failed after retries: writing the checkpoint of step 8: checkpoint out/ckbad/ckpt_000000008.h5 not written (the previous checkpoint is intact): .* (4 attempts)" ckbad.err &&
   [ -z "$(ls out/ckbad/*.tmp 2>/dev/null)" ] && "$BIN" ckpt verify out/ckbad/ckpt_000000004.h5 >/dev/null 2>&1
then ok "a checkpoint write that keeps failing: one error line, exit $rc, the previous checkpoint verifies, no .tmp"
else bad "failing checkpoint write (exit $rc)"; grep -E "error" ckbad.err | head -n 3 | sed 's/^/       /'; fi

expect_error "malformed SPIKEMESH_IO_RETRIES" "SPIKEMESH_IO_RETRIES=often" -- env SPIKEMESH_IO_RETRIES=often "$BIN" "${T[@]}" --batch-size 4 --run-name bad
finish
