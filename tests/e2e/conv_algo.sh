#!/usr/bin/env bash
# conv_algo.sh — `--conv-algo dense | sparse | auto` end to end, on a tiny fmnist_csnn
# (C=16, T=4, synthetic Fashion-MNIST-shaped data) whose second convolution takes spikes:
#   * a checkpoint trained with the dense kernels, evaluated with each mode: the same accuracy
#     (at most one test sample may flip on a near-tie), the loss within 1e-5 relative, the
#     firing rates within 1e-3 (real activations of a trained network, not random spikes:
#     the second convolution's input fires at ~16%, below auto's crossover);
#   * training 12 steps with sparse vs dense: the same trajectory within f32 rounding (loss
#     per logged step within 1e-4 relative);
#   * bench --profile names the layer, its firing rate and the kernel that ran, and the record
#     carries conv_algo and spike_conv_layers; bench --kernel spike-conv and --kernel winograd
#     print their sweeps;
#   * SPIKEMESH_CPU_AVX512=0 (the own kernels' AVX2 copies) trains to bitwise the default's checkpoint;
#   * bad input: an unknown --conv-algo, SPIKEMESH_CONV_ALGO, SPIKEMESH_MERGE_STEPS, SPIKEMESH_CPU_AVX512
#     or --conv-shape gives one
#     'spikemesh: error:' line naming it and a non-zero exit.
# Usage: BIN=build/bin/spikemesh tests/e2e/conv_algo.sh   (needs $PY with h5py and numpy)
E2E_NAME=conv_algo
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
finish() { echo "conv_algo: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
[ -x "$BIN" ] || { bad "$BIN not built"; finish; }
fmnist_h5 data.h5 || { bad "craft dataset"; finish; }
run() {  # run NAME COMMAND...: must exit 0
  local name=$1; shift
  if "$@" >"$name.log" 2>&1; then ok "$name"; else bad "$name (exit $?)"; tail -n 4 "$name.log" | sed 's/^/       /'; fi
}
TRAIN=(train --var C=16 --T 4 --data data.h5 --output out --device cpu --log-every 1 --batch-size 8 --epochs 3
       --lr 0.01 --seed 5 --threads 2)
run "train dense" "$BIN" "${TRAIN[@]}" --run-name dense --conv-algo dense
run "train sparse" "$BIN" "${TRAIN[@]}" --run-name sparse --conv-algo sparse
# the own kernels' AVX2 copies (SPIKEMESH_CPU_AVX512=0) against the default (AVX-512 where this
# CPU has it): the spike sums and the neuron sweeps do the same operations per lane
run "train sparse, AVX2 copies" env SPIKEMESH_CPU_AVX512=0 "$BIN" "${TRAIN[@]}" --run-name sparse_avx2 --conv-algo sparse
avx512=$(grep -m1 '^flags' /proc/cpuinfo | grep -ow 'avx512f\|avx512dq\|avx512vl\|avx512bw' | sort -u | wc -l)
if ckpt_same out/sparse/ckpt_000000012.h5 out/sparse_avx2/ckpt_000000012.h5 --min 11 >same_isa.log 2>&1; then
  if [ "$avx512" -eq 4 ]; then ok "SPIKEMESH_CPU_AVX512=0: bitwise the AVX-512 run's checkpoint (params, buffers, optimizer state)"
  else ok "SPIKEMESH_CPU_AVX512=0: the same checkpoint (no AVX-512 here: both runs took the AVX2 copies)"; fi
else bad "SPIKEMESH_CPU_AVX512=0 changed the checkpoint"; cat same_isa.log; fi
CK=out/dense/ckpt_000000012.h5
for a in dense sparse auto; do
  run "eval $a" "$BIN" eval $CK --device cpu --conv-algo $a --out eval_$a.h5
done
"$PY" - <<'PYEOF' && ok "eval of a trained checkpoint: sparse and auto = dense within f32 rounding" || bad "eval modes differ"
import h5py, numpy as np
d = h5py.File("eval_dense.h5", "r").attrs
for mode in ("sparse", "auto"):
    e = h5py.File(f"eval_{mode}.h5", "r")
    a = e.attrs
    assert abs(a["loss"] - d["loss"]) <= 1e-5 * abs(d["loss"]), (mode, a["loss"], d["loss"])
    assert abs(a["accuracy"] - d["accuracy"]) <= 1 / 16 + 1e-12, (mode, a["accuracy"], d["accuracy"])
    fr, fd = e["firing_rate"][:], h5py.File("eval_dense.h5", "r")["firing_rate"][:]
    assert np.allclose(fr, fd, atol=1e-3) and (fr[:2] > 0).all(), (mode, fr, fd)  # the spike conv's input fires
PYEOF
"$PY" - <<'PYEOF' && ok "training trajectory: sparse = dense within f32 rounding (12 steps)" || bad "training trajectories differ"
import h5py, numpy as np
ld = h5py.File("out/dense/metrics.h5", "r")["step/loss"][:]
ls = h5py.File("out/sparse/metrics.h5", "r")["step/loss"][:]
assert len(ld) == len(ls) == 12, (len(ld), len(ls))
assert np.allclose(ls, ld, rtol=1e-4, atol=0), np.max(np.abs(ls - ld) / np.abs(ld))
PYEOF

# ---- bench: the per-layer table, the record, the sweep -----------------------------------------
run "bench --profile sparse" "$BIN" bench --model fmnist_csnn --var C=16 --batch-size 8 --T 4 --steps 2 --warmup 1 \
  --device cpu --profile --conv-algo sparse --result-log bench.jsonl
grep -q "convolutions of spike inputs (--conv-algo sparse" "bench --profile sparse.log" &&
  grep -Eq "^    [^ ]+ +16->16 14x14 k3 +[0-9.]+% +[0-9.]+ +sparse" "bench --profile sparse.log" &&
  ok "bench --profile: layer, firing rate, kernel" || { bad "bench --profile table"; tail -n 6 "bench --profile sparse.log"; }
# the per-layer-type table of the CPU (host clock over the timed steps), not the GPU's one-step table
grep -q "^  per layer type (ms per step, leaf layers, CPU):" "bench --profile sparse.log" &&
  grep -Eq "^    conv2d +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9]+ +[0-9]+$" "bench --profile sparse.log" &&
  grep -Eq "^    all layers +[0-9.]+ +[0-9.]+%  \(rest: loss, optimizer, framework\)" "bench --profile sparse.log" &&
  ! grep -q "one step, per layer and pass" "bench --profile sparse.log" &&
  ok "bench --profile on the CPU: the per-layer-type table" || { bad "bench --profile CPU table"; tail -n 12 "bench --profile sparse.log"; }
"$BIN" bench --help 2>&1 | grep -q "ONE more step run eagerly" && ok "bench --help: the GPU profile runs one eager step" ||
  bad "bench --help does not say the GPU profile's step is eager"
"$PY" - <<'PYEOF' && ok "bench record: conv_algo and spike_conv_layers" || bad "bench record fields"
import json
r = json.loads(open("bench.jsonl").read().splitlines()[-1])
assert r["conv_algo"] == "sparse", r.get("conv_algo")
layers = r["spike_conv_layers"]
assert len(layers) == 1 and layers[0]["forward_kernel"] == "sparse" and layers[0]["weights_kernel"] == "sparse", layers
assert 0 < layers[0]["firing_rate"] < 1 and layers[0]["shape"] == "16->16 14x14 k3", layers
assert "layer_profile" not in r  # the one-step CUDA-event profile is the GPU's
PYEOF
run "bench --kernel spike-conv" "$BIN" bench --kernel spike-conv --conv-shape 16,16,8,3 --conv-shape 32,24,6,1 \
  --batch-size 2 --T 2 --steps 1
grep -Eq "^  16,16,8,3 +forward( +[0-9.]+){9} +[0-9.]+ +[<>]?[0-9]+% +[0-9]+%$" "bench --kernel spike-conv.log" &&
  grep -Eq "^  32,24,6,1 +weights" "bench --kernel spike-conv.log" &&
  ok "bench --kernel spike-conv: ratios, dense ms, crossover, rule" || { bad "sweep table"; cat "bench --kernel spike-conv.log"; }
# the Winograd sweep: three passes per 3x3 shape, every kernel timed on each, but the
# binary-input kernel has no input-gradient pass ("-"); a 1x1 shape is skipped, named
run "bench --kernel winograd" "$BIN" bench --kernel winograd --conv-shape 16,16,12,3 --conv-shape 16,16,12,1 \
  --batch-size 2 --T 2 --steps 1
W="bench --kernel winograd.log"
grep -Eq "^  16,16,12,3 +forward +[0-9.]+ +([0-9.]+|none here) +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$W" &&
  grep -Eq "^  16,16,12,3 +data +[0-9.]+ +([0-9.]+|none here) +[0-9.]+ +[0-9.]+ +-$" "$W" &&
  grep -Eq "^  16,16,12,3 +weights +[0-9.]+ +([0-9.]+|none here) +[0-9.]+ +[0-9.]+ +[0-9.]+$" "$W" &&
  grep -Eq "16,16,12,1 +not a 3x3 stride-1 convolution: skipped" "$W" &&
  ok "bench --kernel winograd: direct, oneDNN Winograd, own, spikes per pass" || { bad "winograd table"; cat "$W"; }

# ---- bad input ---------------------------------------------------------------------------------
expect_error() {  # expect_error NAME PATTERN COMMAND...: non-zero exit, one error line matching
  local name=$1 pattern=$2; shift 2
  if "$@" >"$name.log" 2>&1; then bad "$name: exit 0"; return; fi
  if grep -q "^spikemesh: error: .*$pattern" "$name.log"; then ok "$name"; else bad "$name: message"; cat "$name.log"; fi
}
expect_error "train --conv-algo fast" "--conv-algo fast: unknown convolution algorithm (valid: dense, sparse, auto)" \
  "$BIN" "${TRAIN[@]}" --run-name bad --conv-algo fast
expect_error "bench --conv-algo fast" "--conv-algo" "$BIN" bench --model fmnist_csnn --conv-algo fast
expect_error "SPIKEMESH_CONV_ALGO=fast" "SPIKEMESH_CONV_ALGO=fast: unknown convolution algorithm" \
  env SPIKEMESH_CONV_ALGO=fast "$BIN" model --model fmnist_csnn
expect_error "SPIKEMESH_MERGE_STEPS=yes" "SPIKEMESH_MERGE_STEPS=yes: expected 1 (on, the default) or 0 (off)" \
  env SPIKEMESH_MERGE_STEPS=yes "$BIN" model --model fmnist_csnn
expect_error "SPIKEMESH_CPU_AVX512=yes" "SPIKEMESH_CPU_AVX512=yes: expected 1 (on where the CPU has AVX-512, the default) or 0 (off)" \
  env SPIKEMESH_CPU_AVX512=yes "$BIN" model --model fmnist_csnn
expect_error "bad conv-shape" "--conv-shape 1,2: expected Cin,Cout,H,K" "$BIN" bench --kernel spike-conv --conv-shape 1,2
finish
