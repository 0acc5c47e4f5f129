#!/usr/bin/env bash
# ckpt_export.sh — the workflow after training: `spikemesh ckpt verify`, `ckpt export`
# and scripts/ckpt_to_torch.py on checkpoints of a tiny fmnist_csnn (C=4, T=2, synthetic
# Fashion-MNIST-shaped data) trained on one rank and on 2 ranks (FSDP: sharded parameters and
# optimizer state; tp 2: channel-split convolutions and BN buffers):
#   * verify says "ok (N tensors, M bytes, step S, layout ...)" for each (exit 0), one line each;
#   * a copy with one flipped byte in a weight fails (exit 1) naming the dataset and the checksum,
#     a copy without a BN buffer fails naming it, a truncated and a non-HDF5 file fail cleanly
#     (no signal), and a list of good + bad files exits 1;
#   * export + ckpt_to_torch.py: the .pt loads into the PyTorch twin (tests/parity/torch_models.py
#     CSNN(C=4)) with load_state_dict(strict=True), and every tensor, a weight and the BN running
#     stats included, equals the checkpoint's bit for bit;
#   * the same step written by one rank and by 2 FSDP ranks exports identically: both resume one
#     checkpoint for one more step with --lr 0 (parameters unchanged) under a spec copy whose BN
#     momentum is 0 (running stats unchanged), so the two files hold the same state; and
#     `mpirun -np 2 spikemesh ckpt export` writes the same file as one process.
# Usage: BIN=build/bin/spikemesh tests/e2e/ckpt_export.sh   (needs $PY with h5py, numpy, torch)
E2E_NAME=ckpt_export
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
[ -x "$BIN" ] || { echo "ckpt_export: $BIN not built"; echo "ckpt_export: 0 passed, 1 failed"; exit 1; }
MPI=(timeout 120 mpirun --bind-to none --oversubscribe -np 2)
finish() { echo "ckpt_export: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }

# ---- data, spec copy, runs -----------------------------------------------------------------------
fmnist_h5 data.h5 || { bad "craft dataset"; finish; }
"$PY" - "$ROOT" <<'EOF' || { bad "craft spec"; finish; }
import sys
spec = open(sys.argv[1] + "/input/models/fmnist_csnn.toml").read()
assert spec.count('type = "batchnorm2d", num_features = "C"') == 2
open("csnn_m0.toml", "w").write(spec.replace('type = "batchnorm2d", num_features = "C"',
                                             'type = "batchnorm2d", num_features = "C", momentum = 0.0'))
EOF
COMMON=(train --var C=4 --T 2 --data data.h5 --output out --device cpu --log-every 1 --seed 5)
run() {  # run NAME CKPT COMMAND...: COMMAND must exit 0 and leave CKPT
  local name=$1 ck=$2
  shift 2
  if "$@" >"$name.log" 2>&1 && [ -f "$ck" ]; then ok "$name"; else bad "$name"; tail -n 4 "$name.log" | sed 's/^/       /'; fi
}
ONE=out/one/ckpt_000000002.h5
TWO=out/two/ckpt_000000002.h5
run "train one rank" $ONE "$BIN" "${COMMON[@]}" --batch-size 8 --max-steps 2 --run-name one
run "train 2 ranks fsdp" $TWO "${MPI[@]}" "$BIN" "${COMMON[@]}" --batch-size 4 --max-steps 2 --run-name two \
  --distributed-mode fsdp
run "train 2 ranks tp" out/tp/ckpt_000000002.h5 "${MPI[@]}" "$BIN" "${COMMON[@]}" --batch-size 8 --max-steps 2 --run-name tp \
  --distributed-mode tp --mesh-shape 1 2 1

# ---- verify --------------------------------------------------------------------------------------
for ck in $ONE $TWO out/tp/ckpt_000000002.h5; do
  "$BIN" ckpt verify $ck >v.out 2>v.err; rc=$?
  if [ $rc -eq 0 ] && grep -qE "^$ck: ok \([0-9]+ tensors, [0-9]+ bytes, step 2, layout dp=[12] tp=[12] " v.out &&
     [ "$(wc -l <v.out)" -eq 1 ]; then ok "verify $ck: $(cat v.out)"
  else bad "verify $ck (exit $rc)"; cat v.out v.err | head -n 5 | sed 's/^/       /'; fi
done
"$PY" - $TWO <<'EOF' || bad "craft damaged copies"
import sys, shutil, h5py
src = sys.argv[1]
for name in ("flip.h5", "nobuf.h5"):
    shutil.copy(src, name)
with h5py.File("flip.h5", "r") as f:
    off = f["params/conv_fc.4.weight"].id.get_offset()
b = bytearray(open("flip.h5", "rb").read()); b[off + 6] ^= 0x20; open("flip.h5", "wb").write(bytes(b))
with h5py.File("nobuf.h5", "r+") as f:
    del f["buffers/conv_fc.5.running_var"]
open("cut.h5", "wb").write(open(src, "rb").read()[:30000])
open("text.h5", "w").write("not a checkpoint\n")
EOF
# expect_fail NAME NEEDLE... -- FILES...: exit 1, one "spikemesh: error:" line, stdout names every NEEDLE
expect_fail() {
  local name=$1 needles=() why=""
  shift
  while [ "$1" != "--" ]; do needles+=("$1"); shift; done
  shift
  timeout 60 "$BIN" ckpt verify "$@" >v.out 2>v.err; local rc=$?
  if [ $rc -ne 1 ]; then why="exit $rc (want 1)"
  elif [ "$(grep -c '^spikemesh: error:' v.err)" -ne 1 ]; then why="not one error line"
  else for s in "${needles[@]}"; do grep -qF -- "$s" v.out || { why="no '$s' in the report"; break; }; done; fi
  if [ -z "$why" ]; then ok "$name"; else bad "$name: $why"; cat v.out v.err | head -n 6 | sed 's/^/       /'; fi
}
expect_fail "flipped byte: crc problem named" "flip.h5: FAILED" "/params/conv_fc.4.weight is corrupted (checksum mismatch)" -- flip.h5
expect_fail "missing BN buffer named" "/buffers/conv_fc.5.running_var" "is missing" -- nobuf.h5
expect_fail "truncated file" "cut.h5: FAILED" "truncated or damaged" -- cut.h5
expect_fail "not HDF5" "text.h5: FAILED" "not an HDF5 file" -- text.h5
expect_fail "good + bad: exit 1, good still ok" "$ONE: ok (" "flip.h5: FAILED" -- $ONE flip.h5

# ---- export -> .pt -> the PyTorch twin -------------------------------------------------------------
for tag in one two tp; do
  ck=out/$tag/ckpt_000000002.h5
  if "$BIN" ckpt export $ck --out $tag.h5 >e.out 2>&1 && "$PY" "$ROOT/scripts/ckpt_to_torch.py" $tag.h5 $tag.pt >>e.out 2>&1
  then ok "export $tag: $(head -n 1 e.out)"; else bad "export $tag"; tail -n 4 e.out | sed 's/^/       /'; fi
  if "$PY" - "$ROOT" $ck $tag.h5 $tag.pt >t.out 2>&1 <<'EOF'
import sys, h5py, numpy as np, torch
root, ck, flat, pt = sys.argv[1:5]
sys.path.insert(0, root + "/tests/parity")
import torch_models as tm
model = tm.CSNN(C=4)
model.load_state_dict(torch.load(pt), strict=True)  # raises on any missing/extra name or shape
sd = model.state_dict()
with h5py.File(ck, "r") as c, h5py.File(flat, "r") as e:
    assert (e.attrs["model"], int(e.attrs["T"]), int(e.attrs["step"])) == ("fmnist_csnn", 2, 2), dict(e.attrs)
    names = {"params/" + k: k for k in c["params"]} | {"buffers/" + k: k for k in c["buffers"]}
    assert set(names.values()) == set(sd) == set(e.keys()), "names differ"
    for path, k in names.items():
        want = np.asarray(c[path][()])
        got = sd[k].numpy()
        assert got.dtype == want.dtype or k.endswith("num_batches_tracked"), (k, got.dtype, want.dtype)
        assert got.shape == want.shape and got.tobytes() == want.astype(got.dtype).tobytes(), k
    w = sd["conv_fc.4.weight"].numpy()
    assert w.tobytes() == np.asarray(c["params/conv_fc.4.weight"][()]).tobytes() and np.abs(w).max() > 0
    rv = sd["conv_fc.1.running_var"].numpy()
    assert not np.all(rv == 1.0), "running stats were not trained"
print(f"{len(sd)} tensors equal bit for bit")
EOF
  then ok "$tag: load_state_dict(strict=True) into the torch twin, $(tail -n 1 t.out)"
  else bad "$tag: torch twin"; tail -n 4 t.out | sed 's/^/       /'; fi
done

# ---- the same step from one rank and from 2 FSDP ranks: identical exports ---------------------------
M0=(--model-spec csnn_m0.toml --batch-size 8)
run "train m0 one rank" out/m0/ckpt_000000002.h5 "$BIN" "${COMMON[@]}" "${M0[@]}" --max-steps 2 --run-name m0
run "resume m0 one rank, lr 0" out/r1/ckpt_000000003.h5 "$BIN" "${COMMON[@]}" "${M0[@]}" --max-steps 3 --lr 0 \
  --run-name r1 --resume out/m0/ckpt_000000002.h5
run "resume m0 2 ranks fsdp, lr 0" out/r2/ckpt_000000003.h5 "${MPI[@]}" "$BIN" "${COMMON[@]}" --model-spec csnn_m0.toml \
  --batch-size 4 --distributed-mode fsdp --max-steps 3 --lr 0 --run-name r2 --resume out/m0/ckpt_000000002.h5
"$BIN" ckpt export out/r1/ckpt_000000003.h5 --out r1.h5 >/dev/null 2>&1 || bad "export r1"
"$BIN" ckpt export out/r2/ckpt_000000003.h5 --out r2.h5 >/dev/null 2>&1 || bad "export r2"
"${MPI[@]}" "$BIN" ckpt export out/r2/ckpt_000000003.h5 --out r2np2.h5 >np2.log 2>&1 || { bad "mpirun -np 2 ckpt export"; tail -n 3 np2.log; }
same() {  # same A B: identical datasets (names, dtypes, shapes, bytes) and attributes but source
  "$PY" - "$1" "$2" <<'EOF'
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
assert sorted(a.keys()) == sorted(b.keys()) and len(a.keys()) == 14, (list(a.keys()), list(b.keys()))
for k in a.keys():
    x, y = a[k], b[k]
    assert x.dtype == y.dtype and x.shape == y.shape and x[()].tobytes() == y[()].tobytes(), k
ka = {k: v for k, v in a.attrs.items() if k != "source"}
kb = {k: v for k, v in b.attrs.items() if k != "source"}
assert ka == kb and int(ka["step"]) == int(kb["step"]), (ka, kb)
EOF
}
if [ -f r1.h5 ] && [ -f r2.h5 ] && same r1.h5 r2.h5 >same.log 2>&1; then ok "step 3 from one rank == step 3 from 2 fsdp ranks (export)"
else bad "one-rank and 2-rank exports differ"; tail -n 3 same.log | sed 's/^/       /'; fi
if [ -f r2np2.h5 ] && same r2.h5 r2np2.h5 >same.log 2>&1; then ok "mpirun -np 2 ckpt export == one process"
else bad "mpirun -np 2 ckpt export differs from one process"; fi
finish
