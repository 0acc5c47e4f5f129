#!/usr/bin/python3
"""report.py — `make bench`: spikemesh and its peers on one model, side by side, in one command.

Runs every system of SYSTEMS on the same configuration (model, batch, T, steps, warm-up, CPU
threads, fp32), `--rounds` times interleaved (round r starts at system r, so no system always
runs first or last on this shared, noisy machine), and writes into --out (output/bench/):
  records.jsonl  every run's benchmark record, plus `system` and `round`
  report.md      medians over the rounds (samples/s, step, phases, peak RSS), ratios of spikemesh
                 to every peer, the project's targets, versions, the command; failures by name
  report.png     bar chart: samples/s and peak RSS per system (median, min-max whiskers)
  multirank.md   (bench/multirank.sh, when the venv exists) two-rank trajectories, included
A system that cannot run (no venv, an import error, a crash, a timeout) is reported as such
with the reason, never as a number. Exit status: 0 when spikemesh and at least one peer ran.
Runs with Debian's /usr/bin/python3 (matplotlib); the current-torch peers run in .venv-bench/.
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the venv of `make bench-deps` (BENCH_VENV moves it, as for scripts/bench_deps.sh)
VENV = os.path.abspath(os.path.join(REPO, os.environ.get("BENCH_VENV", ".venv-bench")))
VENV_PY = os.path.join(VENV, "bin", "python")
DEBIAN_PY = "/usr/bin/python3"


class System:
    """One benchmarked configuration: a label, the interpreter (None for spikemesh), the script
    and its extra flags, and what it needs."""

    def __init__(self, key, label, python, script, extra=(), needs_venv=False, env=None):
        self.key, self.label, self.python, self.script = key, label, python, script
        self.extra, self.needs_venv, self.env = list(extra), needs_venv, dict(env or {})


SYSTEMS = [
    System("spikemesh", "spikemesh", None, None),
    # the kernels before the spike kernels: every convolution dense (oneDNN), batch norm and neuron
    # unfused — the baseline of the speed-up
    System("spikemesh_dense", "spikemesh, --conv-algo dense, SPIKEMESH_FUSE=0", None, None, ["--conv-algo", "dense"],
           env={"SPIKEMESH_FUSE": "0"}),
    System("sj", "SpikingJelly, eager", VENV_PY, "bench/sj_bench.py", ["--no-compile"], True),
    System("sj_compile", "SpikingJelly + torch.compile", VENV_PY, "bench/sj_bench.py", ["--compile"], True),
    System("torch", "PyTorch twin, eager", VENV_PY, "bench/torch_bench.py", ["--no-compile"], True),
    System("torch_compile", "PyTorch twin + torch.compile", VENV_PY, "bench/torch_bench.py", ["--compile"], True),
    System("torch_debian", "PyTorch twin, Debian torch, eager", DEBIAN_PY, "bench/torch_bench.py",
           ["--no-compile"]),
]
SJ_KEYS = ("sj", "sj_compile")

# --isa: the environment that holds every system to one instruction set. oneDNN (spikemesh's
# and PyTorch's) reads ONEDNN_MAX_CPU_ISA, spikemesh's own kernels SPIKEMESH_CPU_AVX512,
# PyTorch's kernels and torch.compile's choice of vector code ATEN_CPU_CAPABILITY, the compiler
# flags of the code torch.compile generates TORCHINDUCTOR_CPP_MARCH (else -march=native), MKL
# MKL_ENABLE_INSTRUCTIONS, OpenBLAS (Debian's torch) OPENBLAS_CORETYPE. "native" removes them
# all from the inherited environment.
ISA_ENV = {
    "native": {},
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "SPIKEMESH_CPU_AVX512": "0", "ATEN_CPU_CAPABILITY": "avx2",
             "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "OPENBLAS_CORETYPE": "Haswell"},
}
ISA_VARIABLES = sorted({k for env in ISA_ENV.values() for k in env})


def isa_environment(isa):
    """os.environ with the variables of ISA_ENV[isa] and none of the other instruction-set ones."""
    env = {k: v for k, v in os.environ.items() if k not in ISA_VARIABLES}
    env.update(ISA_ENV[isa])
    return env


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default="cifar10dvs_vgg")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--T", type=int, default=10)
    ap.add_argument("--image-size", type=int, help="spikformer_*: input image size (default: 224)")
    ap.add_argument("--num-classes", type=int, help="spikformer_*: classes (default: 1000)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per run (compilation happens here)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every system")
    ap.add_argument("--systems", default=",".join(s.key for s in SYSTEMS),
                    help="comma-separated subset of: " + ", ".join(s.key for s in SYSTEMS))
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per run before it counts as failed")
    ap.add_argument("--multirank", action=argparse.BooleanOptionalAction, default=True,
                    help="also run bench/multirank.sh (two-rank trajectories vs SpikingJelly's helpers)")
    ap.add_argument("--isa", choices=sorted(ISA_ENV), default="native",
                    help="instruction set every system may use: native (all the CPU has) | avx2 (AVX-512 off "
                         "for all alike: spikemesh's own kernels, oneDNN in both, PyTorch's kernels, "
                         "torch.compile's generated code, MKL and OpenBLAS; an AVX2 machine's code paths on "
                         "this CPU; the variables are in ISA_ENV and bench/README.md)")
    ap.add_argument("--spikemesh", default=os.path.join(REPO, "build", "bin", "spikemesh"))
    ap.add_argument("--out", default=os.path.join(REPO, "output", "bench"))
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.systems.split(",") if k.strip()]
    known = {s.key: s for s in SYSTEMS}
    bad = [k for k in keys if k not in known]
    if bad:
        ap.error(f"--systems: unknown {bad}; choices: {list(known)}")
    args.systems = [known[k] for k in keys]
    for name in ("batch_size", "T", "steps", "threads", "rounds", "timeout"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    return args


# ---------------------------------------------------------------------------- running
def command_of(system, args, log):
    common = ["--model", args.model, "--batch-size", str(args.batch_size), "--T", str(args.T),
              "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads),
              "--result-log", log]
    for flag, value in (("--image-size", args.image_size), ("--num-classes", args.num_classes)):
        if value is not None:
            common += [flag, str(value)]
    if system.python is None:
        return [args.spikemesh, "bench", *common, "--device", "cpu", "--precision", "fp32", *system.extra]
    return [system.python, os.path.join(REPO, system.script), *common, "--device", "cpu",
            "--precision", "fp32", *system.extra]


def unavailable_reason(system, args):
    if system.python is None:
        return None if os.access(args.spikemesh, os.X_OK) else f"{args.spikemesh} not built (run make)"
    if system.needs_venv and not os.access(system.python, os.X_OK):
        return f"not installed: {os.path.relpath(VENV, REPO)}/ is missing (run `make bench-deps`)"
    if not os.access(system.python, os.X_OK):
        return f"{system.python} not found"
    return None


def run_once(system, args, env):
    """One run -> (record or None, failure text or None, wall seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "record.jsonl")
        cmd = command_of(system, args, log)
        t0 = time.time()
        try:
            p = subprocess.run(cmd, cwd=REPO, env={**env, **system.env}, capture_output=True, text=True,
                               timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {args.timeout} s", time.time() - t0
        wall = time.time() - t0
        if p.returncode != 0 or not os.path.exists(log):
            lines = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
            why = lines[-1] if lines else "no output"
            return None, f"exit {p.returncode}: {why}", wall
        with open(log) as f:
            return json.loads(f.read().splitlines()[-1]), None, wall


def spikemesh_version(binary):
    """First line of `spikemesh --version` (e.g. "spikemesh 0.1.0") plus the git commit."""
    try:
        v = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
        git = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
        return (v.splitlines()[0] if v else "spikemesh") + (f" ({git})" if git else "")
    except (OSError, subprocess.TimeoutExpired):
        return "spikemesh"


def run_all(args, out_dir):
    env = dict(isa_environment(args.isa), OMP_NUM_THREADS=str(args.threads), PYTHONDONTWRITEBYTECODE="1")
    results = {s.key: dict(system=s, records=[], failures=[], skipped=None) for s in args.systems}
    for s in args.systems:
        results[s.key]["skipped"] = unavailable_reason(s, args)
    runnable = [s for s in args.systems if results[s.key]["skipped"] is None]
    records_path = os.path.join(out_dir, "records.jsonl")
    n = len(runnable)
    for r in range(args.rounds):
        order = runnable[r % n:] + runnable[:r % n] if n else []
        for s in order:
            res = results[s.key]
            if len(res["failures"]) > 0 and not res["records"]:
                continue  # failed every time so far: do not spend the machine on it again
            print(f"[round {r + 1}/{args.rounds}] {s.label} ...", flush=True)
            rec, failure, wall = run_once(s, args, env)
            if rec is None:
                res["failures"].append(failure)
                print(f"    failed ({wall:.0f} s): {failure}", flush=True)
                continue
            rec.update(system=s.key, system_label=s.label, round=r, isa=args.isa)
            if s.python is None:
                rec["spikemesh_version"] = spikemesh_version(args.spikemesh)
            res["records"].append(rec)
            with open(records_path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(f"    {rec['global_throughput_sps']:.2f} samples/s, step {rec['step_latency_ms']:.0f} ms, "
                  f"peak RSS {rec['peak_rss_mb']:.0f} MB ({wall:.0f} s)", flush=True)
    return results


# ---------------------------------------------------------------------------- summarising
def med(recs, field):
    vals = [r[field] for r in recs if field in r]
    return (statistics.median(vals), min(vals), max(vals)) if vals else None


def summary_of(res):
    recs = res["records"]
    if not recs:
        return None
    return {f: med(recs, f) for f in ("global_throughput_sps", "step_latency_ms", "forward_ms",
                                      "backward_ms", "optimizer_ms", "peak_rss_mb", "warmup_s")}


def status_of(res):
    if res["skipped"]:
        return res["skipped"]
    if not res["records"]:
        return "failed: " + res["failures"][-1]
    ok = len(res["records"])
    text = f"{ok} run{'s' if ok > 1 else ''}"
    if res["failures"]:
        text += f", {len(res['failures'])} failed ({res['failures'][-1]})"
    return text


def version_of(res):
    if not res["records"]:
        return "-"
    r = res["records"][-1]
    if r.get("backend") == "spikingjelly":
        return f"spikingjelly {r.get('spikingjelly_version', '?')}, torch {r.get('torch_version', '?')}"
    if "torch_version" in r:
        return f"torch {r['torch_version']}"
    return r.get("spikemesh_version", "spikemesh")


def ratio_text(a, b):
    return f"{a / b:.2f}×" if a and b else "-"


def write_report(args, results, out_dir, multirank_md, command):
    sm = summary_of(results["spikemesh"]) if "spikemesh" in results else None
    size = f", image {args.image_size}" if args.image_size else ""
    lines = [f"# spikemesh vs its peers: `{args.model}`{size}, batch {args.batch_size}, T {args.T}, "
             f"fp32, CPU, {args.threads} threads", "",
             f"Command: `{command}`  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; host {platform.node()}, "
             f"{cpu_model()}, {os.cpu_count()} cores; load average at the end "
             f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}.  ",
             f"Instruction set: {isa_text(args.isa)}.  ",
             f"Protocol: each run = {args.warmup} warm-up + {args.steps} timed training steps on one fixed "
             f"synthetic batch (Adam lr 1e-3, the model's dropout); {args.rounds} interleaved rounds; figures are "
             "medians over the rounds of each run's median step (min–max over rounds in brackets). "
             "Peak memory is the process's peak RSS (MiB), which includes each runtime's fixed cost.", "",
             "| system | version | samples/s | step ms | forward / backward / optimizer ms | peak RSS MB "
             "| spikemesh speed-up | spikemesh RSS ratio | runs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in args.systems:
        res = results[s.key]
        st = summary_of(res)
        if st is None:
            lines.append(f"| {s.label} | - | – | – | – | – | – | – | **{status_of(res)}** |")
            continue
        sps, step, rss = st["global_throughput_sps"], st["step_latency_ms"], st["peak_rss_mb"]
        phases = " / ".join(f"{st[f][0]:.0f}" for f in ("forward_ms", "backward_ms", "optimizer_ms"))
        speed = ratio_text(sm["global_throughput_sps"][0], sps[0]) if sm and s.key != "spikemesh" else "-"
        mem = ratio_text(sm["peak_rss_mb"][0], rss[0]) if sm and s.key != "spikemesh" else "-"
        lines.append(f"| {s.label} | {version_of(res)} | {sps[0]:.2f} ({sps[1]:.2f}–{sps[2]:.2f}) | "
                     f"{step[0]:.0f} | {phases} | {rss[0]:.0f} | {speed} | {mem} | {status_of(res)} |")
    lines += ["", "Speed-up = spikemesh samples/s ÷ the system's; RSS ratio = spikemesh peak RSS ÷ the "
              "system's (above 1 and below 1 favour spikemesh). Compiled systems compile during the "
              "warm-up, which is not timed (warm-up seconds are in records.jsonl as `warmup_s`).", ""]
    lines += targets_section(results, sm)
    if multirank_md:
        lines += ["", multirank_md.strip(), ""]
    lines += ["", "Files: `records.jsonl` (every run's record), `report.png` (the chart).", ""]
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write("\n".join(lines))


def targets_section(results, sm):
    """The project's targets (recorded, not asserted): >= 2.0x the samples/s of the best
    SpikingJelly configuration (1.5x before) and <= 0.5x its peak RSS; >= 1.7x the
    samples/s of spikemesh's previous kernels (--conv-algo dense, SPIKEMESH_FUSE=0) at no more peak RSS."""
    out = ["## Targets (recorded, not asserted)", ""]
    peers = [(k, summary_of(results[k])) for k in SJ_KEYS if k in results]
    peers = [(k, st) for k, st in peers if st]
    if not sm or not peers:
        out.append("Not evaluated: spikemesh or every SpikingJelly configuration did not run (see the table).")
        return out
    best_key, best = max(peers, key=lambda kv: kv[1]["global_throughput_sps"][0])
    label = results[best_key]["system"].label
    speed = sm["global_throughput_sps"][0] / best["global_throughput_sps"][0]
    mem = sm["peak_rss_mb"][0] / best["peak_rss_mb"][0]
    out.append(f"Best SpikingJelly configuration by samples/s: **{label}**.")
    out.append(f"- speed: spikemesh {sm['global_throughput_sps'][0]:.2f} vs {best['global_throughput_sps'][0]:.2f} "
               f"samples/s = **{speed:.2f}×** (target ≥ 2.0×: {'met' if speed >= 2.0 else 'not met'})")
    out.append(f"- memory: spikemesh {sm['peak_rss_mb'][0]:.0f} vs {best['peak_rss_mb'][0]:.0f} MB peak RSS = "
               f"**{mem:.2f}×** (target ≤ 0.5×: {'met' if mem <= 0.5 else 'not met'})")
    dense = summary_of(results["spikemesh_dense"]) if "spikemesh_dense" in results else None
    if dense:
        gain = sm["global_throughput_sps"][0] / dense["global_throughput_sps"][0]
        rss = sm["peak_rss_mb"][0] / dense["peak_rss_mb"][0]
        out.append(f"- kernels: spikemesh {sm['global_throughput_sps'][0]:.2f} vs {dense['global_throughput_sps'][0]:.2f} "
                   f"samples/s with `--conv-algo dense` and `SPIKEMESH_FUSE=0` = **{gain:.2f}×** (target ≥ 1.7×: "
                   f"{'met' if gain >= 1.7 else 'not met'}), peak RSS {rss:.2f}× (target ≤ 1: {'met' if rss <= 1 else 'not met'})")
    return out


def isa_text(isa):
    if isa == "native":
        return "native (every system uses all the CPU offers)"
    return isa + " for every system (" + ", ".join(f"{k}={v}" for k, v in ISA_ENV[isa].items()) + ")"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def draw_chart(args, results, path):
    """Two horizontal bar panels (samples/s, peak RSS), median with min-max whiskers; a system
    without numbers gets its status written where its bar would be. Returns an error or None."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no chart: matplotlib is not importable ({e}); install python3-matplotlib"
    labels = [s.label for s in args.systems]
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.6 * len(labels) + 1.8), sharey=True)
    for ax, field, title in ((axes[0], "global_throughput_sps", "samples/s (higher is better)"),
                             (axes[1], "peak_rss_mb", "peak RSS, MiB (lower is better)")):
        for i, s in enumerate(args.systems):
            st = summary_of(results[s.key])
            color = "#1f77b4" if s.key == "spikemesh" else ("#ff7f0e" if s.key in SJ_KEYS else "#7f7f7f")
            if st is None:
                ax.text(0, i, "  " + status_of(results[s.key])[:60], va="center", fontsize=8, color="#b00")
                continue
            m, lo, hi = st[field]
            ax.barh(i, m, color=color, xerr=[[m - lo], [hi - m]], capsize=3)
            ax.text(hi, i, f" {m:.2f}" if field == "global_throughput_sps" else f" {m:.0f}",
                    va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=9)
        ax.margins(x=0.25)
    axes[0].invert_yaxis()  # shared y axis: inverting once puts the first system on top
    fig.suptitle(f"{args.model}, batch {args.batch_size}, T {args.T}, fp32, CPU {args.threads} threads; "
                 f"median of {args.rounds} interleaved runs", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def run_multirank(args, out_dir):
    script = os.path.join(REPO, "bench", "multirank.sh")
    if not args.multirank:
        return None
    if not os.path.exists(script):
        return "## Two-rank trajectories\n\nNot run: bench/multirank.sh is missing."
    print("multi-rank trajectories (bench/multirank.sh) ...", flush=True)
    try:
        p = subprocess.run(["bash", script, "--out", out_dir], cwd=REPO, env=isa_environment(args.isa),
                           timeout=3 * args.timeout)
        failed = f"bench/multirank.sh exited {p.returncode}" if p.returncode else None
    except subprocess.TimeoutExpired:
        failed = "bench/multirank.sh timed out"
    md = os.path.join(out_dir, "multirank.md")
    text = open(md).read() if os.path.exists(md) else "## Two-rank trajectories\n\nNo result."
    return text + (f"\n\n**{failed}**\n" if failed else "")


def main(argv=None):
    args = parse_args(argv)
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    if os.path.exists(os.path.join(out_dir, "records.jsonl")):
        os.replace(os.path.join(out_dir, "records.jsonl"), os.path.join(out_dir, "records.previous.jsonl"))
    command = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], REPO)] + (argv or sys.argv[1:]))
    if not os.access(VENV_PY, os.X_OK):
        print(f"bench: {os.path.relpath(VENV, REPO)}/ is missing, so SpikingJelly and the current torch are skipped; "
              "create it with `make bench-deps` (a few GB from PyPI). Running the Debian-PyTorch comparison.",
              flush=True)
    results = run_all(args, out_dir)
    multirank_md = run_multirank(args, out_dir)
    write_report(args, results, out_dir, multirank_md, command)
    err = draw_chart(args, results, os.path.join(out_dir, "report.png"))
    with open(os.path.join(out_dir, "report.md")) as f:
        print(f.read())
    if err:
        print(err)
    print(f"wrote {os.path.relpath(out_dir, REPO)}/report.md" + ("" if err else " and report.png"))
    sm_ok = "spikemesh" in results and results["spikemesh"]["records"]
    peer_ok = any(results[s.key]["records"] for s in args.systems if s.key != "spikemesh")
    return 0 if sm_ok and peer_ok else 1


if __name__ == "__main__":
    sys.exit(main())
