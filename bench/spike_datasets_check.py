#!/usr/bin/env python3
"""spike_datasets_check.py — `spikemesh data shd|ssc` against SpikingJelly 2.0's own binning.

Generates small SHD- and SSC-shaped split files (tests/ref/spike_trains_ref.py: the published
layout, float16, float32 and float64 times, recordings with no spike, one spike, spikes at one instant and
many ties), imports them with `spikemesh data shd|ssc` under several settings, and compares every
recording's [T, 700] counts with
  1. spikingjelly.datasets.shd's own integrators, called on the file's recording exactly as its
     frame builders call them (_integrate_events_by_fixed_frames_number for --split-by,
     _integrate_events_by_fixed_duration for --dt-ms: its frames, the first T kept, zero-padded);
     where SpikingJelly raises (a time window without a spike, a recording without spikes, all
     spikes at one instant) the recording is only counted (the reference below pins what
     spikemesh does there);
  2. tests/ref/spike_trains_ref.py (which validates the reference used by `make test`);
  3. Tonic 1.6's ToFrame (to_frame_numpy on the events its HSD dataset makes: times × 1e6 as
     integer microseconds) on the float32 and float64 files (Tonic's `× 1e6` overflows float16 times): with
     n_event_bins = T, bins 0..T-2 must equal spikemesh's and its last bin must be spikemesh's
     without the N mod T spikes SpikingJelly adds there; n_time_bins and time_window slice integer
     microseconds and drop the tail, so there only the recordings that agree are counted.
One line per check, then a summary; exit status 1 on any mismatch.

  .venv-bench/bin/python bench/spike_datasets_check.py [--bin build/bin/spikemesh] [--keep DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
import spike_trains_ref as R  # noqa: E402

SETTINGS = [["--T", "10"], ["--T", "25", "--split-by", "time"], ["--T", "3", "--split-by", "time"],
            ["--T", "50", "--dt-ms", "20"], ["--T", "8", "--dt-ms", "3"]]


def sj_frames(sj, t, x, T, split_by, dt_ms):
    """SpikingJelly's frames of one recording, [T, 700]; None where it raises."""
    try:
        if dt_ms > 0:
            f = sj._integrate_events_by_fixed_duration({"t": t, "x": x}, int(dt_ms), 700)
        else:
            f = sj._integrate_events_by_fixed_frames_number({"t": t, "x": x}, split_by, T, 700)
    except IndexError:  # an empty window, no spikes, one instant (frames_num 0)
        return None
    out = np.zeros((T, 700))
    out[:min(T, f.shape[0])] = f[:T]
    return out


def tonic_frames(t, x, T, split_by, dt_ms):
    """Tonic's frames of one recording ([T, 700], zero-padded), or None when it has no spike."""
    from tonic.functional import to_frame_numpy
    if t.size == 0:
        return None
    ev = np.zeros(t.size, dtype=np.dtype([("t", int), ("x", int), ("p", int)]))
    ev["t"], ev["x"], ev["p"] = t * 1e6, x, 0
    if dt_ms > 0:
        f = to_frame_numpy(ev, (700, 1, 1), time_window=dt_ms * 1000)
    elif split_by == "number":
        f = to_frame_numpy(ev, (700, 1, 1), n_event_bins=T)
    else:
        f = to_frame_numpy(ev, (700, 1, 1), n_time_bins=T)
    out = np.zeros((T, 700))
    f = f[:, 0, :]
    out[:min(T, f.shape[0])] = f[:T]
    return out


def tonic_number_ok(got, tonic, x, T):
    """n_event_bins: Tonic's bins 0..T-2 equal; its last lacks SpikingJelly's remainder."""
    n = x.size
    rest = np.bincount(x[T * (n // T):].astype(np.int64), minlength=700)[:700] if n % T else np.zeros(700)
    return np.array_equal(got[:T - 1], tonic[:T - 1]) and np.array_equal(got[T - 1], tonic[T - 1] + rest)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "spikemesh"))
    ap.add_argument("--keep", default="")
    args = ap.parse_args()
    from spikingjelly.datasets import shd as sj
    work = args.keep or tempfile.mkdtemp(prefix="spike_check.")
    os.makedirs(work, exist_ok=True)
    fails, checks, raised_total = [], 0, 0
    rng = np.random.default_rng(2026)
    for name, classes, splits in (("shd", 20, ("train", "test")), ("ssc", 35, ("train", "valid", "test"))):
        for dtype in (np.float16, np.float32, np.float64):
            src = os.path.join(work, f"{name}_{np.dtype(dtype).name}")
            os.makedirs(src, exist_ok=True)
            for s in splits:
                R.make_split(os.path.join(src, f"{name}_{s}.h5"), 45, classes, dtype, rng)
            for setting in SETTINGS:
                out = os.path.join(work, "out.h5")
                cmd = [args.bin, "data", name, "--from", src, "--out", out, "--overwrite"] + setting
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                what = f"{name} {np.dtype(dtype).name} {' '.join(setting)}"
                checks += 1
                if r.returncode != 0:
                    fails.append(what)
                    print(f"FAIL {what}: exit {r.returncode}: {r.stdout.strip()[-300:]}")
                    continue
                T = int(setting[1])
                split_by = setting[setting.index("--split-by") + 1] if "--split-by" in setting else "number"
                dt_ms = float(setting[setting.index("--dt-ms") + 1]) if "--dt-ms" in setting else 0
                bad_sj = bad_ref = raised = n = tonic_same = tonic_n = tonic_bad = 0
                use_tonic = dtype != np.float16
                with h5py.File(out) as f:
                    for s in splits:
                        with h5py.File(os.path.join(src, f"{name}_{s}.h5")) as g:
                            X, Y = f[s + "/x"][()], f[s + "/y"][()]
                            for i in range(X.shape[0]):
                                t, x = g["spikes/times"][i], g["spikes/units"][i]
                                got = X[i].reshape(T, 700).astype(np.float64)
                                want = sj_frames(sj, t, x, T, split_by, dt_ms)
                                ref = R.frames(t, x, T, split_by, dt_ms)
                                n += 1
                                if want is None:
                                    raised += 1
                                elif not np.array_equal(got, want):
                                    bad_sj += 1
                                bad_ref += not np.array_equal(got, ref) or Y[i] != g["labels"][i]
                                tf = tonic_frames(t, x, T, split_by, dt_ms) if use_tonic else None
                                if tf is not None:
                                    tonic_n += 1
                                    tonic_same += np.array_equal(got, tf)
                                    if split_by == "number" and dt_ms == 0:
                                        tonic_bad += not tonic_number_ok(got, tf, x, T)
                raised_total += raised
                ok = bad_sj == 0 and bad_ref == 0 and tonic_bad == 0
                if not ok:
                    fails.append(what)
                tonic = ""
                if use_tonic:
                    tonic = f"; Tonic: {tonic_same} of {tonic_n} equal"
                    if split_by == "number" and dt_ms == 0:
                        tonic += f", {tonic_n - tonic_bad} of {tonic_n} as documented (last bin without the remainder)"
                print(f"{'ok  ' if ok else 'FAIL'} {what}: {n} recordings, {n - raised - bad_sj} equal SpikingJelly's, "
                      f"{bad_sj} differ, {raised} where SpikingJelly raises; {bad_ref} differ from the reference{tonic}",
                      flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"spike datasets: {checks - len(fails)} of {checks} checks passed; SpikingJelly raised on {raised_total} recordings "
          "(a window without spikes, or no spikes): spikemesh leaves those bins empty")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
