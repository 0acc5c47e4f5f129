#!/usr/bin/python3
"""events_ref.py — the independent numpy reference for spikemesh's event-dataset importers
(`spikemesh data cifar10-dvs|dvs128-gesture|n-mnist|n-caltech101 --from DIR --out FILE.h5`).

Written from the source-cited notes on SpikingJelly's readers made for the importers
(the project's SpikingJelly semantics notes, sections 0-5 and 6.1), not from SpikingJelly's code. It holds
  1. writers of each published binary layout (write_aedat2, write_aedat31 / aedat31_packet,
     write_nmnist_bin, write_events_npz) and deterministic generators of small synthetic
     datasets in the published folder layouts (gen_cifar10dvs, gen_gesture, gen_nmnist, gen_ncaltech101);
  2. SpikingJelly's decoding (read_aedat2, read_aedat31, read_nmnist_bin, read_npz), frame
     integration (segment_indices, integrate_fixed_frames, integrate_fixed_duration: the 2.0
     grid), the test-time resize (torch bilinear, antialias) and the dataset assembly in
     torchvision DatasetFolder order with the CIFAR10-DVS / N-Caltech101 per-class split (reference;
     N-Caltech101's BACKGROUND_Google folder is a class only with include_background, as spikemesh's
     --include-background; SpikingJelly keeps it);
  3. a checker of a spikemesh HDF5 file against the reference (check).
CLI:  events_ref.py gen DATASET DIR [--per-class N] [--seed S] [--fmt aedat|npz|aedat31|bin]
      events_ref.py check DATASET DIR FILE.h5 [--include-background]   (exit 1 on any mismatch)
      events_ref.py write-ref DATASET DIR FILE.h5 --T N [--split-by ..] [--dtype ..] ...
      events_ref.py selftest
Runs on numpy 1.24 and 2.x; h5py and torch are imported only where needed.
"""
import argparse
import collections
import io
import math
import os
import struct
import sys
import time

import numpy as np

CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
GESTURE_NAMES = ("hand_clapping", "right_hand_wave", "left_hand_wave", "right_arm_clockwise",
                 "right_arm_counter_clockwise", "left_arm_clockwise", "left_arm_counter_clockwise",
                 "arm_roll", "air_drums", "air_guitar", "other_gestures")  # csv classes 1..11
SENSOR = {"cifar10-dvs": (128, 128), "dvs128-gesture": (128, 128), "n-mnist": (34, 34), "n-caltech101": (180, 240)}
# A few of N-Caltech101's folders (upper case sorts first); per-class file counts differ
CALTECH_CLASSES = ("BACKGROUND_Google", "Faces_easy", "Leopards", "accordion", "airplanes", "anchor")
CALTECH_BACKGROUND = "BACKGROUND_Google"
AEDAT2_HEADER = ("#!AER-DAT2.0", "# This is a raw AE data file - do not edit",
                 "# Data format is int32 address, int32 timestamp (8 bytes total), repeated for each event",
                 "# Timestamps tick is 1 us", "# created Thu Nov 26 2026")
AEDAT31_HEADER = ("#!AER-DAT3.1", "#Format: RAW", "#Source 1: DVS128",
                  "#Start-Time: 2026-11-26 12:00:00 (TZ+0000)", "#!END-HEADER")


# ----------------------------------------------------------------------------------- writers
def _header_bytes(lines):
    return b"".join(line.encode() + b"\r\n" for line in lines)


def cifar_address(x, y, p, junk=0):
    """The AEDAT 2.0 address whose SpikingJelly decoding is (x, y, p); `junk` sets ignored bits."""
    x, y, p = (np.asarray(v, dtype=np.uint32) for v in (x, y, p))
    junk = np.asarray(junk, np.uint32) & 0xFFFF8000
    return (((127 - x) << 8) | ((127 - y) << 1) | (1 - p) | junk).astype(np.uint32)


def write_aedat2(path, addr, ts, header=AEDAT2_HEADER):
    """jAER AEDAT 2.0: '#' lines ending in CRLF, then big-endian (u32 address, u32 timestamp)."""
    words = np.empty(2 * len(addr), dtype=">u4")
    words[0::2] = np.asarray(addr, dtype=np.uint32)
    words[1::2] = np.asarray(ts, dtype=np.uint32)
    with open(path, "wb") as f:
        f.write(_header_bytes(header) + words.tobytes())


def aedat31_packet(etype, ts_overflow, words, ts_low, event_size=8, source=1, capacity=None, valid=None):
    """One AEDAT 3.1 packet: 28-byte little-endian header + capacity * event_size bytes."""
    n = len(words)
    capacity = n if capacity is None else capacity
    body = np.zeros((capacity, event_size), dtype=np.uint8)
    pairs = np.empty((n, 2), dtype="<u4")
    pairs[:, 0], pairs[:, 1] = words, ts_low
    body[:n, :8] = pairs.view(np.uint8).reshape(n, 8)
    valid = n if valid is None else valid
    head = struct.pack("<HHIIIIII", etype, source, event_size, 4, ts_overflow, capacity, n, valid)
    return head + body.tobytes()


def write_aedat31(path, t, x, y, p, valid=None, rng=None, n_special=0, header=AEDAT31_HEADER):
    """Polarity events as AEDAT 3.1 packets (one per tsOverflow epoch, or random sizes with `rng`),
    with `n_special` type-0 packets of random payload interleaved (they must be skipped)."""
    t = np.asarray(t, dtype=np.int64)
    valid = np.ones(len(t), dtype=np.uint32) if valid is None else np.asarray(valid, dtype=np.uint32)
    words = ((np.asarray(x, np.uint32) << 17) | (np.asarray(y, np.uint32) << 2)
             | (np.asarray(p, np.uint32) << 1) | valid).astype(np.uint32)
    packets = []
    ovf = t >> 31
    for o in np.unique(ovf):
        idx = np.flatnonzero(ovf == o)
        cuts = [0, len(idx)]
        if rng is not None and len(idx) > 1:
            cuts = sorted(set([0, len(idx)] + list(rng.integers(1, len(idx), size=max(1, len(idx) // 150)))))
        for a, b in zip(cuts[:-1], cuts[1:]):
            sel = idx[a:b]
            packets.append(aedat31_packet(1, int(o), words[sel], (t[sel] & 0x7FFFFFFF).astype(np.uint32),
                                          valid=int(valid[sel].sum())))
    for _ in range(n_special):
        k = int(rng.integers(1, 6))
        special = aedat31_packet(0, 0, rng.integers(0, 2**32, size=k, dtype=np.uint32),
                                 rng.integers(0, 2**31, size=k, dtype=np.uint32))
        packets.insert(int(rng.integers(0, len(packets) + 1)), special)
    with open(path, "wb") as f:
        f.write(_header_bytes(header) + b"".join(packets))


def write_nmnist_bin(path, t, x, y, p):
    """N-MNIST 40-bit events: x, y, p<<7 | t>>16 (7 bits), (t>>8)&255, t&255."""
    t = np.asarray(t, dtype=np.uint32)
    if len(t) and int(t.max()) >= 1 << 23:
        raise ValueError("N-MNIST timestamps have 23 bits")
    raw = np.empty((len(t), 5), dtype=np.uint8)
    raw[:, 0], raw[:, 1] = x, y
    raw[:, 2] = (np.asarray(p, np.uint32) << 7) | (t >> 16)
    raw[:, 3], raw[:, 4] = (t >> 8) & 255, t & 255
    with open(path, "wb") as f:
        f.write(raw.tobytes())


def write_events_npz(path, t, x, y, p):
    """SpikingJelly's events_np layout (arrays saved with their dtypes)."""
    np.savez_compressed(path, t=t, x=x, y=y, p=p)


# -------------------------------------------------------------------------------- generators
def _times(rng, n, start, max_gap):
    gaps = rng.integers(0, max_gap + 1, size=n)
    gaps[rng.random(n) < 0.1] = 0  # some equal timestamps
    gaps[0] = 0
    return start + np.cumsum(gaps)


def gen_cifar10dvs(root, per_class=12, seed=0, fmt="aedat"):
    """root/<class>/cifar10_<class>_<i>.{aedat,npz}; returns {relative path: decoded events}."""
    rng = np.random.default_rng(seed)
    out = {}
    for cls in CIFAR_CLASSES:
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for i in range(per_class):
            n = int(rng.integers(150, 1501))
            t = _times(rng, n, int(rng.integers(0, 2**31)), 400)
            x, y, p = rng.integers(0, 128, n), rng.integers(0, 128, n), rng.integers(0, 2, n)
            stem = os.path.join(cls, f"cifar10_{cls}_{i}")
            if fmt == "aedat31":
                write_aedat31(os.path.join(root, stem + ".aedat"), t, x, y, p,
                              valid=(rng.random(n) > 0.05), rng=rng, n_special=2)
                out[stem + ".aedat"] = {k: np.asarray(v, np.int64) for k, v in zip("txyp", (t, x, y, p))}
                continue
            ev = {"t": t.astype(np.uint32), "x": x.astype(np.uint32), "y": y.astype(np.uint32), "p": p.astype(np.int64)}
            if fmt == "npz":
                write_events_npz(os.path.join(root, stem + ".npz"), **ev)
                out[stem + ".npz"] = ev
            elif fmt == "aedat":
                junk = np.where(rng.random(n) < 0.2, rng.integers(0, 2**32, n, dtype=np.uint32), 0).astype(np.uint32)
                junk[0] = 0  # the first data byte must not look like a '#' header line
                write_aedat2(os.path.join(root, stem + ".aedat"), cifar_address(x, y, p, junk), t)
                out[stem + ".aedat"] = ev
            else:
                raise ValueError(f"unknown fmt {fmt!r} (aedat, npz, aedat31)")
    return out


def gen_gesture(root, users=(1, 2, 3), lights=("fluorescent", "led"), seed=0):
    """The DvsGesture folder: userXX_<light>.aedat (AEDAT 3.1), *_labels.csv, trials_to_*.txt.
    Returns {file name: decoded events}; the second trial crosses 2^31 us (tsOverflow=1)."""
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    out, train, test = {}, [], []
    for ti, (u, light) in enumerate((u, light) for u in users for light in lights):
        stem = f"user{u:02d}_{light}"
        classes = list(rng.permutation(11) + 1) + [int(rng.integers(1, 12))]  # one class twice
        lens = rng.integers(50_000, 200_000, size=len(classes))
        gaps = rng.integers(5_000, 30_000, size=len(classes))
        base = 2**31 - int(lens.sum() + gaps.sum()) // 2 if ti == 1 else int(rng.integers(0, 10**7))
        ov = int(rng.integers(1, len(classes)))  # interval ov starts inside interval ov-1
        rows, ts, t0 = [], [], base
        for k, c in enumerate(classes):
            start = t0 + int(gaps[k]) - (int(lens[k - 1]) // 3 + int(gaps[k]) if k == ov else 0)
            end = start + int(lens[k])
            n = int(rng.integers(100, 601))  # stratified times: no empty 'time' bin
            ts.append(start + ((np.arange(n) + rng.random(n)) * (end - start) / n).astype(np.int64))
            ts.append(rng.integers(t0, start, size=3) if start > t0 else np.zeros(0, np.int64))  # outside
            rows.append((int(c), start, end))
            t0 = max(t0, end)
        ts.append(rng.integers(t0, t0 + 10_000, size=5))
        t = np.sort(np.concatenate(ts)).astype(np.int64)
        n = len(t)
        x, y, p = rng.integers(0, 128, n), rng.integers(0, 128, n), rng.integers(0, 2, n)
        write_aedat31(os.path.join(root, stem + ".aedat"), t, x, y, p, valid=(rng.random(n) > 0.05),
                      rng=rng, n_special=3)
        with open(os.path.join(root, stem + "_labels.csv"), "w") as f:
            f.write("class,startTime_usec,endTime_usec\n" + "".join(f"{c},{a},{b}\n" for c, a, b in rows))
        out[stem + ".aedat"] = {k: np.asarray(v, np.int64) for k, v in zip("txyp", (t, x, y, p))}
        (test if u == users[-1] else train).append(stem + ".aedat")
    for name, lst in (("trials_to_train.txt", train), ("trials_to_test.txt", test)):
        with open(os.path.join(root, name), "w") as f:
            f.write("\n".join(lst[:1] + [""] + lst[1:]) + "\n")  # a blank line to skip
    return out


def gen_nmnist(root, per_class=3, seed=0, fmt="bin"):
    """root/{Train,Test}/<digit>/<5-digit id>.bin (or .npz); returns {relative path: events}."""
    rng = np.random.default_rng(seed)
    out = {}
    for split in ("Train", "Test"):
        for d in range(10):
            os.makedirs(os.path.join(root, split, str(d)), exist_ok=True)
            for i in rng.choice(99999, size=per_class, replace=False) + 1:
                n = int(rng.integers(100, 601))
                ev = {"t": _times(rng, n, int(rng.integers(0, 1000)), 1000).astype(np.uint32),
                      "x": rng.integers(0, 34, n).astype(np.uint32), "y": rng.integers(0, 34, n).astype(np.uint32),
                      "p": rng.integers(0, 2, n).astype(np.uint32)}
                rel = os.path.join(split, str(d), f"{i:05d}.{fmt}")
                (write_nmnist_bin if fmt == "bin" else write_events_npz)(os.path.join(root, rel), **ev)
                out[rel] = ev
    return out


def gen_ncaltech101(root, per_class=10, seed=0, fmt="bin"):
    """root/Caltech101/<class>/image_<4-digit i>.bin (or .npz), per_class + 0..3 files a class, events
    over the whole 240 x 180 sensor (x and y touch 239 and 179); returns {path relative to root: events}."""
    rng = np.random.default_rng(seed)
    out = {}
    for cls in CALTECH_CLASSES:
        os.makedirs(os.path.join(root, "Caltech101", cls), exist_ok=True)
        for i in range(1, per_class + int(rng.integers(0, 4)) + 1):
            n = int(rng.integers(200, 1201))
            ev = {"t": _times(rng, n, int(rng.integers(0, 5000)), 600).astype(np.uint32),
                  "x": rng.integers(0, 240, n).astype(np.uint32), "y": rng.integers(0, 180, n).astype(np.uint32),
                  "p": rng.integers(0, 2, n).astype(np.uint32)}
            ev["x"][0], ev["y"][-1] = 239, 179
            rel = os.path.join("Caltech101", cls, f"image_{i:04d}.{fmt}")
            (write_nmnist_bin if fmt == "bin" else write_events_npz)(os.path.join(root, rel), **ev)
            out[rel] = ev
    return out


# ---------------------------------------------------------------------------------- decoders
def read_aedat2(path):
    """CIFAR10-DVS AEDAT 2.0 as SpikingJelly decodes it: t uint32, x, y uint32, p int64."""
    with open(path, "rb") as f:
        raw = f.read()
    fp = io.BytesIO(raw)
    skip, line = 0, fp.readline()
    text = line.decode().strip()  # the first line is decoded without a try, as SpikingJelly does
    while text and text[0] == "#":
        skip += len(line)
        line = fp.readline()
        try:
            text = line.decode().strip()
        except UnicodeDecodeError:
            break
    body = raw[skip:]
    if len(body) % 8:
        raise ValueError(f"{path}: {len(body)} data bytes are not a whole number of 8-byte events")
    words = np.frombuffer(body, dtype=">u4")
    a, t = words[0::2].astype(np.uint32), words[1::2].astype(np.uint32)
    return {"t": t, "x": (127 - ((a >> 8) & 0x7F)).astype(np.uint32),
            "y": (127 - ((a >> 1) & 0x7F)).astype(np.uint32), "p": 1 - (a & 1).astype(np.int64)}


def read_aedat31(path):
    """AEDAT 3.1 polarity events as SpikingJelly decodes them (all int64, every slot, no flips)."""
    chunks = []
    with open(path, "rb") as f:
        line = f.readline()
        while line.startswith(b"#"):
            if line == b"#!END-HEADER\r\n":
                break
            line = f.readline()
        while True:
            head = f.read(28)
            if not head:
                break
            if len(head) < 28:
                raise ValueError(f"{path}: truncated packet header ({len(head)} bytes)")
            etype, _, esize, _, ovf, cap = struct.unpack("<HHIIII", head[:20])
            data = f.read(cap * esize)
            if etype != 1:
                continue
            if esize < 8 or len(data) % esize:
                raise ValueError(f"{path}: polarity packet of {len(data)} bytes with eventSize {esize}")
            slots = np.frombuffer(data, dtype=np.uint8).reshape(-1, esize)[:, :8].copy().view("<u4")
            chunks.append((slots[:, 0].astype(np.int64), slots[:, 1].astype(np.int64) | (ovf << 31)))
    aer = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros(0, np.int64)
    t = np.concatenate([c[1] for c in chunks]) if chunks else np.zeros(0, np.int64)
    return {"t": t, "x": (aer >> 17) & 0x7FFF, "y": (aer >> 2) & 0x7FFF, "p": (aer >> 1) & 1}


def read_nmnist_bin(path):
    """ATIS 40-bit events of N-MNIST and N-Caltech101 (all uint32, 23-bit t, no overflow handling, nothing
    dropped: a y = 240 marker is an ordinary event)."""
    raw = np.fromfile(path, dtype=np.uint8).astype(np.uint32)
    if len(raw) % 5:
        raise ValueError(f"{path}: {len(raw)} bytes are not a whole number of 5-byte events")
    b2 = raw[2::5]
    t = ((b2 & 127) << 16) | (raw[3::5] << 8) | raw[4::5]
    return {"t": t, "x": raw[0::5], "y": raw[1::5], "p": (b2 & 128) >> 7}


def read_npz(path):
    with np.load(path) as z:
        return {k: z[k] for k in "txyp"}


def read_events(path, dataset):
    ext = os.path.splitext(path)[1].lower()
    if ext == ".npz":
        return read_npz(path)
    if ext == ".bin":
        return read_nmnist_bin(path)
    if dataset == "dvs128-gesture":
        return read_aedat31(path)
    with open(path, "rb") as f:  # CIFAR10-DVS: AEDAT 2.0 as published, or 3.1 re-exported
        return read_aedat31(path) if f.readline().startswith(b"#!AER-DAT3") else read_aedat2(path)


# ------------------------------------------------------------------------------- integration
def integrate_segment(ev, H, W, jl, jr):
    """Event counts of ev[jl:jr] as float64 [2, H, W]; channel 0 counts p == 0, pixel [y, x]."""
    x, y = ev["x"][jl:jr].astype(np.int64), ev["y"][jl:jr].astype(np.int64)
    if len(x) and (x.min() < 0 or y.min() < 0 or x.max() >= W or y.max() >= H):
        raise ValueError(f"event outside the {H}x{W} sensor")
    pos = (ev["p"][jl:jr] != 0).astype(np.int64) * (H * W) + y * W + x
    return np.bincount(pos, minlength=2 * H * W).reshape(2, H, W).astype(np.float64)


def segment_indices(t, T, split_by):
    """SpikingJelly's fixed-frames-number segments: (j_l, j_r) int arrays of length T."""
    N = len(t)
    jl, jr = np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64)
    if split_by == "number":
        di = N // T
        jl[:] = np.arange(T) * di
        jr[:] = jl + di
    elif split_by == "time":
        if N == 0:
            raise ValueError("split_by='time' of an empty sample")
        with np.errstate(over="ignore"):
            span = t[-1] - t[0]  # in the array's dtype (uint32 wraps)
        dt = int(span) // T
        tt, t0 = np.asarray(t).astype(np.int64), int(t[0])
        for i in range(T):
            t_l = t0 + dt * i
            idx = np.flatnonzero((tt >= t_l) & (tt < t_l + dt))
            if len(idx) == 0:
                raise ValueError(f"split_by='time': frame {i} of {T} has no event "
                                 f"(dt={dt}, [{t_l}, {t_l + dt}))")
            jl[i], jr[i] = idx[0], idx[-1] + 1
    else:
        raise ValueError(f"unknown split_by {split_by!r}")
    jr[-1] = N
    return jl, jr


def integrate_fixed_frames(ev, T, split_by, H, W):
    jl, jr = segment_indices(ev["t"], T, split_by)
    return np.stack([integrate_segment(ev, H, W, a, b) for a, b in zip(jl, jr)])


def integrate_fixed_duration(ev, D, H, W):
    """SpikingJelly 2.0 grid: bins [k*D, (k+1)*D) from min t; the last frame takes the rest."""
    t = np.asarray(ev["t"])
    if len(t) == 0:
        raise ValueError("duration integration of an empty sample")
    t = t - t.min()
    n = int(math.ceil(int(t[-1]) / D))
    if n == 0:
        raise ValueError("duration integration: 0 frames (every timestamp equal)")
    index = t // D
    frames, left = np.zeros((n, 2, H, W)), 0
    for i in range(n - 1):
        right = int(np.searchsorted(index, i + 1, side="left"))
        frames[i] = integrate_segment(ev, H, W, left, right)
        left = right
    frames[-1] = integrate_segment(ev, H, W, left, len(t))
    return frames


def resize(frames, S):
    """torchvision Resize((S, S)) on a float32 [T, 2, H, W] tensor (T is the batch dim)."""
    import torch
    import torch.nn.functional as F
    x = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32))
    return F.interpolate(x, size=(S, S), mode="bilinear", align_corners=False, antialias=True).numpy()


DTYPES = {"u8": np.uint8, "u16": np.uint16, "f16": np.float16, "f32": np.float32}


def to_stored(v, dtype):
    """spikemesh's conversion of float frames to the stored dtype."""
    dtype = np.dtype(DTYPES.get(dtype, dtype))
    if dtype.kind == "u":
        return np.clip(np.rint(v), 0, np.iinfo(dtype).max).astype(dtype)
    if dtype == np.float16:
        return np.minimum(v, 65504).astype(np.float16)
    return np.asarray(v, dtype=np.float32)


# ---------------------------------------------------------------------------------- datasets
Sample = collections.namedtuple("Sample", "path label name t_begin t_end")
Reference = collections.namedtuple("Reference", "train_x train_y test_x test_y train_events test_events class_names "
                                   "train_names test_names train_n_frames test_n_frames sensor_hw")


def _class_files(d, exts, suffix=".npz"):
    """Event files of a class folder in DatasetFolder order: names compared as SpikingJelly's
    frame files, <stem>.npz, or <stem>_<frames>.npz (suffix "_") with a fixed duration."""
    keyed = sorted((os.path.splitext(f)[0] + suffix, f) for f in os.listdir(d)
                   if os.path.isfile(os.path.join(d, f)) and os.path.splitext(f)[1].lower() in exts)
    for a, b in zip(keyed, keyed[1:]):
        if a[0] == b[0]:
            raise ValueError(f"{d}: {a[1]} and {b[1]} are the same sample")
    return [f for _, f in keyed]


def gesture_folder_order():
    """Folders "0".."10" sorted as strings: returns [csv label k for target 0, 1, ...]."""
    return [int(s) for s in sorted(str(k) for k in range(11))]


def _subdirs(d):
    return sorted(e for e in os.listdir(d) if os.path.isdir(os.path.join(d, e)))


def _split_per_class(root, classes, exts, suffix, train_ratio):
    """One DatasetFolder over the class folders, split per class in order: the first ceil(n * ratio) train."""
    train, test = [], []
    for label, cls in enumerate(classes):
        files = _class_files(os.path.join(root, cls), exts, suffix)
        if not files:
            raise ValueError(f"{os.path.join(root, cls)}: empty class")
        pos = math.ceil(len(files) * train_ratio)
        for i, f in enumerate(files):
            (train if i < pos else test).append(Sample(os.path.join(root, cls, f), label, f"{cls}/{f}", None, None))
    return classes, train, test


def list_samples(dataset, root, train_ratio=0.9, duration=False, include_background=False):
    """(class_names, train samples, test samples), each split in SpikingJelly's order (with a fixed
    duration the frame files are named <stem>_<n>.npz, so names sort as <stem>_)."""
    suffix = "_" if duration else ".npz"
    if dataset == "cifar10-dvs":
        return _split_per_class(root, list(CIFAR_CLASSES), (".aedat", ".npz"), suffix, train_ratio)
    if dataset == "n-caltech101":
        for sub in ("Caltech101", "events_np"):  # the folder above the class folders
            if os.path.isdir(os.path.join(root, sub)):
                root = os.path.join(root, sub)
                break
        classes = [c for c in _subdirs(root) if include_background or c != CALTECH_BACKGROUND]
        return _split_per_class(root, classes, (".bin", ".npz"), suffix, train_ratio)
    if dataset == "n-mnist":
        splits = []
        for split in ("Train", "Test"):
            d = os.path.join(root, split)
            classes = _subdirs(d)
            splits.append([Sample(os.path.join(d, c, f), label, f"{split}/{c}/{f}", None, None)
                           for label, c in enumerate(classes)
                           for f in _class_files(os.path.join(d, c), (".bin", ".npz"), suffix)])
        return classes, splits[0], splits[1]
    if dataset == "dvs128-gesture":
        order = gesture_folder_order()
        target = {k: i for i, k in enumerate(order)}
        splits = []
        for lst in ("trials_to_train.txt", "trials_to_test.txt"):
            keyed = []
            with open(os.path.join(root, lst)) as f:
                trials = [s.strip() for s in f if s.strip()]
            for trial in trials:
                stem = os.path.splitext(trial)[0]
                rows = np.loadtxt(os.path.join(root, stem + "_labels.csv"), dtype=np.uint32, delimiter=",",
                                  skiprows=1, ndmin=2)
                count = [0] * 11
                for c, a, b in rows:
                    label = int(c) - 1
                    if not 0 <= label < 11:
                        raise ValueError(f"{stem}_labels.csv: class {int(c)} is not in 1..11")
                    name = f"{stem}_{count[label]}"
                    count[label] += 1
                    desc = f"{trial} [{a},{b}) -> {label}/{name}"
                    keyed.append(((target[label], name + suffix),
                                  Sample(os.path.join(root, trial), target[label], desc, int(a), int(b))))
            splits.append([s for _, s in sorted(keyed, key=lambda k: k[0])])
        return [GESTURE_NAMES[k] for k in order], splits[0], splits[1]
    raise ValueError(f"unknown dataset {dataset!r}")


def sample_events(dataset, s, cache):
    if s.path not in cache:
        cache[s.path] = read_events(s.path, dataset)
    ev = cache[s.path]
    if s.t_begin is None:
        return ev
    mask = (ev["t"] >= s.t_begin) & (ev["t"] < s.t_end)  # absolute timestamps, [start, end)
    return {k: v[mask] for k, v in ev.items()}


def reference(dataset, root, T=None, split_by="number", duration_us=0, size=0, train_ratio=0.9,
              include_background=False):
    """SpikingJelly's frames of every sample, float32 [N, T, 2, S, S] per split (S = size) or
    [N, T, 2, H, W] (the sensor's), plus labels, events, sample names and (duration mode) the grid
    frame counts."""
    H, W = SENSOR[dataset]
    oh, ow = (size, size) if size else (H, W)
    resized = (oh, ow) != (H, W)
    classes, train, test = list_samples(dataset, root, train_ratio, split_by == "duration", include_background)
    cache, res = {}, {"class_names": classes, "sensor_hw": (H, W)}
    for split, samples in (("train", train), ("test", test)):
        evs = [sample_events(dataset, s, cache) for s in samples]
        if split_by == "duration":
            grids = [integrate_fixed_duration(ev, duration_us, H, W) for ev in evs]
            nf = np.array([len(g) for g in grids], dtype=np.int32)
            Tn = T or int(nf.max(initial=1))
            grids = [np.concatenate([g[:Tn], np.zeros((max(0, Tn - len(g)), 2, H, W))]) for g in grids]
        else:
            grids, nf, Tn = [integrate_fixed_frames(ev, T, split_by, H, W) for ev in evs], None, T
        xs = [resize(g, size) if resized else g.astype(np.float32) for g in grids]
        res.update({split + "_x": np.stack(xs) if xs else np.zeros((0, Tn, 2, oh, ow), np.float32),
                    split + "_y": np.array([s.label for s in samples], dtype=np.int64), split + "_events": evs,
                    split + "_names": [s.name for s in samples], split + "_n_frames": nf})
    return Reference(**res)


# ----------------------------------------------------------------------------------- checker
def _attr(f, name, default=None):
    v = f.attrs.get(name, default)
    if isinstance(v, np.ndarray) and v.size == 1 and not name.endswith("_per_class"):
        v = v.reshape(-1)[0]
    v = v.decode() if isinstance(v, bytes) else v
    return v.tolist() if isinstance(v, (np.generic, np.ndarray)) else v


def _ordered_f16(a):
    b = a.astype(np.float16).view(np.uint16).astype(np.int64)
    return np.where(b >= 0x8000, 0x8000 - b, b)


def _frame_diff(got, ref, dtype, resized):
    """(mask of elements out of tolerance, |diff|) under spikemesh's comparison rules."""
    want = to_stored(ref, dtype)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if not resized:
        return got != want, diff
    if dtype == np.float32:
        return diff > 1e-5 * (1 + np.abs(ref)), diff
    if dtype == np.float16:
        return np.abs(_ordered_f16(got) - _ordered_f16(want)) > 1, diff
    return diff > 1, diff  # u8/u16: off-by-one rounding


def check(dataset, root, h5path, out=print, include_background=False):
    """Compares a spikemesh file with the reference, one line per check; returns the failure count."""
    import h5py
    fails, t0 = [], time.time()

    def report(ok, what, detail=""):
        out(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + str(detail) if detail != '' else ''}")
        fails.extend([] if ok else [what])
        return ok

    def first_bad(got, want, names):
        bad = np.flatnonzero(got != want)
        return f"{len(want)} exact" if not len(bad) else \
            f"sample {bad[0]} ({names[bad[0]]}) has {got[bad[0]]}, want {want[bad[0]]}; {len(bad)} differ"

    with h5py.File(h5path, "r") as f:
        H, W = SENSOR[dataset]
        T, split_by, dur = int(_attr(f, "T", 0)), _attr(f, "split_by", ""), int(_attr(f, "duration_us", 0))
        fh, fw, ratio = int(_attr(f, "frame_h", 0)), int(_attr(f, "frame_w", 0)), float(_attr(f, "train_ratio", 0.9))
        resized = (fh, fw) != (H, W)
        S = fh if resized else 0  # the --size the file was made with (square), 0: the sensor's frames
        for k, want in (("dataset", dataset), ("layout", "NTCHW"), ("sensor_h", H), ("sensor_w", W),
                        ("size", fh if fh == fw else 0)):
            report(_attr(f, k) == want, "attr " + k, repr(_attr(f, k)))
        report(fh > 0 and (not resized or fh == fw), "attr frame_h/frame_w", f"{fh}x{fw} (sensor {H}x{W})")
        if dataset in ("cifar10-dvs", "n-caltech101"):
            report("train_ratio" in f.attrs, "attr train_ratio", ratio)
        modes_ok = split_by in ("number", "time", "duration") and (split_by != "duration") == (dur == 0)
        if not report(T > 0 and modes_ok, "attr T/split_by/duration_us", f"{T}/{split_by!r}/{dur}"):
            return len(fails)
        try:
            ref = reference(dataset, root, T, split_by, dur, S, ratio, include_background)
        except ValueError as e:
            report(False, "reference", e)
            return len(fails)
        nc = len(ref.class_names)
        report(_attr(f, "num_classes") == nc, "attr num_classes", f"{_attr(f, 'num_classes')} (want {nc})")
        report(_attr(f, "class_names") == ",".join(ref.class_names), "attr class_names", _attr(f, "class_names"))
        for split in ("train", "test"):
            x, y, evs, names, nf = (getattr(ref, f"{split}_{k}") for k in ("x", "y", "events", "names", "n_frames"))
            want = np.bincount(y, minlength=nc).astype(np.int64)
            got = np.asarray(_attr(f, split + "_per_class", [])).reshape(-1)
            report(np.array_equal(got, want), f"attr {split}_per_class", f"{got.tolist()} (want {want.tolist()})")
            gy = f.get(split + "/y")
            if report(gy is not None and gy.dtype == np.int64 and gy.shape == y.shape, f"{split}/y shape/dtype",
                      f"{None if gy is None else (gy.shape, str(gy.dtype))} (want int64 {y.shape})"):
                gy = gy[...]
                report(np.array_equal(gy, y), f"{split}/y labels", first_bad(gy, y, names))
            gx = f.get(split + "/x")
            if not report(gx is not None and gx.shape == x.shape and gx.dtype in list(map(np.dtype, DTYPES.values())),
                          f"{split}/x shape/dtype",
                          f"{None if gx is None else (gx.shape, str(gx.dtype))} (want {x.shape})"):
                continue
            dtype, gx, first, n_bad, n_diff, maxd = gx.dtype, gx[...], None, 0, 0, 0.0
            for i in range(len(x)):
                bad, diff = _frame_diff(gx[i], x[i], dtype, resized)
                maxd = max(maxd, float(diff.max(initial=0)))
                n_bad, n_diff = n_bad + int(bad.sum()), n_diff + int((diff > 0).sum())
                if first is None and bad.any():
                    first = (i, float(diff[bad].max()))
            rule = f"within tolerance ({n_diff} elements differ, max |diff| {maxd:g})" if resized else "exact"
            report(first is None, f"{split}/x frames ({dtype}, {fh}x{fw})",
                   f"{len(x)} samples {rule}" if first is None else f"first differing sample {first[0]} "
                   f"({names[first[0]]}) max |diff| {first[1]:g}; {n_bad} elements out of tolerance")
            if split_by == "duration":
                gn = f.get(split + "/n_frames")
                if report(gn is not None and gn.dtype == np.int32 and gn.shape == nf.shape,
                          f"{split}/n_frames shape/dtype", f"want int32 {nf.shape}"):
                    report(np.array_equal(gn[...], nf), f"{split}/n_frames", first_bad(gn[...], nf, names))
            if split + "/events" in f:
                check_events(f[split + "/events"], evs, names, split, report)
    out(f"{'FAILED' if fails else 'passed'}: {len(fails)} failed check(s) in {time.time() - t0:.1f} s")
    return len(fails)


EVENT_DTYPES = {"t": np.int64, "x": np.uint16, "y": np.uint16, "p": np.uint8}


def check_events(g, evs, names, split, report):
    offs = np.cumsum([0] + [len(e["t"]) for e in evs]).astype(np.int64)
    for k, dt in list(EVENT_DTYPES.items()) + [("offsets", np.int64)]:
        if not report(k in g and g[k].dtype == dt, f"{split}/events/{k} dtype", f"want {np.dtype(dt)}"):
            return
    go = g["offsets"][...]
    n = min(len(go), len(offs))
    bad = np.flatnonzero(go[:n] != offs[:n])
    if not report(np.array_equal(go, offs), f"{split}/events/offsets", f"{len(offs)} exact" if np.array_equal(go, offs)
                  else f"{len(go)} offsets (want {len(offs)}); sample {bad[0] - 1 if len(bad) else n - 1} "
                  f"({names[max(0, bad[0] - 1 if len(bad) else n - 2)]}) has the wrong event count"):
        return
    for k in "txyp":
        got, want = g[k][...].astype(np.int64), np.concatenate([e[k] for e in evs] + [[]]).astype(np.int64)
        ok = got.shape == want.shape and np.array_equal(got, want)
        i = int(np.argmax(got != want)) if not ok and got.shape == want.shape else -1
        s = int(np.searchsorted(offs, i, side="right")) - 1
        report(ok, f"{split}/events/{k}", f"{len(want)} exact" if ok else f"shape {got.shape}, want {want.shape}"
               if i < 0 else f"sample {s} ({names[s]}) event {i - offs[s]} has {got[i]}, want {want[i]}")


def write_reference_h5(path, dataset, root, T, split_by="number", duration_us=0, size=0, dtype="u8",
                       train_ratio=0.9, events=False, include_background=False):
    """The file spikemesh should write, from the reference (to exercise check)."""
    import h5py
    ref = reference(dataset, root, T, split_by, duration_us, size, train_ratio, include_background)
    H, W = ref.sensor_hw
    fh, fw = (size, size) if size else (H, W)
    with h5py.File(path, "w") as f:
        f.attrs.update(dict(dataset=dataset, T=T, split_by=split_by, duration_us=duration_us,
                            size=fh if fh == fw else 0, frame_h=fh, frame_w=fw,
                            sensor_h=H, sensor_w=W, num_classes=len(ref.class_names), layout="NTCHW",
                            class_names=",".join(ref.class_names), checksum=""))
        if dataset in ("cifar10-dvs", "n-caltech101"):
            f.attrs["train_ratio"] = float(train_ratio)
        for split in ("train", "test"):
            y, evs = getattr(ref, split + "_y"), getattr(ref, split + "_events")
            f.attrs[split + "_per_class"] = np.bincount(y, minlength=len(ref.class_names)).astype(np.int64)
            f[split + "/x"], f[split + "/y"] = to_stored(getattr(ref, split + "_x"), dtype), y
            if split_by == "duration":
                f[split + "/n_frames"] = getattr(ref, split + "_n_frames")
            for k, dt in EVENT_DTYPES.items() if events else ():
                f[f"{split}/events/{k}"] = np.concatenate([e[k] for e in evs]).astype(dt)
            if events:
                f[split + "/events/offsets"] = np.cumsum([0] + [len(e["t"]) for e in evs]).astype(np.int64)


# ---------------------------------------------------------------------------------- selftest
def selftest():
    import tempfile
    import h5py
    failures = []

    def expect(ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        failures.extend([] if ok else [what])

    jl, jr = segment_indices(np.array([0, 1, 2, 3]), 2, "time")
    expect(list(jl) == [0, 1] and list(jr) == [1, 4], "time t=[0,1,2,3] T=2 -> j_l=[0,1] j_r=[1,4]")
    jl, jr = segment_indices(np.arange(7), 3, "number")
    expect(list(jl) == [0, 2, 4] and list(jr) == [2, 4, 7], "number N=7 T=3: remainder to the last frame")
    try:
        segment_indices(np.array([0, 0, 0, 10], dtype=np.uint32), 2, "time")
        expect(False, "empty time bin raises")
    except ValueError as e:
        expect("frame 1" in str(e), "empty time bin raises ValueError naming frame 1")
    ev = {"t": np.array([5, 6, 7, 8, 9], np.uint32), "x": np.array([0, 1, 2, 3, 0], np.uint32),
          "y": np.zeros(5, np.uint32), "p": np.array([0, 1, 0, 1, 1], np.int64)}
    fr = integrate_fixed_duration(ev, 2, 1, 4)
    expect(fr.shape == (2, 2, 1, 4) and fr[0].sum() == 2 and fr[1, 1, 0, 0] == 1 and fr[1, 0, 0, 2] == 1,
           "duration grid t-min=[0..4], D=2: 2 frames, the last takes t=4")
    fr = integrate_fixed_frames(ev, 2, "number", 1, 4)
    expect(fr[0, 0, 0, 0] == 1 and fr[0, 1, 0, 1] == 1 and fr[1].sum() == 3, "number frames: channel 0 = p==0")
    expect(np.allclose(resize(np.full((2, 2, 128, 128), 3.0), 48), 3.0), "resize of a constant frame")
    expect(list(to_stored(np.array([-1.0, 2.5, 3.5, 300.0]), "u8")) == [0, 2, 4, 255]
           and to_stored(np.array([1e6]), "f16")[0] == 65504, "to_stored rounding/clipping")
    with tempfile.TemporaryDirectory() as tmp:
        gens = [("cifar10-dvs", gen_cifar10dvs, (11, 1, "aedat")), ("cifar10-dvs", gen_cifar10dvs, (11, 2, "npz")),
                ("cifar10-dvs", gen_cifar10dvs, (11, 3, "aedat31")), ("dvs128-gesture", gen_gesture, ((1, 2, 3),)),
                ("n-mnist", gen_nmnist, (2, 5)), ("n-mnist", gen_nmnist, (1, 6, "npz")),
                ("n-caltech101", gen_ncaltech101, (10, 7)), ("n-caltech101", gen_ncaltech101, (9, 8, "npz"))]
        for k, (dataset, gen, args) in enumerate(gens):
            d = os.path.join(tmp, str(k))
            truth = gen(d, *args)
            dec = {rel: read_events(os.path.join(d, rel), dataset) for rel in truth}
            bad = [rel for rel, ev in truth.items()
                   if not all(np.array_equal(dec[rel][c], ev[c]) and dec[rel][c].dtype == ev[c].dtype for c in "txyp")]
            expect(not bad, f"{dataset} {len(truth)} files round-trip {bad[:1]}")
            ref = reference(dataset, d, 4, "time")
            expect(len(ref.train_x) > 0 and len(ref.test_x) > 0, f"{dataset} reference, split_by='time'")
        d = os.path.join(tmp, "0", "airplane")
        skip = len(_header_bytes(AEDAT2_HEADER))
        addr = np.concatenate([np.frombuffer(open(os.path.join(d, f), "rb").read()[skip:], ">u4")[0::2]
                               for f in sorted(os.listdir(d))])
        expect(0.1 < np.mean((addr & 0xFFFF8000) != 0) < 0.3, "AEDAT 2.0 junk in the ignored address bits")
        ev = read_events(os.path.join(tmp, "3", "user01_led.aedat"), "dvs128-gesture")
        expect(ev["t"].max() >= 2**31 > ev["t"].min(), "gesture user01_led crosses 2^31 us")
        names, tr, te = list_samples("n-caltech101", os.path.join(tmp, "6"))
        names_bg, tr_bg, _ = list_samples("n-caltech101", os.path.join(tmp, "6"), include_background=True)
        expect(names == list(CALTECH_CLASSES[1:]) and names_bg == list(CALTECH_CLASSES) and tr_bg[0].label == 0
               and tr_bg[0].name.startswith(CALTECH_BACKGROUND) and tr[0].name.startswith("Faces_easy/"),
               "n-caltech101 classes: sorted folders, BACKGROUND_Google only when included (label 0)")
        _, tr, te = list_samples("cifar10-dvs", os.path.join(tmp, "0"))
        expect(len(tr) == 100 and len(te) == 10 and tr[2].name.endswith("_10.aedat")
               and te[0].name.endswith("_9.aedat"), "cifar: order _0,_1,_10,_2..; ceil(11*0.9)=10 train per class")
        h5 = os.path.join(tmp, "ref.h5")
        for dataset, d, opts in (("dvs128-gesture", "3", (5, "duration", 20000, 48, "u8")),
                                 ("cifar10-dvs", "0", (6, "time", 0, 0, "f16")),
                                 ("n-mnist", "4", (3, "number", 0, 48, "f32")),
                                 ("n-caltech101", "6", (3, "number", 0, 0, "u8")),
                                 ("n-caltech101", "7", (4, "time", 0, 40, "f32"))):
            write_reference_h5(h5, dataset, os.path.join(tmp, d), *opts, events=True)
            expect(check(dataset, os.path.join(tmp, d), h5, out=lambda s: None) == 0, f"check of a {dataset} file")
            with h5py.File(h5, "r+") as f:
                f["test/x"][0, 0, 0, 0, 0] += 2
            expect(check(dataset, os.path.join(tmp, d), h5, out=lambda s: None) == 1, "check catches a changed pixel")
    print(f"selftest: {'FAILED ' + str(len(failures)) if failures else 'passed'}")
    return 1 if failures else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("selftest")
    g, c = sub.add_parser("gen"), sub.add_parser("check")
    w = sub.add_parser("write-ref", help="write the file spikemesh should produce (to exercise check)")
    for p in (g, c, w):
        p.add_argument("dataset", choices=sorted(SENSOR))
        p.add_argument("dir")
        if p is not g:
            p.add_argument("h5")
            p.add_argument("--include-background", action="store_true", help="n-caltech101: BACKGROUND_Google a class")
    for opt, typ, default in (("--per-class", int, None), ("--seed", int, 0), ("--fmt", str, None)):
        g.add_argument(opt, type=typ, default=default)  # --fmt: cifar10-dvs aedat|npz|aedat31, n-mnist / n-caltech101 bin|npz
    for opt, typ, default in (("--T", int, 10), ("--split-by", str, "number"), ("--duration-us", int, 0),
                              ("--size", int, 0), ("--dtype", str, "u8"), ("--train-ratio", float, 0.9)):
        w.add_argument(opt, type=typ, default=default)
    w.add_argument("--events", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "selftest":
        return selftest()
    if a.cmd == "check":
        return 1 if check(a.dataset, a.dir, a.h5, include_background=a.include_background) else 0
    if a.cmd == "write-ref":
        write_reference_h5(a.h5, a.dataset, a.dir, a.T, a.split_by, a.duration_us, a.size, a.dtype, a.train_ratio,
                           a.events, a.include_background)
        return 0
    if a.dataset == "cifar10-dvs":
        files = gen_cifar10dvs(a.dir, a.per_class or 12, a.seed, a.fmt or "aedat")
    elif a.dataset == "n-mnist":
        files = gen_nmnist(a.dir, a.per_class or 3, a.seed, a.fmt or "bin")
    elif a.dataset == "n-caltech101":
        files = gen_ncaltech101(a.dir, a.per_class or 10, a.seed, a.fmt or "bin")
    else:
        files = gen_gesture(a.dir, seed=a.seed)
    print(f"wrote {len(files)} event files under {a.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
