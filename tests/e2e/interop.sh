#!/usr/bin/env bash
# interop.sh — models in and out with Debian's Python (torch 1.13, h5py), on a fmnist_csnn
# (C=8, T=3, fp64, synthetic Fashion-MNIST-shaped data):
#   * PyTorch -> spikemesh: the PyTorch twin (tests/parity/torch_models.py CSNN) with a seeded
#     init and batch norms that make every layer fire, saved with torch.save (a bare state dict,
#     and a training checkpoint {"model": ..., "epoch": ...} of a DistributedDataParallel module
#     whose names start with "module."), converted by scripts/torch_to_safetensors.py, `ckpt
#     import`ed, then `eval --save-outputs`: every sample's output rate equals the twin's eval-mode
#     forward on the same inputs exactly (spikes are integers; fp64 on both sides);
#   * `train --init`: a run starts from the import (log line, fresh optimizer, step 0) — one step
#     with --lr 0 on one rank, on 2 data-parallel ranks and on 2 pipeline stages leaves every parameter equal to the
#     file's, bit for bit; rerun with --resume auto it continues from the run's own checkpoint
#     (--init ignored); a missing --init file and a safetensors file are refused naming --init;
#   * spikemesh -> PyTorch: `ckpt export --out x.safetensors` read with a plain reader of the format
#     (json header + raw bytes) equals the h5 export bit for bit and loads into the twin with
#     load_state_dict(strict=True); `ckpt export --out x.nir` of the max-pooling CSNN is refused
#     naming conv_fc.3, of fmnist_csnn_avgpool written with the batch norms folded (checked in
#     numpy against the h5 export);
#   * bad input: a truncated safetensors, a header length past the end, offsets outside the data,
#     overlapping tensors, a wrong dtype, another model's names, a misshapen tensor, --out equal to
#     the input, a .pt given directly, a text file — each one "spikemesh: error:" line naming the
#     problem, a non-zero exit and no --out file.
# Usage: BIN=build/bin/spikemesh tests/e2e/interop.sh   (needs $PY with h5py, numpy, torch)
E2E_NAME=interop
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$TMP" || exit 1
[ -x "$BIN" ] || { echo "interop: $BIN not built"; echo "interop: 0 passed, 1 failed"; exit 1; }
finish() { echo "interop: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
MODEL=(--model fmnist_csnn --var C=8 --T 3 --precision fp64)

fmnist_h5 data.h5 || { bad "craft dataset"; finish; }
# ---- PyTorch -> safetensors -> import -> eval --------------------------------------------------------
"$PY" - "$ROOT" <<'EOF' >twin.log 2>&1 || { bad "twin state dicts"; cat twin.log; finish; }
import sys, collections, torch
sys.path.insert(0, sys.argv[1] + "/tests/parity")
import torch_models as tm
torch.manual_seed(11)
m = tm.CSNN(C=8).double()
g = torch.Generator().manual_seed(5)
for name, mod in m.named_modules():
    if isinstance(mod, torch.nn.BatchNorm2d):  # trained-looking statistics that make every layer fire
        c = mod.num_features
        mod.running_mean.copy_(torch.rand(c, generator=g, dtype=torch.float64) * 0.2 - 0.1)
        mod.running_var.copy_(torch.rand(c, generator=g, dtype=torch.float64) * 0.5 + 0.05)
        mod.weight.data.copy_(torch.rand(c, generator=g, dtype=torch.float64) * 2 + 1)
        mod.bias.data.copy_(torch.rand(c, generator=g, dtype=torch.float64) * 0.5)
        mod.num_batches_tracked.fill_(17)
with torch.no_grad():  # the classifier: large enough weights that the last two IF layers fire
    m.conv_fc[9].weight.mul_(6.0)
    m.conv_fc[11].weight.mul_(8.0)
sd = m.state_dict()
torch.save(sd, "twin.pt")
torch.save({"epoch": 3, "model": collections.OrderedDict(("module." + k, v) for k, v in sd.items())}, "ddp.pt")
EOF
if "$PY" "$ROOT/scripts/torch_to_safetensors.py" twin.pt twin.safetensors >conv.log 2>&1 &&
   "$PY" "$ROOT/scripts/torch_to_safetensors.py" ddp.pt ddp.safetensors >>conv.log 2>&1; then ok "torch_to_safetensors: $(head -n 1 conv.log)"
else bad "torch_to_safetensors"; cat conv.log; fi
if "$BIN" ckpt import twin.safetensors "${MODEL[@]}" --out init.h5 >imp.log 2>&1 && [ -f init.h5 ] &&
   grep -q "^wrote init.h5: step-0 checkpoint of model fmnist_csnn" imp.log; then ok "ckpt import: $(tail -n 1 imp.log)"
else bad "ckpt import"; cat imp.log; fi
if "$BIN" ckpt import ddp.safetensors "${MODEL[@]}" --out ddp.h5 >ddp.log 2>&1 && grep -q "'module.'" ddp.log
then ok "ckpt import of a DDP checkpoint drops 'module.'"; else bad "ckpt import ddp"; cat ddp.log; fi
"$BIN" ckpt verify init.h5 >/dev/null 2>&1 && ok "ckpt verify init.h5" || bad "ckpt verify init.h5"
if "$BIN" eval init.h5 --data data.h5 --save-outputs --out e.h5 >eval.log 2>&1; then ok "eval --save-outputs"
else bad "eval"; tail -n 4 eval.log; fi
if "$PY" - "$ROOT" <<'EOF' >cmp.log 2>&1; then ok "import -> eval == the PyTorch twin: $(tail -n 1 cmp.log)"
import sys, h5py, numpy as np, torch
sys.path.insert(0, sys.argv[1] + "/tests/parity")
import torch_models as tm
m = tm.CSNN(C=8).double()
m.load_state_dict(torch.load("twin.pt"))
m.eval()
with h5py.File("data.h5") as d, h5py.File("e.h5") as e:
    u8, labels = d["test/x"][()], d["test/y"][()]
    scale = np.float32(d.attrs["x_scale"])
    out, lab = e["outputs"][()], e["labels"][()]
x = torch.from_numpy((u8.astype(np.float32) * scale).astype(np.float64))  # the loader's f32 scaling
with torch.no_grad():
    y = m(x.unsqueeze(0).repeat(3, 1, 1, 1, 1)).mean(0).numpy()
assert out.shape == y.shape == (16, 10), (out.shape, y.shape)
assert (lab == labels).all()
assert y.sum() > 0 and (y > 0).mean() > 0.2, "the last layer should fire"
diff = np.abs(out - y).max()
assert diff == 0, f"largest difference {diff}"
print(f"16 samples x 10 output rates equal (output spikes {int(y.sum() * 3)})")
EOF
else bad "import -> eval vs twin"; tail -n 5 cmp.log; fi

# ---- train --init -------------------------------------------------------------------------------------
T=(train "${MODEL[@]}" --data data.h5 --output out --device cpu --max-steps 1 --lr 0 --log-every 1)
"$BIN" "${T[@]}" --batch-size 8 --run-name one --init init.h5 >one.log 2>&1 || { bad "train --init (one rank)"; tail -n 4 one.log; }
grep -q "initialised from init.h5: the parameters and buffers of model fmnist_csnn (step 0" out/one/log.txt &&
  ok "train --init logs where it started" || bad "no 'initialised from' line"
timeout 120 mpirun --bind-to none --oversubscribe -np 2 "$BIN" "${T[@]}" --batch-size 4 --run-name two --init init.h5 \
  --distributed-mode dp >two.log 2>&1 || { bad "train --init (2 dp ranks)"; tail -n 4 two.log; }
timeout 120 mpirun --bind-to none --oversubscribe -np 2 "$BIN" "${T[@]}" --batch-size 8 --run-name pp --init init.h5 \
  --distributed-mode pp --mesh-shape 1 1 2 >pp.log 2>&1 || { bad "train --init (2 pp stages)"; tail -n 4 pp.log; }
if "$PY" - <<'EOF' >init.log 2>&1; then ok "--lr 0 step from --init: every parameter equals the import (one rank, dp 2, pp 2)"
import h5py, numpy as np
with h5py.File("init.h5") as a:
    for run in ("one", "two", "pp"):
        with h5py.File(f"out/{run}/ckpt_000000001.h5") as b:
            assert int(b["meta"].attrs["step"]) == 1
            for k in a["params"]:
                assert a["params"][k][()].tobytes() == b["params"][k][()].tobytes(), (run, k)
EOF
else bad "--init parameters"; tail -n 3 init.log; fi
"$BIN" train "${MODEL[@]}" --data data.h5 --output out --device cpu --batch-size 8 --max-steps 2 --run-name one \
  --init init.h5 --resume auto >again.log 2>&1 && grep -q "^--init init.h5 ignored: the run continues from its own checkpoint" out/one/log.txt &&
  grep -q "resumed from out/one/ckpt_000000001.h5 at step 1" out/one/log.txt &&
  ok "--init with --resume auto after a first run: resumes, --init ignored" || { bad "--init + --resume auto"; tail -n 3 again.log; }
expect_error "--init of a missing file" "--init nope.h5" "spikemesh ckpt import" -- "$BIN" "${T[@]}" --batch-size 8 --run-name four --init nope.h5
expect_error "--init of a safetensors file" "--init twin.safetensors" "spikemesh ckpt import" -- \
  "$BIN" "${T[@]}" --batch-size 8 --run-name five --init twin.safetensors

# ---- spikemesh -> PyTorch: safetensors, NIR -------------------------------------------------------------
CK=out/one/ckpt_000000001.h5
"$BIN" ckpt export $CK --out x.h5 >/dev/null 2>&1 && "$BIN" ckpt export $CK --out x.safetensors >xs.log 2>&1 &&
  ok "ckpt export --out x.safetensors: $(cat xs.log)" || { bad "ckpt export safetensors"; cat xs.log; }
if "$PY" - "$ROOT" <<'EOF' >xs_cmp.log 2>&1; then ok "safetensors export == h5 export bitwise; loads strictly into the twin"
import sys, json, struct, h5py, numpy as np, torch
sys.path.insert(0, sys.argv[1] + "/tests/parity")
import torch_models as tm
raw = open("x.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
meta = head.pop("__metadata__")
assert meta["model"] == "fmnist_csnn" and meta["step"] == "1" and meta["format"] == "pt", meta
codes = {"F64": np.float64, "F32": np.float32, "I64": np.int64}
sd = {}
with h5py.File("x.h5") as h:
    assert sorted(head) == sorted(h.keys())
    for k, v in head.items():
        a, b = v["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=codes[v["dtype"]]).reshape(v["shape"])
        ref = h[k][()]
        assert arr.dtype == ref.dtype and arr.tobytes() == np.asarray(ref).tobytes(), k
        sd[k] = torch.from_numpy(arr.copy())
m = tm.CSNN(C=8).double()
m.load_state_dict(sd, strict=True)
EOF
else bad "safetensors export"; tail -n 4 xs_cmp.log; fi
expect_error "NIR export of max pooling" "conv_fc.3 (maxpool2d)" "avgpool2d" -- "$BIN" ckpt export $CK --out x.nir
[ ! -e x.nir ] && ok "nothing written for the refused NIR export" || bad "x.nir written"
"$BIN" train --model fmnist_csnn_avgpool --var C=8 --T 3 --precision fp64 --data data.h5 --output out --device cpu \
  --batch-size 8 --max-steps 2 --run-name avg >avg.log 2>&1 || { bad "train fmnist_csnn_avgpool"; tail -n 3 avg.log; }
"$BIN" ckpt export out/avg/ckpt_000000002.h5 --out avg.h5 >/dev/null 2>&1 || bad "export avg h5"
if "$BIN" ckpt export out/avg/ckpt_000000002.h5 --out avg.nir >nir.log 2>&1 && "$PY" - <<'EOF' >nir_cmp.log 2>&1
import h5py, numpy as np
with h5py.File("avg.nir") as f, h5py.File("avg.h5") as s:
    assert f["version"][()] and f["node/type"][()] == b"NIRGraph"
    nodes = f["node/nodes"]
    types = {k: nodes[k]["type"][()].decode() for k in nodes}
    assert types["conv_fc_0"] == "Conv2d" and types["conv_fc_2"] == "IF" and types["conv_fc_3"] == "AvgPool2d", types
    assert types["conv_fc_8"] == "Flatten" and types["conv_fc_9"] == "Linear" and "conv_fc_1" not in types, types
    edges = [(a.decode(), b.decode()) for a, b in f["node/edges"][()]]
    assert edges[0] == ("input", "conv_fc_0") and edges[-1] == ("conv_fc_12", "output"), edges
    w, g, b = s["conv_fc.4.weight"][()], s["conv_fc.5.weight"][()], s["conv_fc.5.bias"][()]
    mu, var = s["conv_fc.5.running_mean"][()], s["conv_fc.5.running_var"][()]
    k = g / np.sqrt(var + 1e-5)
    assert np.allclose(nodes["conv_fc_4/weight"][()], w * k[:, None, None, None], rtol=1e-14, atol=0)
    assert np.allclose(nodes["conv_fc_4/bias"][()], b - mu * k, rtol=1e-13, atol=1e-15)
    assert (nodes["conv_fc_2/r"][()] == 1e4).all() and nodes["conv_fc_2/r"].shape == (8, 28, 28)
print("ok")
EOF
then ok "NIR export of fmnist_csnn_avgpool: $(cat nir.log)"; else bad "NIR export"; cat nir.log; tail -n 4 nir_cmp.log; fi

# ---- bad input: one message, nothing written ------------------------------------------------------------
"$PY" - <<'EOF' || bad "craft bad files"
import json, struct
raw = open("twin.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n]); data = raw[8 + n:]
def save(name, h, d, length=None):
    t = json.dumps(h).encode()
    open(name, "wb").write(struct.pack("<Q", length if length is not None else len(t)) + t + d)
open("cut.safetensors", "wb").write(raw[:len(raw) - 100])
save("past.safetensors", head, data, length=len(raw) + 4096)
save("nul.safetensors", head, data, length=len(raw) - 8 - 64)  # the header runs into the data (a 0 byte)
h = json.loads(json.dumps(head)); k = "conv_fc.0.weight"; a, b = h[k]["data_offsets"]
h[k]["data_offsets"] = [a + len(data), b + len(data)]; save("outside.safetensors", h, data)
h = json.loads(json.dumps(head)); names = sorted(h, key=lambda x: h[x]["data_offsets"][0] if x != "__metadata__" else -1)
first, second = [x for x in names if x != "__metadata__"][:2]
h[second]["data_offsets"][0] -= 4; h[second]["shape"] = [ (h[second]["data_offsets"][1] - h[second]["data_offsets"][0]) // 8 ]
save("overlap.safetensors", h, data)
h = json.loads(json.dumps(head)); a, b = h[k]["data_offsets"]; h[k]["dtype"] = "I64"; save("dtype.safetensors", h, data)
h = {("x." + key if key != "__metadata__" else key): v for key, v in head.items()}; save("other.safetensors", h, data)
open("text.safetensors", "w").write("not a state dict\n")
EOF
"$BIN" ckpt import twin.safetensors --model fmnist_csnn --var C=4 --T 3 --out wrong_c.h5 >/dev/null 2>wc.err
grep -q "misshapen: conv_fc.0.weight is \[8, 1, 3, 3\] in the file, \[4, 1, 3, 3\] in the model" wc.err &&
  ok "another width: the misshapen tensor named" || { bad "misshapen message"; cat wc.err; }
expect_error "truncated safetensors" "cut.safetensors" "outside the data section" -- "$BIN" ckpt import cut.safetensors "${MODEL[@]}" --out o1.h5
expect_error "header length past the end" "past.safetensors" "runs past the end" -- "$BIN" ckpt import past.safetensors "${MODEL[@]}" --out o2.h5
expect_error "header length into the data" "nul.safetensors" "NUL byte" -- "$BIN" ckpt import nul.safetensors "${MODEL[@]}" --out o0.h5
expect_error "offsets outside the data" "outside.safetensors" "conv_fc.0.weight" "outside the data section" -- "$BIN" ckpt import outside.safetensors "${MODEL[@]}" --out o3.h5
expect_error "overlapping tensors" "overlap.safetensors" "overlap" -- "$BIN" ckpt import overlap.safetensors "${MODEL[@]}" --out o4.h5
expect_error "wrong dtype" "dtype.safetensors" "conv_fc.0.weight is i64" -- "$BIN" ckpt import dtype.safetensors "${MODEL[@]}" --out o5.h5
expect_error "another model's names" "other.safetensors" "no name matches" -- "$BIN" ckpt import other.safetensors "${MODEL[@]}" --out o6.h5
expect_error "--out equal to the input" "is the input file itself" -- "$BIN" ckpt import twin.safetensors "${MODEL[@]}" --out twin.safetensors
expect_error "a .pt given directly" "twin.pt" "torch_to_safetensors.py" -- "$BIN" ckpt import twin.pt "${MODEL[@]}" --out o7.h5
expect_error "a text file" "text.safetensors" "not a safetensors file" -- "$BIN" ckpt import text.safetensors "${MODEL[@]}" --out o8.h5
expect_error "an HDF5 file that is no state dict" "data.h5" "not a state dict" -- "$BIN" ckpt import data.h5 "${MODEL[@]}" --out o9.h5
left=$(ls o[0-9].h5 o[0-9].h5.* wrong_c.h5 2>/dev/null | wc -l)
[ "$left" -eq 0 ] && ok "no output file left by any refused import" || { bad "$left output files left"; ls o*.h5* wrong_c.h5* 2>/dev/null; }
finish
