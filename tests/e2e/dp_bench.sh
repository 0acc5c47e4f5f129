#!/usr/bin/env bash
# dp_bench.sh — `spikemesh bench` data parallel at np 2 (fmnist_csnn C=4, 13,380 f32
# parameters): each mode writes a JSON record with world_size 2, the global batch = 2 x the
# per-rank batch, and the bytes per step on the wire equal to the theoretical volume:
# dp ring all-reduce 2(p-1)/p·|grads| = |grads| at p = 2 (exact); zero: reduce-scatter +
# all-gather of the padded flat buffers, (p-1)/p·2·|padded| = |grads| + padding; fsdp also
# gathers again in backward (between |grads| and 2|grads|). Model state per rank: Adam's state
# is the single-rank size under dp and half of it under ZeRO-1 (+ padding); FSDP's parameter
# peak stays within full/dp + the two largest units. A pp mesh is refused. ~20 s.
E2E_NAME=dp_bench
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
GRAD_BYTES=$((13380 * 4))
run() {  # run NAME EXPECTED_CALLS_MIN ARGS...
  local name=$1; shift
  if timeout 120 mpirun --bind-to none -np 2 "$BIN" bench --model fmnist_csnn --var C=4 --batch-size 8 --steps 3 \
       --warmup 1 --threads 1 --result-log "$TMP/$name.jsonl" "$@" >"$TMP/$name.log" 2>&1; then
    if "$PY" - "$TMP/$name.jsonl" "$GRAD_BYTES" "$name" <<'PYEOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
grad = int(sys.argv[2]); name = sys.argv[3]
assert r["world_size"] == 2 and r["data_replicas"] == 2, r
assert r["global_batch_size"] == 16 and r["per_rank_batch_size"] == 8, r
wire = r["dp_comm_mb_per_step"] * 1048576
if name == "dp":
    assert abs(wire - grad) < 1e-6, (wire, grad)          # ring all-reduce at p=2: exactly |grads|
elif name == "zero":
    assert grad <= wire <= grad + 1024, (wire, grad)       # RS grads + AG params, each (p-1)/p of the padded size
else:
    assert grad <= wire <= 2 * grad + 1024, (wire, grad)   # fsdp: AG in forward and again in backward, RS grads
assert r["global_throughput_sps"] > 0 and r["step_latency_ms"] > 0
state = r["optimizer_state_mb_per_rank"] * 1048576                 # Adam: exp_avg + exp_avg_sq
if name == "dp":
    assert abs(state - 2 * grad) < 1e-6, (state, grad)           # replicated: the single-rank size
elif name == "zero":
    assert grad <= state <= grad + 1024, (state, grad)          # ZeRO-1: 1/dp of it (+ padding of the last chunks)
else:
    full, peak, two = (r[k] * 1048576 for k in ("param_full_mb", "param_peak_mb_per_rank", "largest_two_units_mb"))
    assert abs(full - grad) < 1e-6, (full, grad)
    assert peak <= full / 2 + two + 1024, (peak, full, two)     # FSDP bound: full/dp + the two largest units
PYEOF
    then ok "bench $* (record: 2 ranks, global batch 16, bytes on the wire as theory)"
    else bad "bench $* record"; fi
  else bad "bench $* exits 0"; tail -5 "$TMP/$name.log"; fi
}
run dp --distributed-mode dp
run zero --distributed-mode dp --optimizer-sharding zero
run fsdp --distributed-mode fsdp
# FSDP over a pipeline (refused, as in Megatron): a clear message, non-zero exit, no hang
if timeout 60 mpirun --bind-to none -np 2 "$BIN" bench --model fmnist_csnn --var C=4 --distributed-mode fsdp --mesh-shape 1 1 2 \
     >"$TMP/bad.log" 2>&1; then bad "fsdp x pp refused"
elif grep -q "FSDP is not combined with pipeline parallelism" "$TMP/bad.log"; then ok "bench fsdp --mesh-shape 1 1 2 refused with a message"
else bad "fsdp x pp message"; cat "$TMP/bad.log"; fi
echo "dp_bench: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
