"""fmnist_like.py FILE [--seed S] [--train N] [--test N] — a Fashion-MNIST-shaped dataset file
(u8 NCHW 1x28x28, x_scale 1/255, 10 classes, seeded random contents) for runs that need the
real format, not real data (tests/e2e/lib/common.sh fmnist_h5, tests/cluster/lib.sh fmnist_data)."""
import argparse

import h5py
import numpy as np


def fmnist_like(path, seed, train, test):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs["num_classes"] = 10
        f.attrs["layout"] = "NCHW"
        f.attrs["T"] = 0
        f.attrs["x_scale"] = 1 / 255.0
        for s, n in (("train", train), ("test", test)):
            f[s + "/x"] = (rng.random((n, 1, 28, 28)) * 255).astype(np.uint8)
            f[s + "/y"] = rng.integers(0, 10, n).astype(np.int64)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train", type=int, default=32)
    ap.add_argument("--test", type=int, default=16)
    o = ap.parse_args()
    fmnist_like(o.path, o.seed, o.train, o.test)
