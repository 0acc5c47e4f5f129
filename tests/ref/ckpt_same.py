"""ckpt_same.py A B [--group G] [--min N]: every dataset of two HDF5 files (under G) bitwise
equal, the same names in both, at least N of them; exit status 1 otherwise
(tests/e2e/lib/common.sh ckpt_same)."""
import argparse

import h5py


def datasets(f, group):
    root = f[group] if group else f
    out = {}
    root.visititems(lambda n, o: out.__setitem__(n, o[()].tobytes()) if isinstance(o, h5py.Dataset) else None)
    return out


def ckpt_same(a, b, group, least):
    with h5py.File(a) as fa, h5py.File(b) as fb:
        ta, tb = datasets(fa, group), datasets(fb, group)
    assert sorted(ta) == sorted(tb) and len(ta) >= least, (len(ta), len(tb))
    for k in ta:
        assert ta[k] == tb[k], k


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--group", default="")
    ap.add_argument("--min", type=int, default=1)
    o = ap.parse_args()
    ckpt_same(o.a, o.b, o.group, o.min)
