"""same_losses.py A B [--exact] [--differ] — compare the per-step training losses of two runs'
metrics.h5 files (tests/e2e/lib/common.sh same_losses): every step B recorded must be in A with
the same loss (relative 1e-9; bitwise with --exact). With --differ the opposite is required:
both runs recorded the same steps and at least one loss differs by more than 1e-9 (a change of
trajectory, not rounding). Exit status 0 when the requirement holds."""
import argparse
import sys

import h5py


def losses(path):
    with h5py.File(path, "r") as f:
        return dict(zip(f["step/step"][:].tolist(), f["step/loss"][:].tolist()))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--differ", action="store_true")
    o = ap.parse_args()
    a, b = losses(o.a), losses(o.b)
    if not b or any(s not in a for s in b):
        print(f"steps of {o.b} missing from {o.a}: {sorted(set(b) - set(a))[:5]}")
        return 1
    tol = 0.0 if o.exact else 1e-9
    far = [s for s, v in b.items() if abs(a[s] - v) > tol * max(abs(a[s]), abs(v))]
    if o.differ:
        return 0 if far and len(a) == len(b) else 1
    if far:
        print(f"losses differ at steps {far[:5]}: {[(a[s], b[s]) for s in far[:3]]}")
    return 1 if far else 0


if __name__ == "__main__":
    sys.exit(main())
