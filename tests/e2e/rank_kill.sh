#!/usr/bin/env bash
# rank_kill.sh — a rank killed mid-run: data-parallel training at
# np 2 with checkpoints every 20 steps; once a checkpoint exists, rank 1 gets SIGKILL. Checks
# that the job ends well within --comm-timeout (no hang), that the launcher's message names
# the lost rank, that the newest checkpoint is complete and verifies (`ckpt info`), and that
# `--resume auto` continues from it at np 2. Writes only under a temporary directory. ~30 s.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/bin/spikemesh}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; }
finish() { echo "rank_kill: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
TMP="$(mktemp -d "${TMPDIR:-/tmp}/rank_kill.XXXXXX")"
RUNNER=""
# On any exit: stop the background job if it still runs (timeout forwards TERM to mpirun).
cleanup() {
  if [ -n "$RUNNER" ] && kill -0 "$RUNNER" 2>/dev/null; then
    kill -TERM "$RUNNER" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$RUNNER" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$RUNNER" 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
DATA="$ROOT/input/fashion_mnist.h5"
[ -f "$DATA" ] || { DATA="$TMP/fm.h5"; timeout 300 "$BIN" data fashion-mnist --out "$DATA" >/dev/null || { bad "import"; finish; }; }
ARGS=(train --model fmnist_csnn --var C=4 --data "$DATA" --distributed-mode dp --mesh-shape 2 1 1 --batch-size 16
      --epochs 1 --ckpt-every 20 --log-every 20 --output "$TMP/out" --run-name k --threads 1 --comm-timeout 20)
timeout 120 mpirun --bind-to none -np 2 "$BIN" "${ARGS[@]}" >"$TMP/log" 2>&1 &
RUNNER=$!
for _ in $(seq 600); do ls "$TMP"/out/k/ckpt_*.h5 >/dev/null 2>&1 && break; kill -0 "$RUNNER" 2>/dev/null || break; sleep 0.1; done
sleep 1
victim=""
for p in $(pgrep -f "^$BIN train"); do   # the rank whose environment says it is world rank 1
  tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
done
[ -n "$victim" ] || { bad "found rank 1's process"; cat "$TMP/log"; finish; }
t0=$(date +%s); kill -9 "$victim"; wait "$RUNNER"; rc=$?; took=$(( $(date +%s) - t0 ))  # bounded: timeout 120
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 25 ]; then ok "job ended $took s after rank 1 was killed (exit $rc, --comm-timeout 20)"
else bad "job ended promptly after the kill (rc $rc, $took s)"; fi
grep -qiE "rank 1 .*(exited|killed|signal)|world rank\(s\) 1" "$TMP/log" && ok "the message names the lost rank 1" \
  || { bad "message names rank 1"; tail -5 "$TMP/log"; }
latest=$(ls "$TMP"/out/k/ckpt_*.h5 2>/dev/null | grep -v '\.tmp' | sort | tail -1)
if [ -n "$latest" ] && timeout 60 "$BIN" ckpt info "$latest" | grep -q "(complete"; then ok "newest checkpoint $(basename "$latest") is complete"
else bad "a complete checkpoint survives"; [ -n "$latest" ] || finish; fi
step=$(basename "$latest" .h5); step=$((10#${step#ckpt_}))
if timeout 120 mpirun --bind-to none -np 2 "$BIN" "${ARGS[@]}" --resume auto --max-steps $((step + 10)) >"$TMP/log2" 2>&1 \
   && grep -q "resumed from .*$(basename "$latest") at step $step" "$TMP/log2"; then
  ok "--resume auto continues from step $step and runs 10 more steps"
else bad "resume after the kill"; tail -5 "$TMP/log2"; fi
finish
