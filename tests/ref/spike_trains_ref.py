"""spike_trains_ref.py — SHD/SSC-shaped files and a numpy reference of SpikingJelly 2.0's binning.

make_split(path, n, classes, dtype, rng, ...) writes one published-format split file
(/spikes/times vlen float, /spikes/units vlen uint16, /labels uint16) of n recordings: random
spike trains of `spikes` (a range; default a few hundred) spikes on units below `channels` over up to ~1 s, some with repeated times, some with
extreme shapes (one spike, spikes at one instant, no spike when `empty`).

frames(t, x, T, split_by, dt_ms, channels) bins one recording into [T, channels] counts the way
spikingjelly.datasets.shd integrates it (_integrate_events_by_fixed_frames_number /
_integrate_events_by_fixed_duration), written independently here with every operation on times
cast explicitly to the file's dtype (numpy 2's promotion, whatever numpy runs this), the first T
fixed-duration frames kept and zero-padded, and empty bins where SpikingJelly raises (the last
`time` window still taking every spike from its start on). It is written from SpikingJelly's
source, not from spikemesh's; bench/spike_datasets_check.py checks it against SpikingJelly itself.
"""
import math

import h5py
import numpy as np


def make_split(path, n, classes, dtype, rng, empty=True, channels=700, spikes=(20, 400)):
    times, units, labels = [], [], []
    for i in range(n):
        kind = i % 9
        if kind == 0 and empty:
            m = 0
        elif kind == 1:
            m = 1
        else:
            m = int(rng.integers(*spikes))
        span = float(rng.uniform(0.05, 1.2))
        t = np.sort(rng.uniform(0, span, m) + rng.uniform(0, 0.05)).astype(dtype)
        if kind == 2 and m > 1:
            t[:] = t[0]  # every spike at one instant
        if kind == 3 and m > 4:
            t[m // 2:] = t[m // 2]  # many ties
        times.append(t)
        units.append(rng.integers(0, channels, m).astype(np.uint16))
        labels.append(int(rng.integers(0, classes)))
    with h5py.File(path, "w") as f:
        vt = h5py.vlen_dtype(np.dtype(dtype))
        vu = h5py.vlen_dtype(np.dtype(np.uint16))
        dt = f.create_dataset("spikes/times", (n,), dtype=vt)
        du = f.create_dataset("spikes/units", (n,), dtype=vu)
        for i in range(n):
            dt[i] = times[i]
            du[i] = units[i]
        f["labels"] = np.array(labels, dtype=np.uint16)
    return times, units, labels


def _count(x, lo, hi, channels):
    return np.bincount(x[lo:hi].astype(np.int64), minlength=channels)[:channels]


def frames(t, x, T, split_by="number", dt_ms=0, channels=700):
    d = t.dtype.type
    out = np.zeros((T, channels))
    n = t.size
    if dt_ms > 0:
        if n == 0:
            return out
        tt = (t * d(1000)).astype(t.dtype)
        tt = (tt - tt[0]).astype(t.dtype)
        dur = d(dt_ms)
        num = math.ceil(d(tt[-1] / dur))
        if num == 0:
            return out
        idx = np.floor_divide(tt, dur).astype(t.dtype)
        left = 0
        for i in range(min(num, T)):
            right = n if i == num - 1 else int(np.searchsorted(idx, i + 1, side="left"))
            out[i] = _count(x, left, right, channels)
            left = right
        return out
    if split_by == "number":
        di = n // T
        for i in range(T):
            lo = i * di
            hi = n if i == T - 1 else lo + di
            out[i] = _count(x, lo, hi, channels)
        return out
    if n == 0:
        return out
    dt = d(d(t[-1] - t[0]) / d(T))
    for i in range(T):
        tl = d(d(dt * d(i)) + t[0])
        tr = d(tl + dt)
        idx = np.nonzero((t >= tl) & (t < tr))[0]
        if i == T - 1:  # the last window runs to the end (from its start, even when it is empty)
            start = np.nonzero(t >= tl)[0]
            if start.size:
                out[i] = _count(x, start[0], n, channels)
            continue
        if idx.size == 0:  # SpikingJelly raises here
            continue
        out[i] = _count(x, idx[0], idx[-1] + 1, channels)
    return out
