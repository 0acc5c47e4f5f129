#!/usr/bin/python3
"""ckpt_to_torch.py — a `spikemesh ckpt export` file (flat state-dict HDF5) as a PyTorch .pt.

    spikemesh ckpt export output/run/ckpt_000000100.h5 --out run.h5
    /usr/bin/python3 scripts/ckpt_to_torch.py run.h5 run.pt
    # in PyTorch / SpikingJelly:  model.load_state_dict(torch.load("run.pt"))

The .pt holds an OrderedDict {state-dict name: tensor} (sorted by name), each tensor in the stored dtype (integer buffers such as BatchNorm's
num_batches_tracked as int64, as torch keeps them), and nothing else, so
`load_state_dict(strict=True)` takes it. The export's attributes (model, T, step, ...) are
printed, not stored. Needs h5py, numpy and torch (Debian's python3-h5py / python3-torch).
Exit status 0 on success; 1 with one "ckpt_to_torch: error: ..." line otherwise.
"""
import argparse
import collections
import sys


def fail(msg):
    print(f"ckpt_to_torch: error: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:5]))
    ap.add_argument("export", help="the HDF5 file `spikemesh ckpt export --out` wrote")
    ap.add_argument("out", help="the .pt file to write (torch.save of the state dict)")
    args = ap.parse_args()
    try:
        import h5py
        import numpy as np
        import torch
    except ImportError as e:
        fail(f"{e} (install python3-h5py, python3-numpy and python3-torch)")
    try:
        f = h5py.File(args.export, "r")
    except OSError as e:
        fail(f"{args.export}: cannot open as HDF5 ({e})")
    with f:
        if f.attrs.get("format") not in ("spikemesh-flat-state-dict", b"spikemesh-flat-state-dict"):
            fail(f"{args.export}: not a `spikemesh ckpt export` file (no format attribute "
                 "'spikemesh-flat-state-dict'; a checkpoint itself is exported with `spikemesh ckpt export`)")
        sd = collections.OrderedDict()
        order = []
        f.visititems(lambda name, obj: order.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in order:
            a = np.array(f[name][()])
            t = torch.from_numpy(np.ascontiguousarray(a))
            if not t.is_floating_point():
                t = t.to(torch.int64)
            sd[name] = t
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    torch.save(sd, args.out)
    n = sum(int(t.numel()) for t in sd.values())
    print(f"wrote {args.out}: {len(sd)} tensors ({n} elements) of model {attrs.get('model')}, "
          f"T {attrs.get('T')}, step {attrs.get('step')}")


if __name__ == "__main__":
    main()
