"""augment_ref.py — an independent numpy reference of spikemesh's --augment, for the preview
files of `spikemesh data augment` (data/augment_preview.h).

`check PREVIEW` recomputes, from the file's seed, epoch, sample indices and step list alone,
every draw spikemesh makes (Philox4x32-10 as in Random123, checked here against its published
known-answer vectors; the counter streams of core/rng.h keyed by FNV-1a purposes; step s of the
spec using counters (s << 32) + 0, 1, ...; per event (s << 48) | (element << 16) | j for
dropevent), checks that /x_original and /partner_x_original are the dataset's rows, applies
the steps to /x_original and the partners' /partner_x_original as docs/datasets.md
"Augmentation" defines them, and requires /x, /partner and /target to be exactly what spikemesh
wrote. Scalar math goes through Python's `math` (the C library, as in spikemesh); rotation's
source pixels and the mixing are computed in float64, then float32. With --stats it also checks
that each step fired on a share of the samples consistent with its probability (5 sigma).
"""
import argparse
import math
import sys

import h5py
import numpy as np

MASK = 0xFFFFFFFF
U64 = (1 << 64) - 1


def philox(c, k):
    c, k = list(c), list(k)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & MASK, p1 & MASK, ((p0 >> 32) ^ c[3] ^ k[1]) & MASK, p0 & MASK]
        k = [(k[0] + 0x9E3779B9) & MASK, (k[1] + 0xBB67AE85) & MASK]
    return c


def philox_np(c0, c1, c2, c3, k0, k1):
    """Vectorised over uint64 arrays holding 32-bit words."""
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0)), p1 & np.uint64(MASK), \
            ((p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1)), p0 & np.uint64(MASK)
        k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
    return c0, c1, c2, c3


def fnv1a(s):
    h = 1469598103934665603
    for ch in s.encode():
        h = ((h ^ ch) * 1099511628211) & U64
    return h


class Stream:
    def __init__(self, seed, purpose):
        z = ((seed * 0x9E3779B97F4A7C15) & U64) ^ fnv1a(purpose)
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & U64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & U64
        z ^= z >> 31
        self.key = [z & MASK, z >> 32]

    def bits(self, i, a, b):
        return philox([i & MASK, i >> 32, a & MASK, b & MASK], self.key)

    def uniform(self, i, a, b):
        r = self.bits(i, a, b)
        return (((r[0] << 21) ^ (r[1] >> 11)) & ((1 << 53) - 1)) * (1.0 / 9007199254740992.0)

    def normal(self, i, a, b):
        r = self.bits(i, a, b)
        u1 = ((((r[0] << 21) ^ (r[1] >> 11)) & ((1 << 53) - 1)) + 1.0) * (1.0 / 9007199254740993.0)
        u2 = (((r[2] << 21) ^ (r[3] >> 11)) & ((1 << 53) - 1)) * (1.0 / 9007199254740992.0)
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)

    def uniforms(self, counters, a, b):
        c = np.asarray(counters, dtype=np.uint64)
        r0, r1, _, _ = philox_np(c & np.uint64(MASK), c >> np.uint64(32), np.full_like(c, a & MASK),
                                 np.full_like(c, b & MASK), self.key[0], self.key[1])
        x = ((r0 << np.uint64(21)) ^ (r1 >> np.uint64(11))) & np.uint64((1 << 53) - 1)
        return x.astype(np.float64) * (1.0 / 9007199254740992.0)


class Draws:
    def __init__(self, stream, step, epoch, sample):
        self.s, self.base, self.a, self.b, self.k = stream, step << 32, epoch, sample, 0

    def uniform(self):
        self.k += 1
        return self.s.uniform(self.base + self.k - 1, self.a, self.b)

    def normal(self):
        self.k += 1
        return self.s.normal(self.base + self.k - 1, self.a, self.b)

    def integer(self, lo, hi):
        return lo + min(hi - lo, int(math.floor(self.uniform() * float(hi - lo + 1))))


def log_or_inf(u):
    return math.log(u) if u > 0 else -math.inf


def log_gamma(a, d):
    if a < 1:
        u = d.uniform()
        return log_gamma(a + 1, d) + log_or_inf(u) / a
    dd = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * dd)
    while True:
        x = d.normal()
        v = 1.0 + c * x
        if v <= 0:
            continue
        v = v * v * v
        u = d.uniform()
        if u < 1.0 - 0.0331 * x * x * x * x:
            return math.log(dd * v)
        if log_or_inf(u) < 0.5 * x * x + dd * (1.0 - v + math.log(v)):
            return math.log(dd * v)


def beta(alpha, d):
    l1 = log_gamma(alpha, d)
    l2 = log_gamma(alpha, d)
    if math.isinf(l1) and math.isinf(l2):
        return 0.5
    try:
        e = math.exp(l2 - l1)
    except OverflowError:  # C's exp gives inf there
        e = math.inf
    return 1.0 / (1.0 + e)


def shift_axis(a, s, axis, wrap=False):
    if wrap:
        return np.roll(a, s, axis=axis)
    out = np.zeros_like(a)
    n = a.shape[axis]
    if abs(s) >= n:
        return out
    src, dst = [slice(None)] * a.ndim, [slice(None)] * a.ndim
    src[axis] = slice(0, n - s) if s >= 0 else slice(-s, n)
    dst[axis] = slice(s, n) if s >= 0 else slice(0, n + s)
    out[tuple(dst)] = a[tuple(src)]
    return out


def rotate(a, c, s):
    H, W = a.shape[-2:]
    cy, cx = (H - 1) / 2.0, (W - 1) / 2.0
    i, j = np.meshgrid(np.arange(H, dtype=np.float64), np.arange(W, dtype=np.float64), indexing="ij")
    di, dj = i - cy, j - cx
    xi = np.floor((c * dj - s * di + cx) + 0.5)
    yi = np.floor((s * dj + c * di + cy) + 0.5)
    inside = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
    src = a[..., np.where(inside, yi, 0).astype(np.int64), np.where(inside, xi, 0).astype(np.int64)]
    return np.where(inside, src, 0).astype(a.dtype)


def transform(x, steps, seed, epoch, key, partner):
    """The non-mixing steps on one sample; returns it and the list of steps that fired."""
    ops = Stream(seed, "augment-partner" if partner else "augment")
    drop = Stream(seed, "augment-partner-drop" if partner else "augment-drop")
    x = x.copy()
    fired = []
    for s, (name, p, m) in enumerate(steps):
        if name in ("mixup", "cutmix"):
            continue
        d = Draws(ops, s, epoch, key)
        if not d.uniform() < p:
            continue
        fired.append(s)
        mi = int(m)
        if name == "hflip":
            x = x[..., ::-1].copy()
        elif name == "vflip":
            x = x[..., ::-1, :].copy()
        elif name in ("translate", "roll"):
            dy, dx = d.integer(-mi, mi), d.integer(-mi, mi)
            x = shift_axis(shift_axis(x, dy, x.ndim - 2, name == "roll"), dx, x.ndim - 1, name == "roll")
        elif name == "rotate":
            rad = (2.0 * d.uniform() - 1.0) * m * math.pi / 180.0
            x = rotate(x, math.cos(rad), math.sin(rad))
        elif name == "cutout":
            cy, cx = d.integer(0, x.shape[-2] - 1), d.integer(0, x.shape[-1] - 1)
            y0, x0 = max(0, cy - mi // 2), max(0, cx - mi // 2)
            x[..., y0:min(x.shape[-2], cy - mi // 2 + mi), x0:min(x.shape[-1], cx - mi // 2 + mi)] = 0
        elif name == "timeshift":
            x = shift_axis(x, d.integer(-mi, mi), 0)
        elif name == "jitter":
            x = shift_axis(x, d.integer(-mi, mi), x.ndim - 1)
        elif name == "dropevent":
            flat = x.reshape(-1)
            for e in np.nonzero(flat)[0]:
                cnt = int(flat[e])
                u = drop.uniforms([(s << 48) | (int(e) << 16) | j for j in range(cnt)], epoch, key)
                flat[e] = float(np.count_nonzero(u >= m))
            x = flat.reshape(x.shape)
    return x, fired


def mix_decision(steps, seed, epoch, key, train_size, H, W):
    rng = Stream(seed, "augment-mix")
    for s, (name, p, m) in enumerate(steps):
        if name not in ("mixup", "cutmix"):
            continue
        d = Draws(rng, s, epoch, key)
        if not d.uniform() < p:
            continue
        partner = d.integer(0, train_size - 1)
        lam = beta(m, d)
        centre = (d.integer(0, H - 1), d.integer(0, W - 1)) if name == "cutmix" else None
        return s, name, partner, lam, centre
    return None


def check(path, stats):
    f = h5py.File(path, "r")
    steps = [(t.split(":")[0], float(t.split(":")[1]), float(t.split(":")[2]) if t.count(":") > 1 else 0.0)
             for t in f.attrs["augment"].split(",")]
    seed, epoch = int(f.attrs["seed"]), int(f.attrs["epoch"])
    data = h5py.File(f.attrs["data"], "r")
    train_size = data["train/y"].shape[0]
    labels = data["train/y"][...]
    scale = np.float32(data.attrs.get("x_scale", 1.0))

    def row(k):  # training sample k as the dataset file holds it, scaled as read (f32)
        return data["train/x"][int(k)].astype(np.float32) * scale

    # frames made on the fly equal the stored rows only for the import's own T and split
    frames = str(f.attrs.get("frames", ""))
    stored_frames = f"{data.attrs.get('T', '')},{data.attrs.get('split_by', '')}"
    check_rows = frames in ("", stored_frames)
    if not check_rows:
        print(f"  (--frames {frames} differs from the import's {stored_frames}: rows not compared with /x)")

    index, x0, x, y = f["index"][...], f["x_original"][...], f["x"][...], f["y"][...]
    px0, partner = f["partner_x_original"][...], f["partner"][...]
    target = f["target"][...] if "target" in f else None
    problems, fired_count = [], np.zeros(len(steps))
    for i, key in enumerate(int(k) for k in index):
        if (check_rows and not np.array_equal(x0[i], row(key))) or y[i] != labels[key]:
            problems.append(f"sample {key}: /x_original or /y is not the dataset's row {key}")
        a, fired = transform(x0[i], steps, seed, epoch, key, False)
        fired_count[fired] += 1
        m = mix_decision(steps, seed, epoch, key, train_size, a.shape[-2], a.shape[-1])
        t = np.zeros(target.shape[1]) if target is not None else None
        want_partner = -1
        if m is not None:
            s, name, want_partner, lam, centre = m
            if check_rows and not np.array_equal(px0[i], row(want_partner)):
                problems.append(f"sample {key}: /partner_x_original is not the dataset's row {want_partner}")
            b, _ = transform(px0[i], steps, seed, epoch, key, True)
            if name == "mixup":
                a = (lam * a.astype(np.float64) + (1.0 - lam) * b.astype(np.float64)).astype(np.float32)
            else:
                H, W = a.shape[-2:]
                cut = math.sqrt(1.0 - lam)
                ch, cw = int(H * cut), int(W * cut)
                y0, y1 = min(max(centre[0] - ch // 2, 0), H), min(max(centre[0] + ch // 2, 0), H)
                xa, xb = min(max(centre[1] - cw // 2, 0), W), min(max(centre[1] + cw // 2, 0), W)
                a[..., y0:y1, xa:xb] = b[..., y0:y1, xa:xb]
                lam = 1.0 - (y1 - y0) * (xb - xa) / (H * W)
            t[y[i]] += lam
            t[labels[want_partner]] += 1.0 - lam
        elif t is not None:
            t[y[i]] = 1.0
        if want_partner != partner[i]:
            problems.append(f"sample {key}: partner {partner[i]}, the reference draws {want_partner}")
        if not np.array_equal(a, x[i]):
            bad = np.argwhere(a != x[i])
            problems.append(f"sample {key}: {len(bad)} values differ from the reference, first at {bad[0].tolist()}")
        if target is not None and not np.array_equal(target[i], t):
            problems.append(f"sample {key}: target {target[i].tolist()}, the reference {t.tolist()}")
    n = len(index)
    if stats:
        for s, (name, p, _) in enumerate(steps):
            if name in ("mixup", "cutmix"):
                continue
            sd = math.sqrt(max(n * p * (1 - p), 1e-9))
            if abs(fired_count[s] - n * p) > 5 * sd + 1e-9:
                problems.append(f"{name}: fired on {int(fired_count[s])} of {n}, expected {n * p:.1f} +- {5 * sd:.1f}")
    for p in problems[:20]:
        print("  " + p)
    print(f"{path}: {n} samples, {len(steps)} steps, fired {fired_count.astype(int).tolist()}, {len(problems)} problems")
    return not problems


def selftest():
    # Random123's known-answer vectors for philox4x32_10
    assert philox([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox([MASK] * 4, [MASK] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    s = Stream(7, "augment")
    v = s.uniforms([0, 1, (5 << 32) + 3], 2, 9)
    assert [s.uniform(c, 2, 9) for c in (0, 1, (5 << 32) + 3)] == v.tolist()
    print("augment_ref selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="compare a preview file with the reference")
    c.add_argument("preview")
    c.add_argument("--stats", action="store_true", help="also check each step's firing share against P")
    sub.add_parser("selftest", help="the Philox known-answer vectors")
    a = ap.parse_args()
    if a.cmd == "selftest":
        selftest()
        return
    sys.exit(0 if check(a.preview, a.stats) else 1)


if __name__ == "__main__":
    main()
