#!/usr/bin/env python3
"""ckpt_stall.py — what a checkpoint costs training, synchronous vs asynchronous (--ckpt-async).

For each case (model, ranks) two runs of the same training on a small synthetic dataset, one with
--ckpt-async off and one with --ckpt-async on, a checkpoint every --every steps; from each run's
log.txt the stall of every checkpoint but the last ("training stalled X s": the time the ranks do
not train for it) and from metrics.h5 the step times: of the asynchronous run with a write in flight
(ckpt_writing = 1) and without. Prints one markdown table: medians, the asynchronous stall as a
fraction of the synchronous one, the step slowdown while a write is in flight, and what an
asynchronous checkpoint costs training in all (its stall plus the extra time of the steps that
overlapped its write, per checkpoint) next to the synchronous stall.

Usage: /usr/bin/python3 bench/ckpt_stall.py [--bin build/bin/spikemesh] [--cases spikformer_s:1,spikformer_s:2,cifar10dvs_vgg:4]
       [--steps 16] [--every 4] [--threads 1] [--out DIR]
Needs h5py and mpirun; ranks beyond the cores are oversubscribed (then every thread competes).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import h5py
import numpy as np

# model -> (dataset kind, train args beyond the common ones)
CASES = {
    "spikformer_s": ("image224", ["--T", "1", "--batch-size", "1"]),
    "spikformer_ti": ("image224", ["--T", "1", "--batch-size", "1"]),
    "cifar10dvs_vgg": ("dvs48", ["--T", "4", "--batch-size", "2"]),
    "fmnist_csnn": ("image28", ["--T", "2", "--batch-size", "4"]),
}


def make_data(kind, path, binary):
    if kind == "dvs48":
        subprocess.run([binary, "data", "synth-dvs", "--out", path, "--T", "4", "--size", "48", "--train", "64",
                        "--test", "8"], check=True, stdout=subprocess.DEVNULL)
        return
    size, ch, classes = {"image224": (224, 3, 1000), "image28": (28, 1, 10)}[kind]
    rng = np.random.default_rng(1)
    with h5py.File(path, "w") as f:
        f.attrs["num_classes"] = classes
        f.attrs["layout"] = "NCHW"
        f.attrs["T"] = 0
        f.attrs["x_scale"] = 1 / 255.0
        for split, n in (("train", 64), ("test", 4)):
            f[split + "/x"] = (rng.random((n, ch, size, size)) * 255).astype(np.uint8)
            f[split + "/y"] = rng.integers(0, classes, n).astype(np.int64)


def run(args, model, ranks, mode, data, out):
    kind, extra = CASES[model]
    name = f"{model}-{ranks}-{mode}"
    cmd = [args.bin, "train", "--model", model, "--data", data, "--output", out, "--run-name", name, "--device", "cpu",
           "--max-steps", str(args.steps), "--epochs", "1000", "--ckpt-every", str(args.every), "--keep", "2",
           "--log-every", "1", "--eval-batch-size", "4", "--threads", str(args.threads), "--ckpt-async", mode] + extra
    if ranks > 1:
        cmd = ["mpirun", "--bind-to", "none", "--oversubscribe", "-np", str(ranks)] + cmd + ["--distributed-mode", "dp"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS=str(args.threads))
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"{name}: exit {r.returncode}\n{r.stdout[-2000:]}")
    log = open(os.path.join(out, name, "log.txt")).read()
    stalls = [float(s) for s in re.findall(r"training stalled ([0-9.]+) s", log)][:-1]  # the last: the run's end
    writes = [float(s) for s in re.findall(r"written in the background in ([0-9.]+) s", log)][:-1]
    mb = float(re.findall(r"\(([0-9.]+) MB;", log)[0])
    with h5py.File(os.path.join(out, name, "metrics.h5")) as f:
        t = f["step/time_ms"][()][1:]  # the first step includes one-time set-up
        w = f["step/ckpt_writing"][()][1:]
    return {"stalls": stalls, "writes": writes, "mb": mb, "during": t[w > 0].tolist(), "idle": t[w == 0].tolist()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin/spikemesh")
    ap.add_argument("--cases", default="spikformer_s:1,spikformer_s:2,cifar10dvs_vgg:4")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--every", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="ckpt_stall.")
    print(f"| model | ranks | checkpoint MB | sync stall s | async stall s | async/sync | background write s | step ms, no write | step ms, write in flight | slowdown | async cost per checkpoint s (of sync) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        model, ranks = case.split(":")
        ranks = int(ranks)
        data = os.path.join(out, f"{CASES[model][0]}.h5")
        if not os.path.exists(data):
            make_data(CASES[model][0], data, args.bin)
        s = run(args, model, ranks, "off", data, out)
        a = run(args, model, ranks, "on", data, out)
        ss, sa = statistics.median(s["stalls"]), statistics.median(a["stalls"])
        idle = statistics.median(a["idle"]) if a["idle"] else float("nan")
        during = statistics.median(a["during"]) if a["during"] else float("nan")
        # the training time a checkpoint costs in all: its stall, plus what the steps overlapping
        # its write took beyond a step without one
        lost = sa + (sum(a["during"]) - len(a["during"]) * idle) / 1000.0 / max(1, len(a["stalls"]) + 1)
        print(f"| {model} | {ranks} | {s['mb']:.0f} | {ss:.3f} | {sa:.3f} | {sa / ss:.1%} | {statistics.median(a['writes']):.2f} | {idle:.0f} | {during:.0f} "
              f"({len(a['during'])} steps) | {during / idle - 1:+.1%} | {lost:.3f} ({lost / ss:.0%}) |", flush=True)


if __name__ == "__main__":
    main()
