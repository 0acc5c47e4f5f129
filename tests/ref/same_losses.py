"""same_losses.py A B [--exact] [--differ] [--subset] — compare the per-step training losses of
two runs' metrics.h5 files (tests/e2e/lib/common.sh same_losses): both recorded the same steps
(with --subset B's steps are among A's), every loss is finite, and B's losses equal A's
(relative 1e-9; bitwise with --exact). With --differ the last requirement is reversed: at least
one loss differs by more than 1e-9 (a change of trajectory, not rounding). Exit status 0 when
the requirements hold."""
import argparse
import math
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
    ap.add_argument("--subset", action="store_true", help="B may have recorded fewer steps (a run resumed from A's)")
    o = ap.parse_args()
    a, b = losses(o.a), losses(o.b)
    if not b or any(s not in a for s in b) or (not o.subset and set(a) != set(b)):
        print(f"the runs recorded different steps: {sorted(a)[:8]} / {sorted(b)[:8]}")
        return 1
    tol = 0.0 if o.exact else 1e-9
    bad = [s for s, v in b.items() if not (math.isfinite(a[s]) and math.isfinite(v))]
    if bad:
        print(f"a loss is not finite at steps {bad[:5]}")
        return 1
    far = [s for s, v in b.items() if not abs(a[s] - v) <= tol * max(abs(a[s]), abs(v))]
    if o.differ:
        return 0 if far else 1
    if far:
        print(f"losses differ at steps {far[:5]}: {[(a[s], b[s]) for s in far[:3]]}")
    return 1 if far else 0


if __name__ == "__main__":
    sys.exit(main())
