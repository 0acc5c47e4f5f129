#!/usr/bin/python3
"""plot_pipeline.py — Gantt chart of a pipeline-parallel run's pipeline.h5 (format: output/README.md).

    /usr/bin/python3 scripts/plot_pipeline.py RUN [--out FILE.png] [--step N]

RUN is a run directory holding pipeline.h5 (written by `spikemesh train` on a
pipeline-parallel run, see --pp-timeline-steps) or the path of a pipeline.h5 file. Writes one
PNG (default RUN_DIR/pipeline.png) with two panels on a common millisecond axis:
    top     the MEASURED timeline of one recorded step (default the last; --step N picks one)
    bottom  the SIMULATED timeline: the simulator's replay of the same schedule with the
            measured action costs
One row per pipeline rank (rank 0 on top); compute actions (F, B, W, BW) are bars coloured by
kind and labelled "<stage>,<microbatch>" where they are wide enough; transfers (SEND_F,
RECV_F, SEND_B, RECV_B) are thin light-grey bars (a RECV bar includes its wait). The title
gives the schedule, ranks, virtual stages, microbatches, layout and the measured (median over
the recorded steps, without the first) against the simulated bubble.
Only /usr/bin/python3 with Debian's python3-h5py, python3-numpy and python3-matplotlib (Agg
backend) is needed. Exit status: 0 when the PNG was written; 2 with a one-line message on
stderr when the file is missing, is not HDF5, is not a pipeline timeline, or lacks the step.
"""
import argparse
import os
import sys

# Read a file that another process may hold open (read-only access; spikemesh does not use SWMR).
os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import h5py  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import numpy as np  # noqa: E402

# Kind codes of pipeline.h5 (root attribute kind_codes): code -> (name, colour, is compute).
KINDS = {
    0: ("F", "#4c72b0", True),
    1: ("B", "#dd8452", True),
    2: ("W", "#55a868", True),
    3: ("BW", "#c44e52", True),
    4: ("SEND_F", "#c8c8c8", False),
    5: ("RECV_F", "#c8c8c8", False),
    6: ("SEND_B", "#c8c8c8", False),
    7: ("RECV_B", "#c8c8c8", False),
}
UNKNOWN = ("?", "#8c8c8c", True)
COLUMNS = ("step", "rank", "kind", "stage", "microbatch", "start", "end")
GROUPS = ("measured", "simulated", "steps", "costs")
COMPUTE_HEIGHT = 0.72  # bar heights in row units
TRANSFER_HEIGHT = 0.22


def fail(msg, code=2):
    print(f"plot_pipeline: error: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------- reading
def text_attr(attrs, name, default=""):
    v = attrs.get(name, default)
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.reshape(-1)[0]
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
    return str(v)


def num_attr(attrs, name, default=float("nan")):
    v = attrs.get(name)
    if v is None:
        return default
    try:
        return float(np.asarray(v).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return default


def read_table(f, path, group):
    """The seven columns of /measured or /simulated as a dict of equal-length numpy arrays."""
    g = f[group]
    missing = [c for c in COLUMNS if c not in g or not isinstance(g[c], h5py.Dataset)]
    if missing:
        fail(f"{path}: /{group} lacks dataset(s) {', '.join(missing)}; not a spikemesh pipeline timeline")
    t = {c: np.asarray(g[c][()]).reshape(-1) for c in COLUMNS}
    lengths = {len(v) for v in t.values()}
    if len(lengths) != 1:
        fail(f"{path}: the datasets of /{group} differ in length ({sorted(lengths)})")
    return t


def resolve(run):
    """(pipeline.h5 path, directory for the default output) from RUN."""
    if os.path.isdir(run):
        path = os.path.join(run, "pipeline.h5")
        if not os.path.isfile(path):
            fail(f"{run}: no pipeline.h5 in this directory (written by a pipeline-parallel "
                 "`spikemesh train` with --pp-timeline-steps > 0)")
        return path, run
    if not os.path.exists(run):
        fail(f"{run}: no such file or directory")
    if not os.path.isfile(run):
        fail(f"{run}: not a regular file")
    return run, os.path.dirname(os.path.abspath(run))


def load(path):
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        fail(f"{path}: cannot open as HDF5 ({str(e).splitlines()[0] if str(e) else 'not an HDF5 file'})")
    with f:
        missing = [g for g in GROUPS if g not in f or not isinstance(f[g], h5py.Group)]
        if missing:
            fail(f"{path}: not a spikemesh pipeline timeline (missing group(s) "
                 f"{', '.join('/' + g for g in missing)})")
        a = f.attrs
        meta = {
            "format": text_attr(a, "format"),
            "schedule": text_attr(a, "schedule", "?"),
            "ranks": int(num_attr(a, "ranks", 0)),
            "virtual_stages": int(num_attr(a, "virtual_stages", 1)),
            "microbatches": int(num_attr(a, "microbatches", 0)),
            "layout": text_attr(a, "layout", "?"),
            "measured_bubble": num_attr(a, "measured_bubble"),
            "simulated_bubble": num_attr(a, "simulated_bubble"),
        }
        measured = read_table(f, path, "measured")
        simulated = read_table(f, path, "simulated")
        s = f["steps"]
        if "step" not in s:
            fail(f"{path}: /steps lacks dataset step; not a spikemesh pipeline timeline")
        steps = np.asarray(s["step"][()]).reshape(-1).astype(np.int64)
        step_bubble = (np.asarray(s["measured_bubble"][()]).reshape(-1)
                       if "measured_bubble" in s else np.full(len(steps), np.nan))
        c = f["costs"]
        costs = {k: np.asarray(c[k][()]).reshape(-1) for k in ("f", "b", "w") if k in c}
        costs["comm"] = num_attr(c.attrs, "comm")
    if len(steps) == 0:  # fall back on the steps of the rows themselves
        steps = np.unique(measured["step"]).astype(np.int64)
    return meta, measured, simulated, steps, step_bubble, costs


# ----------------------------------------------------------------------------- drawing
def pct(x):
    return "n/a" if not np.isfinite(x) else f"{100.0 * x:.1f}%"


def bubble_of(t, ranks):
    """1 − Σ compute / (ranks · makespan) of one table (the definition pp_timeline.h uses)."""
    if len(t["start"]) == 0:
        return float("nan")
    span = t["end"].max() - t["start"].min()
    compute = np.isin(t["kind"], [0, 1, 2, 3])
    busy = float((t["end"][compute] - t["start"][compute]).sum())
    n = max(ranks, int(t["rank"].max()) + 1)
    return 1.0 - busy / (n * span) if span > 0 else float("nan")


def draw_panel(ax, t, ranks, xmax_ms, px_per_ms, title):
    """Bars of one timeline `t` on `ax`; returns the set of kind codes drawn."""
    start_ms = t["start"] * 1e3
    width_ms = np.maximum((t["end"] - t["start"]) * 1e3, 0.0)
    kinds = t["kind"].astype(int)
    compute = np.array([KINDS.get(k, UNKNOWN)[2] for k in kinds], dtype=bool)
    drawn = set()
    # Transfers first (under any compute bar that touches them), thin and grey.
    for code in sorted(set(kinds[~compute])):
        sel = (~compute) & (kinds == code)
        ax.barh(t["rank"][sel], width_ms[sel], left=start_ms[sel], height=TRANSFER_HEIGHT,
                color=KINDS[code][1], edgecolor="#9a9a9a", linewidth=0.3, zorder=2)
        drawn.add(code)
    for code in sorted(set(kinds[compute])):
        sel = compute & (kinds == code)
        ax.barh(t["rank"][sel], width_ms[sel], left=start_ms[sel], height=COMPUTE_HEIGHT,
                color=KINDS.get(code, UNKNOWN)[1], edgecolor="white", linewidth=0.6, zorder=3)
        drawn.add(code)
    # "<stage>,<microbatch>" inside compute bars wide enough for it (7 pt text).
    char_px = 7 * 0.62 * ax.figure.dpi / 72.0
    for i in np.flatnonzero(compute):
        label = f"{int(t['stage'][i])},{int(t['microbatch'][i])}"
        if width_ms[i] * px_per_ms >= char_px * len(label) + 4:
            ax.text(start_ms[i] + width_ms[i] / 2, t["rank"][i], label, ha="center", va="center",
                    fontsize=7, color="white", zorder=4, clip_on=True)
    ax.set_yticks(range(ranks))
    ax.set_yticklabels([f"rank {r}" for r in range(ranks)])
    ax.set_ylim(ranks - 0.5, -0.5)  # rank 0 on top
    ax.set_xlim(0, xmax_ms)
    ax.grid(axis="x", color="#e4e4e4", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    ax.set_title(title, fontsize=10, loc="left")
    return drawn


def costs_line(costs):
    parts = []
    for key, name in (("f", "F"), ("b", "B"), ("w", "W")):
        v = costs.get(key)
        if v is None or len(v) == 0:
            continue
        shown = " ".join(f"{1e3 * x:.2f}" for x in v[:16]) + (" …" if len(v) > 16 else "")
        parts.append(f"{name} [{shown}]")
    if np.isfinite(costs.get("comm", float("nan"))):
        parts.append(f"comm {1e3 * costs['comm']:.3f}")
    return ("simulator inputs, mean measured ms per logical stage: " + ", ".join(parts)) if parts else ""


def main():
    ap = argparse.ArgumentParser(
        prog="plot_pipeline.py",
        description="Draw a Gantt chart (PNG) of a pipeline-parallel run's pipeline.h5: the measured "
                    "timeline of one recorded step above the simulator's replay of the same schedule "
                    "with the measured action costs, one row per pipeline rank, x in milliseconds.",
        epilog="Example: /usr/bin/python3 scripts/plot_pipeline.py output/myrun --step 5. "
               "Exit status 0 on success, 2 with a one-line message when the file is missing, "
               "is not a pipeline timeline, or does not hold the requested step. "
               "File format: output/README.md (pipeline.h5).")
    ap.add_argument("run", metavar="RUN",
                    help="run directory holding pipeline.h5 (output/<run>), or the path of a pipeline.h5 file")
    ap.add_argument("--out", metavar="FILE.png",
                    help="output PNG (default: <run dir>/pipeline.png, the directory of the .h5 when a file is given)")
    ap.add_argument("--step", metavar="N", type=int,
                    help="global training step (1-based) to draw in the measured panel "
                         "(default: the last recorded step)")
    args = ap.parse_args()

    path, run_dir = resolve(args.run)
    meta, measured, simulated, steps, step_bubble, costs = load(path)
    if len(steps) == 0 or len(measured["step"]) == 0:
        fail(f"{path}: holds no recorded steps")
    available = ", ".join(str(int(s)) for s in steps)
    contiguous = len(steps) > 2 and np.array_equal(steps, np.arange(steps[0], steps[0] + len(steps)))
    recorded = f"{int(steps[0])}–{int(steps[-1])}" if contiguous else available
    step = int(steps[-1]) if args.step is None else args.step
    if step not in set(int(s) for s in steps) or not np.any(measured["step"] == step):
        fail(f"{path}: step {step} was not recorded; available steps: {available}")
    sel = measured["step"] == step
    m = {c: v[sel] for c, v in measured.items()}

    ranks = max(meta["ranks"], int(m["rank"].max()) + 1,
                int(simulated["rank"].max()) + 1 if len(simulated["rank"]) else 0)
    this_bubble = float(step_bubble[list(steps).index(step)]) if len(step_bubble) == len(steps) else float("nan")
    if not np.isfinite(this_bubble):
        this_bubble = bubble_of(m, ranks)
    m_bubble, s_bubble = meta["measured_bubble"], meta["simulated_bubble"]
    if not np.isfinite(s_bubble):
        s_bubble = bubble_of(simulated, ranks)

    m_span = 1e3 * (m["end"].max() - m["start"].min())
    s_span = 1e3 * (simulated["end"].max() - simulated["start"].min()) if len(simulated["end"]) else 0.0
    xmax = 1.02 * max(m["end"].max() * 1e3,
                      simulated["end"].max() * 1e3 if len(simulated["end"]) else 0.0, 1e-6)

    width_in = 15.0
    panel_in = max(1.5, 0.42 * ranks + 0.9)
    fig, (ax_m, ax_s) = plt.subplots(2, 1, figsize=(width_in, 2 * panel_in + 1.9), sharex=True)
    fig.subplots_adjust(left=0.07, right=0.985, top=1 - 0.95 / (2 * panel_in + 1.9),
                        bottom=0.85 / (2 * panel_in + 1.9), hspace=0.32)
    px_per_ms = (0.985 - 0.07) * width_in * fig.dpi / xmax

    drawn = draw_panel(ax_m, m, ranks, xmax, px_per_ms,
                       f"measured: step {step} (recorded: {recorded}) — {m_span:.2f} ms, bubble {pct(this_bubble)}")
    drawn |= draw_panel(ax_s, simulated, ranks, xmax, px_per_ms,
                        f"simulated: replay with the measured costs — {s_span:.2f} ms, bubble {pct(s_bubble)}")
    ax_s.set_xlabel("time since the step's earliest action (ms)")
    ax_m.tick_params(labelbottom=True)

    v = meta["virtual_stages"]
    fig.suptitle(f"pipeline schedule {meta['schedule']}: {ranks} rank{'s' * (ranks != 1)}, "
                 f"{v} virtual stage{'s' * (v != 1)}, {meta['microbatches']} microbatches, "
                 f"layout {meta['layout']} — measured bubble {pct(m_bubble)} vs simulated {pct(s_bubble)}",
                 fontsize=12)

    handles = []
    for code in (0, 1, 2, 3):
        if code in drawn:
            handles.append(Patch(facecolor=KINDS[code][1], label=KINDS[code][0]))
    if any(KINDS.get(c, UNKNOWN)[0] == "?" for c in drawn):
        handles.append(Patch(facecolor=UNKNOWN[1], label="unknown kind"))
    if any(c in drawn for c in (4, 5, 6, 7)):
        handles.append(Patch(facecolor=KINDS[4][1], edgecolor="#9a9a9a",
                             label="transfer (SEND_F/RECV_F/SEND_B/RECV_B)"))
    if handles:
        fig.legend(handles=handles, loc="lower right", ncol=len(handles), fontsize=8, frameon=False,
                   bbox_to_anchor=(0.985, 0.0))
    note = costs_line(costs)
    if note:
        fig.text(0.07, 0.012, note, fontsize=7, color="#555555", ha="left", va="bottom")

    out = args.out or os.path.join(run_dir, "pipeline.png")
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir):
        fail(f"{out}: directory {out_dir} does not exist")
    try:
        fig.savefig(out, dpi=fig.dpi)
    except OSError as e:
        fail(f"{out}: cannot write ({e})")
    plt.close(fig)

    print(f"wrote {out}")
    print(f"measured bubble {pct(m_bubble)} (median over the recorded steps; step {step}: {pct(this_bubble)})")
    print(f"simulated bubble {pct(s_bubble)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
