#!/usr/bin/env bash
# tp_bench.sh — tensor parallelism end to end at np 2: `spikemesh plan --model` prints the
# plan on one process (a preview) and under mpirun; `spikemesh bench --distributed-mode tp`
# records the tp all-reduces it really made, and they equal the plan's closed form exactly:
# one forward all-reduce per rowwise layer (its output) and one backward all-reduce per
# colwise layer (its input gradient), elements = batch x T x per-sample size, 4 bytes each.
# Models: fmnist_csnn C=4 (a conv pair and a linear pair) and cifar10dvs_vgg (four
# conv pairs). Bad tp input is refused with one message. ~40 s.
E2E_NAME=tp_bench
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

check() {  # check NAME BATCH MODEL-ARGS...
  local name=$1 batch=$2; shift 2
  if ! "$BIN" plan --mesh-shape 1 2 --batch-size "$batch" "$@" >"$TMP/$name.plan" 2>&1; then
    bad "plan preview $*"; cat "$TMP/$name.plan"; return
  fi
  grep -q "colwise" "$TMP/$name.plan" && grep -q "rowwise" "$TMP/$name.plan" \
    && ok "plan preview $* (colwise and rowwise layers)" || { bad "plan preview content"; cat "$TMP/$name.plan"; }
  if ! timeout 120 mpirun --bind-to none -np 2 "$BIN" bench "$@" --batch-size "$batch" --steps 2 --warmup 1 --threads 1 \
       --device cpu --distributed-mode tp --mesh-shape 1 2 --result-log "$TMP/$name.jsonl" >"$TMP/$name.log" 2>&1; then
    bad "bench --distributed-mode tp $*"; tail -5 "$TMP/$name.log"; return
  fi
  if "$PY" - "$TMP/$name.plan" "$TMP/$name.jsonl" <<'PYEOF'
import json, re, sys
plan = open(sys.argv[1]).read()
m = re.search(r"per step (\d+) all-reduce calls of (\d+) bytes in all", plan)
assert m, plan
calls, payload = int(m.group(1)), int(m.group(2))
r = json.loads(open(sys.argv[2]).read().splitlines()[-1])
assert r["world_size"] == 2 and r["tp_size"] == 2, r
assert calls > 0 and r["tp_all_reduce_calls"] == calls, (r["tp_all_reduce_calls"], calls)
got = round(r["tp_all_reduce_mb"] * 1048576)
assert got == payload, (got, payload)
assert abs(r["tp_all_reduce_bus_mb"] * 1048576 - payload) < 1, r   # ring at p = 2: 2(p-1)/p = 1
PYEOF
  then ok "bench tp 2 $*: tp all-reduce calls and bytes per step = the plan's closed form"
  else bad "bench tp 2 $* bytes"; fi
}
check csnn 4 --model fmnist_csnn --var C=4
check vgg 1 --model cifar10dvs_vgg --T 2

# --tp-debug-comm: one line per (layer, direction), as many as the plan's calls per step
if timeout 120 mpirun --bind-to none -np 2 "$BIN" bench --model fmnist_csnn --var C=4 --batch-size 4 --steps 1 --warmup 1 \
     --threads 1 --device cpu --distributed-mode tp --mesh-shape 1 2 --tp-debug-comm >"$TMP/dbg.log" 2>&1 \
   && calls=$(grep -oE "per step [0-9]+ all-reduce calls" "$TMP/csnn.plan" | grep -oE "[0-9]+") \
   && [ "$(grep -c '^tp-comm: ' "$TMP/dbg.log")" -eq "$calls" ]; then ok "--tp-debug-comm prints each tp collective once ($calls)"
else bad "--tp-debug-comm"; grep "tp-comm" "$TMP/dbg.log"; fi
# under mpirun: the groups and the plan
if timeout 60 mpirun --bind-to none -np 2 "$BIN" plan --mesh-shape 1 2 --model fmnist_csnn --var C=4 >"$TMP/p2.log" 2>&1 \
   && grep -q "tp groups" "$TMP/p2.log" && grep -q "rowwise" "$TMP/p2.log"; then ok "plan --model under mpirun"
else bad "plan --model under mpirun"; cat "$TMP/p2.log"; fi
# bad input: one message, non-zero exit on every rank, no hang
if timeout 60 mpirun --bind-to none -np 2 "$BIN" bench --model fmnist_csnn --var C=4 --distributed-mode tp \
     >"$TMP/bad1.log" 2>&1; then bad "tp without a tp mesh refused"
elif grep -q "needs a tensor-parallel size > 1" "$TMP/bad1.log"; then ok "--distributed-mode tp without tp in --mesh-shape refused"
else bad "tp without mesh message"; cat "$TMP/bad1.log"; fi
if timeout 60 mpirun --bind-to none -np 2 "$BIN" bench --model fmnist_csnn --var C=4 --distributed-mode fsdp --mesh-shape 1 2 \
     >"$TMP/bad2.log" 2>&1; then bad "fsdp x tp refused"
elif grep -q "is --distributed-mode fsdp_tp" "$TMP/bad2.log"; then ok "fsdp with tp refused, pointing to fsdp_tp"
else bad "fsdp x tp message"; cat "$TMP/bad2.log"; fi
echo "tp_bench: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
