#!/usr/bin/env python3
"""datasets_check.py — spikemesh's event-dataset importers against SpikingJelly 2.0's own code.

For CIFAR10-DVS, DVS128 Gesture, N-MNIST and N-Caltech101 it generates a small dataset with the generators of
tests/ref/events_ref.py. It then lets SpikingJelly 2.0.0 (the .venv-bench install) process the dataset
exactly as a user's run would. Its classes (CIFAR10DVS, DVS128Gesture, NMNIST with data_type='frame')
run on a root whose extract/ holds the generated files (NCaltech101: extract/Caltech101/). The class's own create_raw_from_extracted
writes events_np/ (the CIFAR10-DVS aedat loader, load_aedat_v3 and the Gesture csv cutting, load_ATIS_bin),
which is the step prepare_raw_dataset runs after its download/md5 stage, here skipped. Its builders integrate
(integrate_events_by_fixed_frames_number / _by_fixed_duration). Its DatasetFolder gives the order and
labels, and split_to_train_test_set(0.9) gives the CIFAR10-DVS and N-Caltech101 splits. SpikingJelly's
NCaltech101 lists every folder, BACKGROUND_Google included (a class, label 0): spikemesh runs with
--include-background for that comparison, and its default (the background left out) is compared with
SpikingJelly's samples of the other classes, labels shifted down by one. --size runs torchvision's
transforms.Resize((S, S)) on the float32 frame tensor, as SpikingJelly's CIFAR10-DVS 48x48 recipe does.
Against those frames it compares
  1. events_ref.reference(...), the numpy reference, which validates the reference itself;
  2. `spikemesh data <dataset> --from DIR --out X.h5` (/train/x, /train/y, /test/x, /test/y, and
     /<split>/n_frames for --duration-us; exact, f32 within 1e-5 relative after a resize).
One line per check, then a summary. Exit status 1 on any mismatch or error.

  .venv-bench/bin/python bench/datasets_check.py [--bin build/bin/spikemesh] [--T 10] [--keep DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

os.environ.setdefault("TQDM_DISABLE", "1")  # split_to_train_test_set's progress bar
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))

# per dataset: the frame duration (us) of the fixed-duration check (several frames, some samples > T)
DURATION = {"cifar10-dvs": 20_000, "dvs128-gesture": 12_000, "n-mnist": 30_000, "n-caltech101": 40_000}
DATASETS = ("cifar10-dvs", "dvs128-gesture", "n-mnist", "n-caltech101")
PER_CLASS_SPLIT = ("cifar10-dvs", "n-caltech101")  # no official split: split_to_train_test_set


class Result:
    def __init__(self):
        self.fails, self.n, self.skipped = [], 0, 0

    def line(self, ok, what, detail=""):
        self.n += 1
        self.skipped += ok is None
        tag = {True: "ok  ", False: "FAIL", None: "skip"}[ok]
        print(f"{tag} {what}{': ' + detail if detail else ''}", flush=True)
        if ok is False:
            self.fails.append(what)


# ------------------------------------------------------------------------------ SpikingJelly
def sj_prepare(dataset, root, args):
    """Generates the dataset into <root>/extract (the published layout) and runs the class's own
    create_raw_from_extracted into <root>/events_np. Returns (--from dir for spikemesh, class)."""
    import events_ref
    from spikingjelly.datasets import CIFAR10DVS, DVS128Gesture, NMNIST, NCaltech101
    from pathlib import Path
    extract = os.path.join(root, "extract")
    if dataset == "cifar10-dvs":
        events_ref.gen_cifar10dvs(extract, args.per_class, args.seed, "aedat")
        cls, src = CIFAR10DVS, extract
    elif dataset == "dvs128-gesture":
        src = os.path.join(extract, "DvsGesture")
        events_ref.gen_gesture(src, seed=args.seed)
        cls = DVS128Gesture
    elif dataset == "n-caltech101":
        events_ref.gen_ncaltech101(extract, args.per_class, args.seed)
        cls, src = NCaltech101, extract
    else:
        events_ref.gen_nmnist(extract, max(1, args.per_class // 4), args.seed)
        cls, src = NMNIST, extract
    raw = Path(root) / "events_np"
    raw.mkdir()  # what prepare_raw_dataset does once download/ and extract/ are in place
    cls.create_raw_from_extracted(Path(extract), raw)
    return src, cls


def sj_frames(dataset, cls, root, T, split_by, duration, size):
    """SpikingJelly's (x [N, T, 2, S, S] float32, y, sample files, n_frames or None) per split.
    Duration mode: the first T frames, zero-padded, and each sample's frame count."""
    import torch
    from torchvision import transforms
    from spikingjelly.datasets import split_to_train_test_set
    transform = None
    if size:  # SpikingJelly's CIFAR10-DVS 48x48 recipe (memopt data_module, test transform)
        transform = transforms.Compose([transforms.Lambda(lambda x: torch.tensor(x, dtype=torch.float32)),
                                        transforms.Resize(size=(size, size))])
    kw = dict(data_type="frame", transform=transform)
    kw.update(duration=duration) if duration else kw.update(frames_number=T, split_by=split_by)
    if dataset in PER_CLASS_SPLIT:
        full = cls(root, **kw)
        train, test = split_to_train_test_set(0.9, full, len(full.classes))
        splits = {"train": (full, train.indices), "test": (full, test.indices)}
    else:
        splits = {s: (lambda d: (d, range(len(d))))(cls(root, train=(s == "train"), **kw)) for s in ("train", "test")}
    out = {}
    for split, (ds, idx) in splits.items():
        xs, ys, names, nf = [], [], [], []
        for i in idx:
            x, y = ds[i]
            x = np.asarray(x, dtype=np.float32)
            nf.append(x.shape[0])
            if duration:
                x = np.concatenate([x[:T], np.zeros((max(0, T - len(x)),) + x.shape[1:], np.float32)])
            xs.append(x)
            ys.append(int(y))
            names.append(os.path.relpath(ds.samples[i][0], ds.root))
        out[split] = (np.stack(xs), np.array(ys, np.int64), names, np.array(nf, np.int32) if duration else None)
    return out


# ------------------------------------------------------------------------------ comparisons
def compare_x(got, want, resized):
    """('', None) when equal (resized: |d| <= 1e-5 (1 + |want|)), else (the first difference, its sample)."""
    if got is None or got.shape != want.shape:
        return f"shape {None if got is None else got.shape}, want {want.shape}", None
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = d > 1e-5 * (1 + np.abs(want)) if resized else d != 0
    if not bad.any():
        return "", None
    n, t, c, h, w = np.argwhere(bad)[0]
    return (f"{int(bad.sum())} elements differ in {int(bad.reshape(len(bad), -1).any(1).sum())} samples; first "
            f"sample {n} frame {t} channel {c} pixel (y={h}, x={w}): here {got[n, t, c, h, w]}, SpikingJelly "
            f"{want[n, t, c, h, w]} (sample sums {got[n].sum():g} vs {want[n].sum():g})"), n


def compare_split(res, what, split, got, sj, names_got=None, resized=False):
    """got = (x, y, n_frames) against SpikingJelly's (x, y, names, n_frames)."""
    x, y, names, nf = sj
    gx, gy, gnf = got
    ydiff = np.flatnonzero(gy != y) if gy is not None and gy.shape == y.shape else None
    if ydiff is None:
        res.line(False, f"{what} {split}/y", f"shape {None if gy is None else gy.shape}, want {y.shape}")
    else:
        k = ydiff[0] if len(ydiff) else 0
        res.line(not len(ydiff), f"{what} {split}/y", f"{len(y)} labels equal" if not len(ydiff) else
                 f"{len(ydiff)} differ; first at sample {k}: here {gy[k]}"
                 f"{' (' + names_got[k] + ')' if names_got else ''}, SpikingJelly {y[k]} ({names[k]})")
    msg, n = compare_x(gx, x, resized)
    if n is not None:
        msg += f"; SpikingJelly's sample {n} is {names[n]}" + (f", here {names_got[n]}" if names_got else "")
        if not resized:  # the same samples in another order?
            where = {x[j].tobytes(): j for j in range(len(x))}
            perm = [where.get(np.asarray(gx[i], np.float32).tobytes()) for i in range(len(gx))]
            if None not in perm and sorted(perm) == list(range(len(x))):
                moved = [i for i in range(len(perm)) if perm[i] != i]
                msg += (f"; these are SpikingJelly's samples in another order ({len(moved)} of {len(x)} moved; "
                        f"sample {moved[0]} here is SpikingJelly's {perm[moved[0]]}, {names[perm[moved[0]]]})")
    maxd = float(np.abs(gx.astype(np.float64) - x).max(initial=0)) if resized and not msg else 0.0
    res.line(not msg, f"{what} {split}/x", msg or f"{x.shape} " + (f"within 1e-5 (max |diff| {maxd:.3g})"
                                                                    if resized else "exact"))
    if nf is not None:
        ok = gnf is not None and gnf.shape == nf.shape and np.array_equal(gnf, nf)
        bad = np.flatnonzero(gnf != nf) if gnf is not None and gnf.shape == nf.shape else [0]
        res.line(ok, f"{what} {split}/n_frames", f"{len(nf)} counts equal (min {nf.min()}, max {nf.max()})" if ok else
                 f"missing or shape {None if gnf is None else gnf.shape}, want {nf.shape}" if len(bad) == 1 and
                 bad[0] == 0 and (gnf is None or gnf.shape != nf.shape) else f"{len(bad)} differ; first at sample "
                 f"{bad[0]}: here {gnf[bad[0]]}, SpikingJelly {nf[bad[0]]} ({names[bad[0]]})")


def sample_key(name, duration, ref):
    """'<class dir>/<sample stem>' of a reference name or of a SpikingJelly file (relative to its split root)."""
    if ref:
        name = name.split(" -> ")[-1]  # gesture: 'userXX_light.aedat [a,b) -> <label>/<trial>_<k>'
        return "/".join(os.path.splitext(name)[0].split(os.sep)[-2:])
    stem = os.path.splitext(name)[0]
    return stem.rsplit("_", 1)[0] if duration else stem  # duration mode: '<stem>_<n frames>.npz'


def check_reference(res, what, dataset, src, sj, T, split_by, duration, size):
    import events_ref
    try:
        ref = events_ref.reference(dataset, src, T, "duration" if duration else split_by, duration, size, 0.9,
                                   include_background=True)
    except Exception as e:  # noqa: BLE001 — report, continue with the next check
        res.line(False, f"{what} reference", f"{type(e).__name__}: {e}")
        return
    for split in ("train", "test"):
        rnames = list(getattr(ref, split + "_names"))
        order = [sample_key(n, duration, True) for n in rnames]
        want = [sample_key(n, duration, False) for n in sj[split][2]]
        bad = [i for i in range(min(len(order), len(want))) if order[i] != want[i]]
        res.line(not bad and len(order) == len(want), f"{what} SJ vs reference {split} order",
                 f"{len(want)} samples in the same order" if not bad and len(order) == len(want) else
                 f"{len(order)} samples, want {len(want)}" if not bad else f"{len(bad)} of {len(want)} differ; "
                 f"first at {bad[0]}: reference {order[bad[0]]}, SpikingJelly {want[bad[0]]} ({sj[split][2][bad[0]]})")
        got = (getattr(ref, split + "_x"), getattr(ref, split + "_y"), getattr(ref, split + "_n_frames"))
        compare_split(res, f"{what} SJ vs reference", split, got, sj[split], rnames, bool(size))


def spikemesh_status(binary, dataset):
    """'' (usable), 'no-duration' (an importer without --duration-us) or why it cannot run."""
    if not os.path.exists(binary):
        return f"spikemesh binary missing ({binary}; run make)"
    p = subprocess.run([binary, "data", dataset, "--help"], capture_output=True, text=True)
    if p.returncode != 0 or "--from" not in p.stdout:
        return f"spikemesh importer missing (`spikemesh data {dataset} --help` exits {p.returncode})"
    return "" if "--duration-us" in p.stdout else "no-duration"


def without_background(sj):
    """SpikingJelly's N-Caltech101 splits without BACKGROUND_Google (label 0), the labels shifted down by one."""
    out = {}
    for split, (x, y, names, nf) in sj.items():
        keep = y != 0
        out[split] = (x[keep], y[keep] - 1, [n for n, k in zip(names, keep) if k], None if nf is None else nf[keep])
    return out


def check_spikemesh(res, what, dataset, binary, src, work, sj, T, split_by, duration, size, status, extra=()):
    if status and status != "no-duration":
        res.line(None, f"{what} spikemesh", status)
        return
    if duration and status == "no-duration":
        res.line(None, f"{what} spikemesh", "this binary has no --duration-us")
        return
    import h5py
    out = os.path.join(work, f"{dataset}_{what.split()[-1]}.h5")
    cmd = [binary, "data", dataset, "--from", src, "--out", out, "--T", str(T), "--overwrite", *extra]
    cmd += ["--duration-us", str(duration)] if duration else ["--split-by", split_by]
    if size:
        cmd += ["--size", str(size), "--dtype", "f32"]
    elif max(float(sj[s][0].max(initial=0)) for s in sj) > 255:
        cmd += ["--dtype", "u16"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
        res.line(False, f"{what} spikemesh run", f"exit {p.returncode}: {' | '.join(tail)}  [{' '.join(cmd)}]")
        return
    with h5py.File(out, "r") as f:
        for split in ("train", "test"):
            g = lambda k: f[f"{split}/{k}"][...] if f"{split}/{k}" in f else None  # noqa: E731
            compare_split(res, f"{what} SJ vs spikemesh", split, (g("x"), g("y"), g("n_frames")), sj[split],
                          resized=bool(size))
    print(f"     ({' '.join(cmd[1:4])} ... took {time.time() - t0:.1f} s)", flush=True)


# ------------------------------------------------------------------------------ main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "spikemesh"), help="spikemesh binary")
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated: " + ", ".join(DATASETS))
    ap.add_argument("--T", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=12, help="CIFAR10-DVS files per class (N-MNIST: a quarter)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=48, help="CIFAR10-DVS and N-Caltech101 resize check (0: skip)")
    ap.add_argument("--no-duration", action="store_true", help="skip the fixed-duration checks")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (emptied first) and keep it")
    args = ap.parse_args(argv)
    import spikingjelly
    import torchvision
    from importlib.metadata import version
    print(f"spikingjelly {version('spikingjelly')} ({os.path.dirname(spikingjelly.__file__)}), "
          f"torchvision {torchvision.__version__}, numpy {np.__version__}")
    binary = os.path.abspath(args.bin)
    print(f"spikemesh: {binary}")
    if args.keep:
        shutil.rmtree(args.keep, ignore_errors=True)
        os.makedirs(args.keep)
    work = os.path.abspath(args.keep or tempfile.mkdtemp(prefix="datasets_check_"))
    res, t_start = Result(), time.time()
    try:
        for dataset in args.datasets.split(","):
            root = os.path.join(work, dataset)
            os.makedirs(root)
            try:
                src, cls = sj_prepare(dataset, root, args)
            except Exception as e:  # noqa: BLE001
                res.line(False, f"{dataset} SpikingJelly events_np", f"{type(e).__name__}: {e}")
                traceback.print_exc()
                continue
            status = spikemesh_status(binary, dataset)
            configs = [(args.T, "number", 0, 0), (args.T, "time", 0, 0)]
            if not args.no_duration:
                configs.append((args.T, None, DURATION[dataset], 0))
            if dataset in PER_CLASS_SPLIT and args.size:
                configs.append((args.T, "number", 0, args.size))
            for T, split_by, duration, size in configs:
                what = f"{dataset} T={T} " + (f"duration={duration}us" if duration else f"split_by={split_by}") + \
                       (f" size={size}" if size else "")
                try:
                    sj = sj_frames(dataset, cls, root, T, split_by, duration, size)
                except Exception as e:  # noqa: BLE001
                    res.line(False, f"{what} SpikingJelly", f"{type(e).__name__}: {e}")
                    continue
                n = {s: len(sj[s][1]) for s in sj}
                print(f"---- {what}: SpikingJelly gives {n['train']} train + {n['test']} test samples", flush=True)
                check_reference(res, what, dataset, src, sj, T, split_by, duration, size)
                if dataset != "n-caltech101":
                    check_spikemesh(res, what, dataset, binary, src, work, sj, T, split_by, duration, size, status)
                    continue
                check_spikemesh(res, what + " with-background", dataset, binary, src, work, sj, T, split_by, duration,
                                size, status, ("--include-background",))
                check_spikemesh(res, what + " no-background", dataset, binary, src, work, without_background(sj), T,
                                split_by, duration, size, status)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"summary: {res.n} checks, {len(res.fails)} failed, {res.skipped} skipped, in {time.time() - t_start:.1f} s"
          + (" (kept " + work + ")" if args.keep else ""))
    for f in res.fails:
        print("  failed: " + f)
    return 1 if res.fails else 0


if __name__ == "__main__":
    sys.exit(main())
