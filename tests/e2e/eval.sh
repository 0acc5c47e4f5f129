#!/usr/bin/env bash
# eval.sh — `spikemesh eval` and every subcommand's --help, on a tiny fmnist_csnn
# (C=8, T=4, synthetic Fashion-MNIST-shaped data, 3 epochs so every neuron layer fires):
#   * eval of the final checkpoint equals the evaluation train logged at that step in metrics.h5
#     exactly (loss, accuracy, firing rates; fp32, one rank; and a pp 2 run evaluated at pp 2);
#   * eval.h5 is readable by h5py: its attributes, per-class counts summing to correct/count,
#     per-class accuracy = correct/count, firing rates named by layer; the table is printed;
#   * an fp64 checkpoint evaluated on 2 ranks (dp 2, pp 2) equals one rank (counts exact, loss and
#     firing rates to 1e-12), also a run directory given instead of a file, --split train;
#   * bad input: a missing checkpoint, a dataset whose shape or classes do not fit the model, an
#     unknown flag, a bad --split: one 'spikemesh: error:' line naming it, non-zero exit, also on
#     2 ranks, within a timeout (never a hang);
#   * every subcommand's --help shows an example of itself and cites nothing outside the
#     repository (neither the first design nor the first semantics page: doc_refs.sh's patterns).
# Usage: BIN=build/bin/spikemesh tests/e2e/eval.sh   (needs $PY with h5py and numpy)
E2E_NAME=eval
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
finish() { echo "eval: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
[ -x "$BIN" ] || { bad "$BIN not built"; finish; }
MPI=(timeout 120 mpirun --bind-to none --oversubscribe -np 2)
fmnist_h5 data.h5 || { bad "craft dataset"; finish; }
"$PY" - <<'PYEOF' || { bad "craft mismatching datasets"; finish; }
import h5py, numpy as np
for name, shape, k in (("shape.h5", (1, 20, 20), 10), ("classes.h5", (1, 28, 28), 5)):
    with h5py.File(name, "w") as f:
        f.attrs["num_classes"] = k; f.attrs["layout"] = "NCHW"; f.attrs["T"] = 0; f.attrs["x_scale"] = 1 / 255.0
        for s in ("train", "test"):
            f[s + "/x"] = np.zeros((8,) + shape, np.uint8); f[s + "/y"] = np.arange(8, dtype=np.int64) % k
PYEOF
TRAIN=(train --var C=8 --T 4 --data data.h5 --output out --device cpu --log-every 100 --batch-size 8 --epochs 3
       --lr 0.01 --seed 3)
run() {  # run NAME COMMAND...: must exit 0
  local name=$1; shift
  if "$@" >"$name.log" 2>&1; then ok "$name"; else bad "$name (exit $?)"; tail -n 4 "$name.log" | sed 's/^/       /'; fi
}
run "train fp32" "$BIN" "${TRAIN[@]}" --run-name f32 --eval-batch-size 6
run "train fp32 pp 2" "${MPI[@]}" "$BIN" "${TRAIN[@]}" --run-name pp --distributed-mode pp --mesh-shape 1 1 2
run "train fp64" "$BIN" "${TRAIN[@]}" --run-name f64 --precision fp64
CK=out/f32/ckpt_000000012.h5

# ---- eval equals train's logged evaluation ---------------------------------------------------
run "eval fp32" "$BIN" eval $CK --device cpu
run "eval fp32 pp 2" "${MPI[@]}" "$BIN" eval out/pp/ckpt_000000012.h5 --device cpu --distributed-mode pp --mesh-shape 1 1 2
grep -q "^test split of data.h5, 16 samples: loss" "eval fp32.log" && grep -q "class    samples  correct  accuracy" "eval fp32.log" &&
  grep -q "^wrote out/f32/eval.h5" "eval fp32.log" && grep -q "^eval test: batch 3/3" "eval fp32.log" &&
  ok "table and progress printed" || { bad "table and progress printed"; head -n 20 "eval fp32.log"; }
"$PY" - <<'PYEOF' && ok "eval.h5 = train's logged evaluation (fp32 one rank, fp32 pp 2), per-class sums" || bad "eval.h5 contents"
import h5py, numpy as np
for run in ("f32", "pp"):
    e = h5py.File(f"out/{run}/eval.h5", "r"); m = h5py.File(f"out/{run}/metrics.h5", "r")
    a = e.attrs
    row = list(m["eval/step"][:]).index(a["step"])
    assert a["format"] == "spikemesh-eval" and a["split"] == "test" and a["step"] == 12 and a["model"] == "fmnist_csnn", dict(a)
    assert a["loss"] == m["eval/loss"][row] and a["accuracy"] == m["eval/accuracy"][row], (a["loss"], m["eval/loss"][row])
    fr, mfr = e["firing_rate"][:], m["eval/firing_rate"][row]
    assert np.array_equal(fr, mfr) and (fr > 0).all(), (fr, mfr)
    assert e["firing_rate"].attrs["layer_names"] == m["eval/firing_rate"].attrs["layer_names"]
    c, n, acc = e["class/correct"][:], e["class/count"][:], e["class/accuracy"][:]
    assert len(c) == len(n) == len(acc) == a["num_classes"] == 10
    assert c.sum() == a["correct"] and n.sum() == a["count"] == 16 and a["correct"] == round(a["accuracy"] * 16)
    y = h5py.File("data.h5", "r")["test/y"][:]
    assert (n == np.bincount(y, minlength=10)).all() and (c <= n).all()
    assert np.allclose(acc[n > 0], c[n > 0] / n[n > 0]) and np.isnan(acc[n == 0]).all()
PYEOF

# ---- layouts: dp 2 and pp 2 equal one rank (fp64) ----------------------------------------------
run "eval fp64 one rank (run dir)" "$BIN" eval out/f64 --device cpu --out one.h5
run "eval fp64 dp 2" "${MPI[@]}" "$BIN" eval out/f64/ckpt_000000012.h5 --device cpu --distributed-mode dp --out dp2.h5
run "eval fp64 pp 2" "${MPI[@]}" "$BIN" eval out/f64/ckpt_000000012.h5 --device cpu --distributed-mode pp \
  --mesh-shape 1 1 2 --out pp2.h5
run "eval fp64 train split" "$BIN" eval out/f64/ckpt_000000012.h5 --device cpu --split train
"$PY" - <<'PYEOF' && ok "dp 2 and pp 2 equal one rank; --split train" || bad "layouts differ"
import h5py, numpy as np
one = h5py.File("one.h5", "r")
for name, lay in (("dp2.h5", "dp=2 tp=1 pp=1"), ("pp2.h5", "dp=1 tp=1 pp=2")):
    o = h5py.File(name, "r")
    assert o.attrs["layout"].startswith(lay) and o.attrs["world_size"] == 2, dict(o.attrs)
    for k in ("correct", "count", "step"):
        assert o.attrs[k] == one.attrs[k], (name, k)
    assert np.isclose(o.attrs["loss"], one.attrs["loss"], rtol=1e-12, atol=0), (name, o.attrs["loss"], one.attrs["loss"])
    for d in ("class/correct", "class/count"):
        assert (o[d][:] == one[d][:]).all(), (name, d)
    assert np.allclose(o["firing_rate"][:], one["firing_rate"][:], rtol=1e-12, atol=0), name
t = h5py.File("out/f64/eval_train.h5", "r")
assert t.attrs["split"] == "train" and t.attrs["count"] == 32 and t["class/count"][:].sum() == 32
PYEOF

# ---- bad input: one line, non-zero exit, every rank ---------------------------------------------
expect_error() {  # expect_error NAME NEEDLE COMMAND...
  local name=$1 needle=$2; shift 2
  timeout 60 "$@" >e.out 2>e.err; local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c '^spikemesh: error:' e.err)" -eq 1 ] && grep -q '^spikemesh: error:.*'"$needle" e.err
  then ok "$name: $(grep '^spikemesh: error:' e.err | cut -c1-110)"
  else bad "$name (exit $rc)"; cat e.out e.err | head -n 6 | sed 's/^/       /'; fi
}
expect_error "missing checkpoint" "nope/ckpt_000000001.h5" "$BIN" eval nope/ckpt_000000001.h5
expect_error "missing checkpoint, 2 ranks" "nope/ckpt_000000001.h5" "${MPI[@]}" "$BIN" eval nope/ckpt_000000001.h5
expect_error "empty run directory" "holds no complete checkpoint" "$BIN" eval "$TMP"
expect_error "dataset shape" "shape.h5: samples are" "$BIN" eval $CK --data shape.h5 --device cpu
expect_error "dataset classes, 2 ranks" "classes.h5 has 5 classes" "${MPI[@]}" "$BIN" eval $CK --data classes.h5 --device cpu \
  --distributed-mode dp
expect_error "missing dataset" "missing.h5" "$BIN" eval $CK --data missing.h5 --device cpu
expect_error "unknown flag" "--lr" "$BIN" eval $CK --lr 0.1
expect_error "bad split" "--split" "$BIN" eval $CK --split valid
expect_error "no checkpoint argument" "checkpoint" "$BIN" eval

# ---- every subcommand's --help: its own examples, nothing outside the repository ---------------
for c in "" model dump-grads data "data fashion-mnist" "data synth-dvs" "data info" train eval ckpt "ckpt info" \
         "ckpt verify" "ckpt export" bench plan commtest; do
  "$BIN" $c --help >h.out 2>&1; rc=$?
  want="spikemesh ${c:-train}"  # the top level: its workflow names train
  if [ $rc -eq 0 ] && grep -q "^ *\(mpirun -np [0-9]* \)\?$want\( \|$\)" h.out && ! grep -q "DES[I]GN\|spec[ ]§" h.out; then
    ok "--help of '${c:-spikemesh}': own examples, no outside citation"
  else bad "--help of '${c:-spikemesh}' (exit $rc)"; grep -n "Example\|DES[I]GN\|spec[ ]§" h.out | head -n 3; fi
done
finish
