#!/usr/bin/python3
"""plot_metrics.py — PNG plots of a spikemesh run's metrics.h5 (format: output/README.md).

    /usr/bin/python3 scripts/plot_metrics.py RUN_DIR [--out DIR] [--smooth N]

Writes into DIR (default RUN_DIR/plots):
    loss.png           per-step training loss (faint), its running mean, eval loss (markers)
    accuracy.png       per-step training accuracy (faint), its running mean, eval accuracy
    firing_rate.png    firing rate of every neuron layer: per step (running mean) with the
                       evaluations as markers, and the last evaluation as bars (horizontal,
                       serving as the legend, for more than 8 layers)
    step_time.png      step time split into forward / backward / optimizer / data wait / other
                       (running means, stacked) and the mean split as one bar
    lr.png             learning rate per step
    throughput.png     samples/s (running mean) and peak memory per step
Plots whose columns are absent from the file are skipped with a note. Only /usr/bin/python3
with Debian's python3-h5py, python3-numpy and python3-matplotlib (Agg backend) is needed.
Works on a run that is still training (HDF5 file locking is turned off for this read-only
access; the file holds the rows flushed so far). Exit status: 0 on success, 2 when RUN_DIR
or its metrics.h5 is missing or unreadable, 1 when the file holds no rows yet.
"""
import argparse
import os
import sys

# Read a file that a running `spikemesh train` holds open (it does not use SWMR).
os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import h5py  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

# Stacked step-time components: (column in /step, legend label, colour). "other" is what is
# left of time_ms (neuron-state reset, metrics, bookkeeping).
TIME_PARTS = [
    ("forward_ms", "forward (+ loss)", "#4c72b0"),
    ("backward_ms", "backward", "#dd8452"),
    ("optimizer_ms", "optimizer (+ clipping)", "#55a868"),
    ("data_ms", "data wait", "#c44e52"),
]
OTHER_COLOR = "#b0b0b0"


def fail(msg, code=2):
    print(f"plot_metrics: error: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------- reading
def layer_names_of(ds, width):
    """The 'layer_names' attribute (one comma-separated string) as a list of `width` names."""
    raw = ds.attrs.get("layer_names")
    if raw is None:
        names = []
    else:
        if isinstance(raw, bytes):
            raw = raw.decode()
        if isinstance(raw, str):
            names = [n for n in raw.split(",") if n]
        else:  # an array of strings, should a writer ever store one
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in np.ravel(raw)]
    if len(names) != width:
        names = [f"layer {i}" for i in range(width)]
    return names


def read_group(f, name):
    """{column: array} of a metrics group, plus ('firing_rate', names) if present."""
    cols, fr = {}, None
    if name not in f:
        return cols, fr
    for key, ds in f[name].items():
        if not isinstance(ds, h5py.Dataset):
            continue
        if ds.ndim == 1:
            cols[key] = np.asarray(ds[()], dtype=np.float64)
        elif ds.ndim == 2 and key == "firing_rate":
            fr = (np.asarray(ds[()], dtype=np.float64), layer_names_of(ds, ds.shape[1]))
    n = len(cols.get("step", []))
    cols = {k: v[:n] for k, v in cols.items()} if n else cols  # columns of unequal flush state
    if fr is not None and n:
        fr = (fr[0][:n], fr[1])
    return cols, fr


def run_title(run_dir):
    """'<run> — <model> (vars), batch N, precision' from config.toml when readable."""
    title = os.path.basename(os.path.normpath(run_dir))
    try:
        import tomllib

        with open(os.path.join(run_dir, "config.toml"), "rb") as fh:
            cfg = tomllib.load(fh)
        model = cfg.get("model-spec") or cfg.get("model", "")
        extra = ", ".join(cfg.get("var", []))
        title += f" — {model}" + (f" ({extra})" if extra else "")
        title += f", batch {cfg.get('batch-size', '?')}, {cfg.get('precision', '')}"
    except Exception:  # no config.toml, no tomllib (Python < 3.11), a damaged file: plain title
        pass
    return title


# ----------------------------------------------------------------------------- helpers
def running_mean(y, window):
    """Trailing mean over `window` points (shorter at the start), NaN-safe."""
    y = np.asarray(y, dtype=np.float64)
    if window <= 1 or len(y) == 0:
        return y
    ok = np.isfinite(y)
    c = np.concatenate([[0.0], np.cumsum(np.where(ok, y, 0.0))])
    k = np.concatenate([[0], np.cumsum(ok)])
    i = np.arange(1, len(y) + 1)
    lo = np.maximum(0, i - window)
    cnt = k[i] - k[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, (c[i] - c[lo]) / np.maximum(cnt, 1), np.nan)


def warmup_steps(total):
    """How many leading steps are warm-up outliers (> 3x the median step time; at most 3)."""
    if len(total) < 4:
        return 0
    median = float(np.nanmedian(total))
    skip = 0
    while skip < 3 and total[skip] > 3 * median:
        skip += 1
    return skip


def mark_epochs(ax, step):
    """Dotted vertical lines where a new epoch starts."""
    epoch = step.get("epoch")
    x = step.get("step")
    if epoch is None or x is None or len(epoch) < 2:
        return
    for i in np.nonzero(np.diff(epoch) > 0)[0]:
        ax.axvline(x[i] + 0.5, color="0.6", lw=0.8, ls=":", zorder=0)
        ax.text(x[i] + 0.5, 1.0, f" epoch {int(epoch[i + 1]) + 1}", transform=ax.get_xaxis_transform(),
                fontsize=7, color="0.4", va="top")


def step_axis(ax):
    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def finish(fig, path, written):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)


def new_figure(title, subtitle, ncols=1, width=8.0, height=4.6, **kw):
    fig, axes = plt.subplots(1, ncols, figsize=(width, height), squeeze=False, **kw)
    fig.suptitle(f"{title}\n{subtitle}", fontsize=10)
    return fig, axes[0]


# ----------------------------------------------------------------------------- plots
def plot_curve_with_eval(step, evl, key, w, title, out, written, ylabel, scale=1.0, name=None):
    """loss / accuracy: faint raw per-step values, a running mean, eval markers."""
    have_step = key in step and "step" in step and len(step["step"])
    have_eval = key in evl and "step" in evl and len(evl["step"])
    if not have_step and not have_eval:
        print(f"plot_metrics: note: no '{key}' column, {name or key}.png skipped")
        return
    fig, (ax,) = new_figure(title, f"{ylabel.split(' (')[0]} per step and at evaluation")
    if have_step:
        x, y = step["step"], step[key] * scale
        ax.plot(x, y, color="#4c72b0", lw=0.7, alpha=0.3, label="train (per step)")
        ax.plot(x, running_mean(y, w), color="#4c72b0", lw=1.8, label=f"train (mean of last {w} steps)")
        mark_epochs(ax, step)
    if have_eval:
        ex, ey = evl["step"], evl[key] * scale
        ax.plot(ex, ey, "o-", color="#c44e52", ms=6, lw=1.2, label="eval (test set)")
        for a, b in zip(ex[-1:], ey[-1:]):
            label = f"{b:.4g}" + ("%" if scale == 100.0 else "")
            ax.annotate(label, (a, b), textcoords="offset points", xytext=(-6, 8), ha="right", fontsize=8,
                        color="#c44e52")
    step_axis(ax)
    ax.set_ylabel(ylabel)
    if scale == 100.0:
        ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    finish(fig, os.path.join(out, f"{name or key}.png"), written)


def plot_firing_rate(step, step_fr, evl, eval_fr, w, title, out, written):
    if step_fr is None and eval_fr is None:
        print("plot_metrics: note: no firing_rate dataset, firing_rate.png skipped")
        return
    panels = (step_fr is not None) + (eval_fr is not None)
    n_layers = len((step_fr or eval_fr)[1])
    many = n_layers > 8  # then the bars (named, same colours) are the legend, drawn horizontally
    height = 4.8 if not many else max(4.8, 1.6 + 0.26 * n_layers)
    if many and eval_fr is None:
        height += 0.22 * ((n_layers + 3) // 4)  # legend below the axes
    fig, axes = new_figure(title, "firing rate per neuron layer (spikes / (T·N·neurons))", ncols=panels,
                           width=6.0 * panels + 1.0, height=height)
    colors = plt.get_cmap("tab10" if n_layers <= 10 else "tab20")
    col = 0
    if step_fr is not None:
        ax = axes[col]
        col += 1
        rates, names = step_fr
        x = step["step"]
        for j, n in enumerate(names):
            ax.plot(x, running_mean(rates[:, j], w), color=colors(j % colors.N), lw=1.5, label=n)
        if eval_fr is not None and len(evl.get("step", [])):
            er, _ = eval_fr
            for j in range(min(er.shape[1], len(names))):
                ax.plot(evl["step"], er[:, j], "o", color=colors(j % colors.N), ms=6, mec="k", mew=0.6)
            ax.plot([], [], "o", color="w", mec="k", mew=0.6, label="eval (markers)")
        mark_epochs(ax, step)
        ax.set_title(f"training, per step (mean of last {w} steps)", fontsize=9)
        step_axis(ax)
        ax.set_ylabel("firing rate")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if not many:
            ax.legend(fontsize=7, ncol=2 if len(names) > 6 else 1)
        elif eval_fr is None:
            ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.14))
        else:
            ax.set_title(f"training, per step (mean of last {w} steps)\ncolours as in the bars, evaluations as markers",
                         fontsize=9)
    if eval_fr is not None:
        ax = axes[col]
        rates, names = eval_fr
        last = rates[-1]
        pos = np.arange(len(names))
        bar_colors = [colors(j % colors.N) for j in range(len(names))]
        top = max(float(np.nanmax(last)) * 1.18 if len(last) else 1.0, 1e-3)
        if many:  # horizontal: first layer on top, names readable
            bars = ax.barh(pos, last, color=bar_colors)
            for b, v in zip(bars, last):
                ax.annotate(f"{v:.3f}", (v, b.get_y() + b.get_height() / 2), textcoords="offset points",
                            xytext=(2, 0), va="center", fontsize=7)
            ax.set_yticks(pos)
            ax.set_yticklabels(names, fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel("firing rate")
            ax.set_xlim(0, top)
            ax.grid(alpha=0.3, axis="x")
        else:
            bars = ax.bar(pos, last, color=bar_colors)
            for b, v in zip(bars, last):
                ax.annotate(f"{v:.3f}", (b.get_x() + b.get_width() / 2, v), textcoords="offset points",
                            xytext=(0, 2), ha="center", fontsize=8)
            ax.set_xticks(pos)
            ax.set_xticklabels(names, rotation=30 if len(names) > 4 else 0,
                               ha="right" if len(names) > 4 else "center", fontsize=8)
            ax.set_ylabel("firing rate")
            ax.set_ylim(0, top)
            ax.grid(alpha=0.3, axis="y")
        at = f" (step {int(evl['step'][-1])})" if len(evl.get("step", [])) else ""
        ax.set_title(f"last evaluation{at}", fontsize=9)
    finish(fig, os.path.join(out, "firing_rate.png"), written)


def plot_step_time(step, w, title, out, written):
    parts = [(k, lab, c) for k, lab, c in TIME_PARTS if k in step]
    if "time_ms" not in step or "step" not in step or not parts:
        print("plot_metrics: note: no time_ms / *_ms columns, step_time.png skipped")
        return
    x, total = step["step"], step["time_ms"]
    comps = [np.maximum(step[k], 0.0) for k, _, _ in parts]
    other = np.maximum(total - np.sum(comps, axis=0), 0.0)
    labels = [lab for _, lab, _ in parts] + ["other (reset, logging)"]
    colors = [c for _, _, c in parts] + [OTHER_COLOR]
    comps.append(other)

    # The first steps (allocation, oneDNN primitive creation) can be many times slower than
    # the rest: leave such leading warm-up steps out of the curves and the mean, and say so.
    skip = warmup_steps(total)
    note = ""
    if skip:
        shown = ", ".join(f"{int(x[i])} ({total[i]:.0f} ms)" for i in range(skip))
        note = f"warm-up step{'s' if skip > 1 else ''} {shown} left out"

    fig, axes = new_figure(title, "step time breakdown", ncols=2, width=11.0, height=5.0,
                           gridspec_kw={"width_ratios": [3, 1]})
    ax = axes[0]
    smooth = [running_mean(c[skip:], w) for c in comps]
    ax.stackplot(x[skip:], smooth, labels=labels, colors=colors, alpha=0.9)
    ax.set_ylim(0, float(np.nanmax(np.sum(smooth, axis=0))) * 1.35 if len(x) > skip else 1.0)
    if note:
        ax.text(0.99, 0.97, note, transform=ax.transAxes, ha="right", va="top", fontsize=8, color="0.3")
    step_axis(ax)
    ax.set_ylabel(f"ms per step (mean of last {w} steps)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=3)

    ax = axes[1]
    means = [float(np.nanmean(c[skip:])) for c in comps]
    whole = sum(means)
    bottom = 0.0
    for m, lab, c in zip(means, labels, colors):
        ax.bar([0], [m], bottom=bottom, color=c, width=0.6)
        if whole > 0 and m / whole >= 0.04:
            ax.text(0, bottom + m / 2, f"{m:.1f} ms\n{100 * m / whole:.0f}%", ha="center", va="center", fontsize=8)
        bottom += m
    ax.set_xticks([0])
    ax.set_xticklabels([f"mean of steps {int(x[skip])}–{int(x[-1])}"], fontsize=8)
    ax.set_ylabel("ms per step")
    ax.set_title(f"{whole:.1f} ms/step", fontsize=9)
    ax.set_xlim(-0.6, 0.6)
    ax.grid(alpha=0.3, axis="y")
    finish(fig, os.path.join(out, "step_time.png"), written)


def plot_lr(step, title, out, written):
    if "lr" not in step or "step" not in step:
        print("plot_metrics: note: no lr column, lr.png skipped")
        return
    fig, (ax,) = new_figure(title, "learning rate (the value each step used)", height=4.0)
    x, lr = step["step"], step["lr"]
    ax.plot(x, lr, color="#55a868", lw=1.6, drawstyle="steps-post")
    positive = lr[lr > 0]
    # A step schedule (few distinct values spanning decades) reads best on a log axis;
    # warm-up and cosine curves, which run to 0, on a linear one.
    if len(positive) and positive.max() / positive.min() > 100 and len(np.unique(positive)) <= 12:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, max(float(np.nanmax(lr)) * 1.1, 1e-12))
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    mark_epochs(ax, step)
    step_axis(ax)
    ax.set_ylabel("lr")
    ax.grid(alpha=0.3)
    finish(fig, os.path.join(out, "lr.png"), written)


def plot_throughput(step, w, title, out, written):
    if "samples_per_s" not in step or "step" not in step:
        print("plot_metrics: note: no samples_per_s column, throughput.png skipped")
        return
    fig, (ax,) = new_figure(title, "throughput and memory", height=4.2)
    x = step["step"]
    sps = step["samples_per_s"]
    skip = warmup_steps(step["time_ms"]) if "time_ms" in step else 0  # keep warm-up out of the mean
    ax.plot(x, sps, color="#4c72b0", lw=0.7, alpha=0.3, label="samples/s (per step)")
    ax.plot(x[skip:], running_mean(sps[skip:], w), color="#4c72b0", lw=1.8,
            label=f"samples/s (mean of last {w} steps)")
    step_axis(ax)
    ax.set_ylabel("samples / s", color="#4c72b0")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    mem = [(k, lab, c, ls) for k, lab, c, ls in [("peak_mem_mb", "peak tensor memory (MiB)", "#c44e52", "-"),
                                                 ("peak_rss_mb", "peak RSS (MiB)", "#8172b3", "--")] if k in step]
    if mem:
        ax2 = ax.twinx()
        for k, lab, c, ls in mem:
            ax2.plot(x, step[k], color=c, lw=1.4, ls=ls, label=lab)
        ax2.set_ylabel("MiB")
        ax2.set_ylim(bottom=0)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, fontsize=8, loc="lower right")
    finish(fig, os.path.join(out, "throughput.png"), written)


# ----------------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Plot a spikemesh run's metrics.h5 (loss, accuracy, firing rates, step time, lr) as PNGs.")
    ap.add_argument("run_dir", metavar="RUN_DIR", help="run directory (output/<run>) holding metrics.h5")
    ap.add_argument("--out", metavar="DIR", help="where to write the PNGs (default: RUN_DIR/plots)")
    ap.add_argument("--smooth", metavar="N", type=int, default=0,
                    help="running-mean window in steps (default: about 1/40 of the run, 5..200)")
    args = ap.parse_args(argv)

    run_dir = args.run_dir
    if os.path.isfile(run_dir) and run_dir.endswith(".h5"):  # metrics.h5 given directly
        run_dir = os.path.dirname(run_dir) or "."
    if not os.path.isdir(run_dir):
        fail(f"{args.run_dir}: no such run directory (expected output/<run>, made by `spikemesh train`)")
    path = os.path.join(run_dir, "metrics.h5")
    if not os.path.isfile(path):
        fail(f"{path}: not found — {run_dir} is not a spikemesh run directory, or its run has not started "
             "training yet")
    try:
        with h5py.File(path, "r") as f:
            step, step_fr = read_group(f, "step")
            evl, eval_fr = read_group(f, "eval")
    except OSError as e:
        fail(f"{path}: cannot read as HDF5 ({e})")
    n = len(step.get("step", []))
    if n == 0 and len(evl.get("step", [])) == 0:
        fail(f"{path}: no rows yet (a run flushes its metrics every 20 steps, at evaluations and checkpoints)", 1)

    w = args.smooth if args.smooth > 0 else int(min(200, max(5, round(n / 40))))
    w = max(1, min(w, max(n, 1)))
    out = args.out or os.path.join(run_dir, "plots")
    os.makedirs(out, exist_ok=True)
    title = run_title(run_dir)

    written = []
    plot_curve_with_eval(step, evl, "loss", w, title, out, written, "loss")
    plot_curve_with_eval(step, evl, "accuracy", w, title, out, written, "accuracy (%)", scale=100.0)
    plot_firing_rate(step, step_fr, evl, eval_fr, w, title, out, written)
    plot_step_time(step, w, title, out, written)
    plot_lr(step, title, out, written)
    plot_throughput(step, w, title, out, written)
    ev = len(evl.get("step", []))
    print(f"plot_metrics: {path}: {n} steps, {ev} evaluation{'s' if ev != 1 else ''}; wrote {len(written)} plots:")
    for p in written:
        print(f"  {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
