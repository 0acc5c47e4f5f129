#!/usr/bin/env bash
# tp_bench.sh — tensor parallelism end to end at np 2: `spikemesh plan --model` prints the
# plan on one process (a preview) and under mpirun; `spikemesh bench --distributed-mode tp`
# records the tp collectives it really made, and they equal the plan's closed form exactly
# (calls and payload bytes of all-reduce, reduce-scatter and all-gather): without sample
# sharding (batch 1 at tp 2) one forward all-reduce per rowwise layer and one backward
# all-reduce per colwise layer; with it (batch 4) the rowwise layers reduce-scatter, the
# regions' last layers all-gather, batch norms sum statistics and whole parameters their
# gradients over tp (layers/sequence_parallel.h).
# Models: fmnist_csnn C=4 (a conv pair and a linear pair), cifar10dvs_vgg (four conv pairs)
# and spikformer_cifar (attention by heads; unpaired layers gathered). Bad tp input is refused with one message. ~40 s.
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
  local expect=whole; [ $((batch % 2)) -eq 0 ] && expect=sharded
  if "$PY" - "$TMP/$name.plan" "$TMP/$name.jsonl" "$expect" <<'PYEOF'
import json, re, sys
plan = open(sys.argv[1]).read()
m = re.search(r"per step (\d+) all-reduce calls of (\d+) bytes in all, (\d+) reduce-scatter calls of (\d+) bytes, "
              r"(\d+) all-gather calls of (\d+) bytes", plan)
assert m, plan
calls, payload, rs_calls, rs_bytes, ag_calls, ag_bytes = map(int, m.groups())
r = json.loads(open(sys.argv[2]).read().splitlines()[-1])
assert r["world_size"] == 2 and r["tp_size"] == 2, r
assert calls > 0 and r["tp_all_reduce_calls"] == calls, (r["tp_all_reduce_calls"], calls)
got = round(r["tp_all_reduce_mb"] * 1048576)
assert got == payload, (got, payload)
assert abs(r["tp_all_reduce_bus_mb"] * 1048576 - payload) < 1, r   # ring at p = 2: 2(p-1)/p = 1
assert r["tp_reduce_scatter_calls"] == rs_calls and round(r["tp_reduce_scatter_mb"] * 1048576) == rs_bytes, r
assert r["tp_all_gather_calls"] == ag_calls and round(r["tp_all_gather_mb"] * 1048576) == ag_bytes, r
assert (rs_calls > 0) == (sys.argv[3] == "sharded"), (rs_calls, sys.argv[3])
PYEOF
  then ok "bench tp 2 batch $batch ($expect regions) $*: tp collectives' calls and bytes per step = the plan's closed form"
  else bad "bench tp 2 $* bytes"; fi
}
check csnn 4 --model fmnist_csnn --var C=4
check vgg 1 --model cifar10dvs_vgg --T 2
check vgg2 2 --model cifar10dvs_vgg --T 2
# Spikformer: attention split by heads, and two unpaired layers (the positional-encoding conv,
# the head) colwise with their output gathered: one all-gather and one all-reduce each
check sformer 2 --model spikformer_cifar --T 2
[ "$(grep -c ' colwise/ag ' "$TMP/sformer.plan")" -eq 2 ] && ok "spikformer_cifar: its two unpaired layers gather their output" \
  || { bad "spikformer_cifar colwise/ag layers"; grep -E "colwise|replicated" "$TMP/sformer.plan"; }

# --tp-debug-comm: one line per weight layer's tp collective: every rowwise layer (all-reduce or
# reduce-scatter forward) and every colwise one whose input gradient it all-reduces itself
# (counted wherever they start: stderr's lines can land after stdout's unfinished progress line)
if timeout 120 mpirun --bind-to none -np 2 "$BIN" bench --model fmnist_csnn --var C=4 --batch-size 4 --steps 1 --warmup 1 \
     --threads 1 --device cpu --distributed-mode tp --mesh-shape 1 2 --tp-debug-comm >"$TMP/dbg.log" 2>&1 \
   && calls=$(grep -cE " (rowwise|rowwise/rs|colwise) " "$TMP/csnn.plan") \
   && [ "$(grep -o 'tp-comm: ' "$TMP/dbg.log" | wc -l)" -eq "$calls" ]; then ok "--tp-debug-comm prints each tp collective once ($calls)"
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
