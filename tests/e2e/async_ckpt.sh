#!/usr/bin/env bash
# async_ckpt.sh — checkpoints written in the background (--ckpt-async, train/checkpoint_writer.h)
# on a tiny fmnist_csnn (C=4, T=2, fp64), dp 2, 16 steps, a checkpoint every 4; the background
# write is slowed down by the test hook SPIKEMESH_TEST_SLOW_BACKGROUND_MS so that it is caught
# in flight:
#   * every checkpoint of an asynchronous run equals the synchronous run's, dataset by dataset
#     (bitwise), training ran steps while a write was in flight (metrics ckpt_writing), and the
#     log names each background write and its stall;
#   * --ckpt-every 1 with slow writes: each checkpoint waits for the one in flight and says so,
#     at most one .tmp at a time, the end still bitwise;
#   * SIGTERM while a write is in flight: the run waits for it, writes the stop's checkpoint and
#     exits 0; --resume auto then ends bitwise at the uninterrupted run's parameters;
#   * SIGKILL of one rank while a write is in flight: the job fails, the cut write never appears
#     under its name, the newest complete checkpoint is the previous one and verifies; --resume auto
#     ends bitwise at the uninterrupted run's parameters;
#   * a background write that keeps failing (test hook SPIKEMESH_TEST_IO_FAULTS): every rank
#     ends with one error line naming it, the previous checkpoint verifies, no .tmp is left;
#   * --ckpt-async with a bad value is refused naming the flag.
# Usage: BIN=build/bin/spikemesh tests/e2e/async_ckpt.sh   (needs $PY with h5py)
E2E_NAME=async_ckpt
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
[ -x "$BIN" ] || { echo "async_ckpt: $BIN not built"; echo "async_ckpt: 0 passed, 1 failed"; exit 1; }
finish() { echo "async_ckpt: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
export SPIKEMESH_IO_RETRY_DELAY_MS=10
MPI=(timeout 180 mpirun --bind-to none --oversubscribe -np 2)
T=(train --model fmnist_csnn --var C=4 --T 2 --data data.h5 --output out --device cpu --epochs 2 --max-steps 16 --log-every 1
   --seed 4 --precision fp64 --distributed-mode dp --batch-size 2)
CK=(--ckpt-every 4 --keep 8)
ON=(--ckpt-async on)
fmnist_h5 data.h5 || { bad "craft dataset"; finish; }
same() { ckpt_same "$1" "$2" --min 11; }  # every dataset (params, buffers, optimizer state) bitwise equal
# wait_tmp RUN SECONDS: until a checkpoint write of RUN is in flight (its .tmp exists)
wait_tmp() {
  local i
  for i in $(seq 1 $(($2 * 20))); do
    ls out/"$1"/ckpt_*.h5.tmp >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  return 1
}

"${MPI[@]}" "$BIN" "${T[@]}" "${CK[@]}" --ckpt-async off --run-name sync >sync.log 2>&1 || bad "synchronous reference run"

# ---- the same checkpoints, written while training continues -----------------------------------------
SPIKEMESH_TEST_SLOW_BACKGROUND_MS=20 "${MPI[@]}" "$BIN" "${T[@]}" "${CK[@]}" --ckpt-async on --run-name async >async.log 2>&1; rc=$?
diffs=0
for s in 4 8 12 16; do
  f=$(printf 'ckpt_%09d.h5' $s)
  same out/async/$f out/sync/$f 2>/dev/null || diffs=$((diffs + 1))
done
writing=$("$PY" -c "import h5py; print(int(h5py.File('out/async/metrics.h5')['step/ckpt_writing'][()].sum()))" 2>/dev/null)
if [ $rc -eq 0 ] && [ $diffs -eq 0 ] && [ "${writing:-0}" -ge 3 ] &&
   [ "$(grep -c 'written in the background in .* training stalled' out/async/log.txt)" -eq 4 ] &&
   [ "$(grep -c 'training stalled' out/sync/log.txt)" -eq 4 ] && ! grep -q 'written in the background' out/sync/log.txt
then ok "asynchronous checkpoints equal the synchronous ones bitwise (4 of 4); $writing steps trained during writes"
else bad "asynchronous checkpoints (exit $rc, $diffs differ, $writing steps during writes)"; tail -n 3 async.log | sed 's/^/       /'; fi

SPIKEMESH_TEST_SLOW_BACKGROUND_MS=20 "${MPI[@]}" "$BIN" "${T[@]}" "${ON[@]}" --ckpt-every 1 --keep 2 --run-name every >every.log 2>&1 &
job=$!; most=0
while kill -0 $job 2>/dev/null; do  # how many writes are in flight at once (their .tmp files)
  n=$(ls out/every/*.tmp 2>/dev/null | wc -l); [ "$n" -gt "$most" ] && most=$n; sleep 0.02
done
wait $job; rc=$?
waits=$(grep -c "waited .* s for the write of step" out/every/log.txt)
if [ $rc -eq 0 ] && [ "$waits" -ge 3 ] && [ "$most" -le 1 ] && same out/every/ckpt_000000016.h5 out/sync/ckpt_000000016.h5 &&
   [ "$(ls out/every/ckpt_*.h5 | wc -l)" -eq 2 ]
then ok "--ckpt-every 1: $waits checkpoints waited for the write in flight and said so, never two .tmp at once; the end is bitwise"
else bad "one write at a time (exit $rc, $waits waits, at most $most .tmp at once)"; tail -n 3 every.log | sed 's/^/       /'; fi

# ---- SIGTERM while a write is in flight -----------------------------------------------------------
SPIKEMESH_TEST_SLOW_BACKGROUND_MS=150 "${MPI[@]}" "$BIN" "${T[@]}" "${CK[@]}" "${ON[@]}" --run-name term >term.log 2>&1 &
job=$!
if wait_tmp term 60; then
  inflight=$(ls out/term/ckpt_*.h5.tmp | head -n 1)
  pkill -TERM -f "^[^ ]*spikemesh train .*--run-name term"  # the ranks, not mpirun
fi
wait $job; rc=$?
stop=$(grep -o "checkpointing at step [0-9]*" out/term/log.txt | grep -o "[0-9]*$")
if [ -n "${inflight:-}" ] && [ $rc -eq 0 ] && [ -n "$stop" ] && [ "$stop" -lt 16 ] && [ -z "$(ls out/term/*.tmp 2>/dev/null)" ] &&
   "$BIN" ckpt verify "${inflight%.tmp}" >/dev/null 2>&1 &&
   "$BIN" ckpt verify "out/term/$(printf 'ckpt_%09d.h5' "$stop")" >/dev/null 2>&1 &&
   "${MPI[@]}" "$BIN" "${T[@]}" "${CK[@]}" --run-name term --resume auto >term2.log 2>&1 &&
   same out/term/ckpt_000000016.h5 out/sync/ckpt_000000016.h5
then ok "SIGTERM during the write of $(basename "${inflight%.tmp}"): it completes, the stop's checkpoint (step $stop) follows, exit 0; resumed bitwise"
else bad "SIGTERM during a background write (exit $rc, in flight '${inflight:-none}', stop at '${stop:-none}')"; tail -n 3 term.log | sed 's/^/       /'; fi

# ---- SIGKILL of one rank while a write is in flight --------------------------------------------------
SPIKEMESH_TEST_SLOW_BACKGROUND_MS=150 "${MPI[@]}" "$BIN" "${T[@]}" "${CK[@]}" "${ON[@]}" --run-name kill --comm-timeout 20 >kill.log 2>&1 &
job=$!
cut=""
for tries in 1 2; do  # the first write in flight is the step-4 one: there is no previous checkpoint yet, so take the second
  wait_tmp kill 60 || break
  cut=$(ls out/kill/ckpt_*.h5.tmp | head -n 1)
  [ "$(basename "$cut")" != "ckpt_000000004.h5.tmp" ] && break
  for i in $(seq 1 1200); do [ -e "$cut" ] || break; sleep 0.05; done
done
pkill -KILL -f "^[^ ]*spikemesh train .*--run-name kill" -n  # one rank
wait $job; rc=$?
newest=$(ls out/kill/ckpt_*.h5 2>/dev/null | tail -n 1)
if [ -n "$cut" ] && [ $rc -ne 0 ] && [ ! -e "${cut%.tmp}" ] && [ -n "$newest" ] && [ "$newest.tmp" != "$cut" ] &&
   "$BIN" ckpt verify "$newest" >/dev/null 2>&1 &&
   "${MPI[@]}" "$BIN" "${T[@]}" "${CK[@]}" --run-name kill --resume auto >kill2.log 2>&1 &&
   grep -q "resumed from $newest" out/kill/log.txt && same out/kill/ckpt_000000016.h5 out/sync/ckpt_000000016.h5
then ok "SIGKILL during the write of $(basename "${cut%.tmp}"): it never appears complete, $(basename "$newest") is the newest and verifies; resumed bitwise"
else bad "SIGKILL during a background write (exit $rc, cut '$cut', newest '$newest')"; tail -n 3 kill2.log 2>/dev/null | sed 's/^/       /'; fi

# ---- a background write that keeps failing ------------------------------------------------------------
SPIKEMESH_TEST_IO_FAULTS=checkpoint-write:9@1 SPIKEMESH_IO_RETRIES=2 "${MPI[@]}" "$BIN" "${T[@]}" "${CK[@]}" --ckpt-async on \
  --run-name fail >fail.out 2>fail.err; rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^spikemesh: error:' fail.err)" -eq 1 ] &&
   grep -q "^spikemesh: error: I/O failed after retries: writing the checkpoint of step 8: checkpoint out/fail/ckpt_000000008.h5 not written (the previous checkpoint is intact): .* (2 attempts)" fail.err &&
   [ -z "$(ls out/fail/*.tmp 2>/dev/null)" ] && [ ! -e out/fail/ckpt_000000008.h5 ] &&
   "$BIN" ckpt verify out/fail/ckpt_000000004.h5 >/dev/null 2>&1 && ! grep -qE "MPI_ABORT|mpirun noticed" fail.err fail.out
then ok "a background write that keeps failing: one error line on every rank's behalf, exit $rc, the previous checkpoint verifies"
else bad "failing background write (exit $rc)"; grep -E "error" fail.err | head -n 3 | sed 's/^/       /'; fi

expect_error "--ckpt-async sometimes" "--ckpt-async must be auto, on or off" -- "$BIN" "${T[@]}" --ckpt-async sometimes --run-name bad
finish
