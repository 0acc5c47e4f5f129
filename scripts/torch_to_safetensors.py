#!/usr/bin/python3
"""torch_to_safetensors.py — a PyTorch / SpikingJelly checkpoint (.pt, torch.save) as safetensors.

    /usr/bin/python3 scripts/torch_to_safetensors.py model.pt model.safetensors
    spikemesh ckpt import model.safetensors --model cifar10dvs_vgg --out init.h5

The .pt may hold a state dict ({name: tensor}) or a training checkpoint wrapping one under
"state_dict", "model", "model_state_dict", "net" or "module" (--key names another); non-tensor
entries of a state dict (e.g. SpikingJelly's neuron settings) are left out and listed; a
checkpoint that pickles other objects (an argparse Namespace) needs --trust. Tensors are
written as stored (float64/32/16, bfloat16, int64/32, uint8), contiguous, names unchanged — the
import drops a "module." or "_orig_mod." prefix that every name carries. Needs only torch
(Debian's python3-torch); the safetensors format is written directly (8-byte header length, JSON
header padded to 8 bytes, little-endian data). Loads with weights_only where torch offers it.
Exit status 0 on success; 1 with one "torch_to_safetensors: error: ..." line otherwise.
"""
import argparse
import json
import os
import struct
import sys

DTYPES = {}  # torch dtype -> safetensors code, filled once torch is imported
WRAPPERS = ("state_dict", "model", "model_state_dict", "net", "module")


def fail(msg):
    print(f"torch_to_safetensors: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load(path, trust):
    import torch
    try:
        if trust:
            return torch.load(path, map_location="cpu", weights_only=False)
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # torch < 1.13 has no weights_only
            return torch.load(path, map_location="cpu")
    except Exception as e:  # a damaged or foreign file: one message
        hint = "" if trust else ("; if it pickles other objects (e.g. an argparse Namespace of the training "
                                 "script) and you trust the file, add --trust")
        fail(f"{path}: cannot be read by torch.load ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}){hint}")


def state_dict_of(obj, key, path):
    import torch
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            fail(f"{path}: has no entry '{key}' (--key)")
        obj = obj[key]
    elif isinstance(obj, dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
        for k in WRAPPERS:
            if isinstance(obj.get(k), dict):
                obj = obj[k]
                break
    if hasattr(obj, "state_dict") and callable(obj.state_dict):  # a whole nn.Module was saved
        obj = obj.state_dict()
    if not isinstance(obj, dict):
        fail(f"{path}: holds a {type(obj).__name__}, not a state dict")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    skipped = sorted(k for k in obj if k not in tensors)
    if not tensors:
        fail(f"{path}: no tensor found (keys: {', '.join(map(str, list(obj)[:8]))}; name the state dict with --key)")
    return tensors, skipped


def write(out, tensors, metadata):
    import torch
    header, blobs, at = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype not in DTYPES:
            fail(f"tensor {name}: dtype {t.dtype} has no safetensors code here")
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, out)
    return at


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:4]))
    ap.add_argument("pt", help="the .pt file (torch.save of a state dict or a checkpoint holding one)")
    ap.add_argument("out", help="the .safetensors file to write")
    ap.add_argument("--key", help="the entry of the .pt that holds the state dict")
    ap.add_argument("--trust", action="store_true",
                    help="load with weights_only=False: unpickles arbitrary objects, only for files you trust")
    args = ap.parse_args()
    if os.path.abspath(args.pt) == os.path.abspath(args.out):
        fail(f"{args.out} is the input file itself; name another file")
    try:
        import torch
    except ImportError as e:
        fail(f"{e} (install python3-torch)")
    DTYPES.update({torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                   torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"})
    tensors, skipped = state_dict_of(load(args.pt, args.trust), args.key, args.pt)
    nbytes = write(args.out, tensors, {"format": "pt", "source": os.path.basename(args.pt)})
    if skipped:
        print(f"left out {len(skipped)} non-tensor entries: {', '.join(map(str, skipped[:8]))}")
    print(f"wrote {args.out}: {len(tensors)} tensors ({nbytes} bytes)")


if __name__ == "__main__":
    main()
