#!/usr/bin/env python3
"""planner_check.py — the half of bench/planner_check.sh that needs Python.

  planner_check.py --bench-args PRED.jsonl --batch G   one line of `spikemesh bench` flags per
                                                        predicted layout (batch per dp replica)
  planner_check.py --report DIR --batch G               joins DIR/pred_*.jsonl with
                                                        DIR/measured_*.jsonl (bench records):
                                                        DIR/table.md, DIR/summary.json and
                                                        DIR/planner_check.png (predicted vs measured)

The join key is the layout (mode, mesh, optimizer sharding, pp schedule, virtual stages,
microbatches, memopt level). Errors are predicted / measured - 1. A speed pick is "within 5%"
when its measured step is at most 1.05x the fastest measured layout of that model and world;
a memory pick when its measured peak is at most 1.05x the smallest measured peak.
"""
import argparse
import glob
import json
import os
import sys


def key_of_prediction(p):
    pp = p["mesh_shape"][2] > 1
    return (p["mode"], tuple(p["mesh_shape"]), p["optimizer_sharding"] if p["mode"] not in ("fsdp", "fsdp_tp") else "none",
            p["pp_schedule"] if pp else "", p["pp_virtual_stages"] if pp else 1, p["pp_microbatches"] if pp else 1,
            p["memopt_level"])


def key_of_record(r):
    mesh = tuple(r["mesh_shape"]) if r.get("mesh_shape") else (1, 1, 1)
    mesh = tuple(list(mesh) + [1] * (3 - len(mesh)))
    pp = mesh[2] > 1
    mode = r["mode"]
    sharding = r.get("optimizer_sharding", "none") if mode not in ("fsdp", "fsdp_tp") else "none"
    return (mode, mesh, sharding, r.get("pp_schedule", "") if pp else "", r.get("pp_virtual_stages", 1) if pp else 1,
            r.get("pp_microbatches", 1) if pp else 1, r.get("memopt_level", 0))


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def bench_args(pred_path, batch):
    for p in read_jsonl(pred_path):
        dp, tp, pp = p["mesh_shape"]
        a = ["--distributed-mode", p["mode"], "--mesh-shape", str(dp), str(tp), str(pp), "--batch-size", str(batch // dp)]
        if p["optimizer_sharding"] != "none" and p["mode"] not in ("fsdp", "fsdp_tp"):
            a += ["--optimizer-sharding", p["optimizer_sharding"]]
        if pp > 1:
            a += ["--pp-schedule", p["pp_schedule"], "--pp-virtual-stages", str(p["pp_virtual_stages"]),
                  "--pp-microbatches", str(p["pp_microbatches"])]
            if p.get("pp_layout"):  # the partition the prediction is for, as `auto` runs it
                a += ["--pp-layout", p["pp_layout"]]
        a += ["--memopt-level", str(p["memopt_level"])]
        print(" ".join(a))


def report(out_dir, batch):
    rows, picks = [], []
    for pred_path in sorted(glob.glob(os.path.join(out_dir, "pred_*_w*.jsonl"))):
        base = os.path.basename(pred_path)[len("pred_"):-len(".jsonl")]
        if base.endswith("_memory"):
            continue
        name, w = base.rsplit("_w", 1)
        meas_path = os.path.join(out_dir, "measured_%s_w%s.jsonl" % (name, w))
        if not os.path.exists(meas_path):
            continue
        measured = {}
        for r in read_jsonl(meas_path):
            measured[key_of_record(r)] = r
        preds = read_jsonl(pred_path)
        mem_path = os.path.join(out_dir, "pred_%s_w%s_memory.jsonl" % (name, w))
        mem_preds = read_jsonl(mem_path) if os.path.exists(mem_path) else []
        mem_chosen = [p["label"] for p in mem_preds if p["chosen"]]
        mem_rule = [p["label"] for p in mem_preds if p["spikingjelly_rule"]]
        group = []
        for p in preds:
            r = measured.get(key_of_prediction(p))
            if r is None:
                continue
            row = dict(model=name, world=int(w), label=p["label"], pred_ms=p["predicted_step_ms"],
                       meas_ms=r["step_latency_ms"], pred_mb=p["predicted_peak_mb"], meas_mb=r["peak_allocated_mb"],
                       speed_pick=p["chosen"], memory_pick=p["label"] in mem_chosen, sj_rule=p["spikingjelly_rule"],
                       sj_memory_rule=p["label"] in mem_rule)
            row["err_ms"] = row["pred_ms"] / row["meas_ms"] - 1
            row["err_mb"] = row["pred_mb"] / row["meas_mb"] - 1
            group.append(row)
        if not group:
            continue
        rows += group
        fastest = min(group, key=lambda x: x["meas_ms"])
        smallest = min(group, key=lambda x: x["meas_mb"])
        for kind, flag, best, field in (("speed", "speed_pick", fastest, "meas_ms"),
                                        ("memory", "memory_pick", smallest, "meas_mb")):
            pick = [x for x in group if x[flag]]
            sj = [x for x in group if x["sj_rule" if kind == "speed" else "sj_memory_rule"]]
            picks.append(dict(model=name, world=int(w), prefer=kind, pick=pick[0]["label"] if pick else None,
                              pick_value=pick[0][field] if pick else None, best=best["label"], best_value=best[field],
                              ratio=pick[0][field] / best[field] if pick else None,
                              sj_rule=sj[0]["label"] if sj else None, sj_rule_value=sj[0][field] if sj else None))
    if not rows:
        sys.exit("planner_check: no prediction has a measurement in " + out_dir)
    n = len(rows)
    t_ok = sum(abs(r["err_ms"]) <= 0.15 for r in rows)
    m_ok = sum(abs(r["err_mb"]) <= 0.10 for r in rows)
    summary = dict(layouts=n, time_within_15pct=t_ok, memory_within_10pct=m_ok,
                   median_abs_time_err=sorted(abs(r["err_ms"]) for r in rows)[n // 2],
                   median_abs_memory_err=sorted(abs(r["err_mb"]) for r in rows)[n // 2], picks=picks)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    lines = ["| model | ranks | layout | predicted ms | measured ms | error | predicted MB | measured MB | error | pick |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        mark = ", ".join(k for k, v in (("speed", r["speed_pick"]), ("memory", r["memory_pick"]),
                                         ("SJ speed rule", r["sj_rule"]), ("SJ memory rule", r["sj_memory_rule"])) if v)
        lines.append("| %s | %d | %s | %.0f | %.0f | %+.1f%% | %.0f | %.0f | %+.1f%% | %s |" % (
            r["model"], r["world"], r["label"], r["pred_ms"], r["meas_ms"], 100 * r["err_ms"], r["pred_mb"],
            r["meas_mb"], 100 * r["err_mb"], mark))
    lines.append("")
    lines.append("%d layouts: step time within 15%% for %d (%.0f%%), median |error| %.1f%%; peak memory within 10%% for "
                 "%d (%.0f%%), median |error| %.1f%%." % (n, t_ok, 100.0 * t_ok / n, 100 * summary["median_abs_time_err"],
                                                        m_ok, 100.0 * m_ok / n, 100 * summary["median_abs_memory_err"]))
    lines.append("")
    lines.append("| model | ranks | --prefer | pick | measured | best measured | pick / best | SpikingJelly's rule |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in picks:
        unit = "ms" if p["prefer"] == "speed" else "MB"
        sj = "%s: %.0f %s" % (p["sj_rule"], p["sj_rule_value"], unit) if p["sj_rule"] else ""
        lines.append("| %s | %d | %s | %s | %s | %s: %.0f %s | %s | %s |" % (
            p["model"], p["world"], p["prefer"], p["pick"] or "-",
            "%.0f %s" % (p["pick_value"], unit) if p["pick_value"] is not None else "not measured",
            p["best"], p["best_value"], unit, "%.3f" % p["ratio"] if p["ratio"] else "-", sj))
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("planner_check: matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, (p, m, unit, band) in zip(axes, (("pred_ms", "meas_ms", "step time (ms)", 0.15),
                                             ("pred_mb", "meas_mb", "peak memory per rank (MB)", 0.10))):
        for (model, world), marker in zip(sorted({(r["model"], r["world"]) for r in rows}), "osD^v<>"):
            sel = [r for r in rows if r["model"] == model and r["world"] == world]
            ax.scatter([r[m] for r in sel], [r[p] for r in sel], marker=marker, label="%s, %d ranks" % (model, world))
        lo = min(min(r[p] for r in rows), min(r[m] for r in rows)) * 0.8
        hi = max(max(r[p] for r in rows), max(r[m] for r in rows)) * 1.2
        xs = [lo, hi]
        ax.plot(xs, xs, "k-", lw=1)
        ax.plot(xs, [x * (1 + band) for x in xs], "k--", lw=0.7)
        ax.plot(xs, [x * (1 - band) for x in xs], "k--", lw=0.7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured " + unit)
        ax.set_ylabel("predicted " + unit)
        ax.set_title("%s: ±%d%% dashed" % (unit.split(" (")[0], int(band * 100)))
        ax.legend(fontsize=7)
    fig.suptitle("spikemesh layout cost model vs measurement (%d layouts, global batch %d, CPU)" % (n, batch))
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "planner_check.png"), dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench-args", metavar="PRED.jsonl")
    ap.add_argument("--report", metavar="DIR")
    ap.add_argument("--batch", type=int, required=True, help="the global batch")
    a = ap.parse_args()
    if a.bench_args:
        bench_args(a.bench_args, a.batch)
    elif a.report:
        report(a.report, a.batch)
    else:
        ap.error("give --bench-args or --report")


if __name__ == "__main__":
    main()
