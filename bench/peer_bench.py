"""peer_bench.py — the timing harness shared by the PyTorch peers of `spikemesh bench`
(bench/torch_bench.py: a hand-written PyTorch twin; bench/sj_bench.py: SpikingJelly's layers).

Protocol (docs/semantics.md §7): one fixed synthetic batch, `warmup` untimed steps, then
`steps` timed training steps (forward + loss, backward, optimizer step + zero_grad), each phase
timed (CUDA events on GPU, perf_counter on CPU, a synchronize at the end of every step). The
record has the field names of spikemesh's benchmark records (include/spikemesh/io/bench_record.h)
so bench/compare.py and bench/report.py pair it with spikemesh's. Runs on any torch >= 1.13
(Debian's python3-torch as well as the current torch of .venv-bench/). MB means MiB.
"""
import argparse
import contextlib
import datetime
import json
import os
import resource
import socket
import statistics
import sys
import time

import torch


# ---------------------------------------------------------------------------- arguments
def add_common_args(ap, model_choices, default_model="cifar10dvs_vgg"):
    ap.add_argument("--model", choices=model_choices, default=default_model)
    ap.add_argument("--batch-size", type=int, default=8, help="samples per step")
    ap.add_argument("--T", type=int, default=10, help="time steps")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation, caches)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="bf16: forward and loss under torch.autocast(bfloat16); params stay fp32")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                    help="torch.compile the model (default: on for cuda, off for cpu)")
    ap.add_argument("--tf32", nargs="?", const="on", default="off", choices=("on", "off"),
                    help="cuda fp32: on lets cuDNN convolutions and cuBLAS matrix products use TF32 tensor "
                         "cores (torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32; "
                         "PyTorch's own default is TF32 convolutions); off (the default) is strict IEEE fp32, "
                         "as spikemesh's default. A bare --tf32 means on; the record's conv_fp32_precision and "
                         "matmul_fp32_precision say which ran")
    ap.add_argument("--no-tf32", dest="tf32", action="store_const", const="off", help="the same as --tf32 off")
    ap.add_argument("--image-size", type=int, default=224, help="spikformer_*: input image size")
    ap.add_argument("--num-classes", type=int, default=1000, help="spikformer_*: classes")
    ap.add_argument("--optimizer", choices=("adam",), default="adam")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=None,
                    help="cifar10dvs_vgg dropout probability (default: the model spec's, 0.25)")
    ap.add_argument("--benchmark-regime", default="throughput_weak_scaling",
                    choices=("throughput_weak_scaling", "latency_strong_scaling", "memory_capacity"),
                    help="recorded only: one device, so every regime runs the same")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--result-log", metavar="FILE", help="append the record as one JSON line")
    ap.add_argument("--json", action="store_true", help="print the record as JSON")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed steps, run as many again under torch.profiler and print the "
                         "operators by self CPU time per step (the peer's side of `spikemesh bench --profile`)")


def check_common_args(ap, args):
    for name in ("batch_size", "T", "steps", "threads", "image_size", "num_classes"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False")
    args.tf32 = args.tf32 == "on"
    if args.device == "cuda":  # set before any model is built or compiled
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    if args.compile is None:
        args.compile = args.device == "cuda" and hasattr(torch, "compile")
    elif args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile: torch {torch.__version__} has no torch.compile (needs torch >= 2.0)")


def synthetic_batch(args, input_shape, classes, static_input, device):
    """x [T, N, *input_shape] standard normal (static models: one frame repeated over T, as the
    static encoder feeds them); y [N] uniform over the classes. Fixed for the whole run."""
    g = torch.Generator().manual_seed(args.seed)
    shape = tuple(input_shape)
    if static_input:
        frame = torch.randn((args.batch_size,) + shape, generator=g)
        x = frame.unsqueeze(0).expand(args.T, *frame.shape).contiguous()
    else:
        x = torch.randn((args.T, args.batch_size) + shape, generator=g)
    y = torch.randint(0, classes, (args.batch_size,), generator=g)
    return x.to(device), y.to(device)


def fp32_precision(args, kind):
    """"tf32" or "ieee": what torch.backends allowed for fp32 `kind` ("conv" or "matmul") as the
    run set it; None off the GPU (where TF32 does not exist)."""
    if args.device != "cuda":
        return None
    allowed = torch.backends.cudnn.allow_tf32 if kind == "conv" else torch.backends.cuda.matmul.allow_tf32
    return "tf32" if allowed else "ieee"


# ---------------------------------------------------------------------------- timing
class PhaseClock:
    """Marks phase boundaries within one step: CUDA events on GPU (no synchronisation inside the
    step), perf_counter on CPU. elapsed_ms() synchronises and returns the phase durations."""

    def __init__(self, device):
        self.cuda = device == "cuda"
        self.marks = []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def elapsed_ms(self):
        if self.cuda:
            torch.cuda.synchronize()
            out = [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        else:
            out = [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]
        self.marks = []
        return out


def process_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


class Workload:
    """What a peer benchmarks: `runner` (the module or its torch.compile'd wrapper) maps x to
    [T, N, K]; `loss(out, y)` is a scalar; `before_step()` runs at the start of each step, timed
    with the forward (SpikingJelly's functional.reset_net; nothing for modules that keep no state)."""

    def __init__(self, model, runner, loss, before_step=None):
        self.model, self.runner, self.loss = model, runner, loss
        self.before_step = before_step or (lambda: None)


def train_step(work, opt, x, y, autocast, clock):
    """One training step; returns (loss tensor, [forward, backward, optimizer] ms, wall ms).
    The neuron reset is inside the forward phase (it is part of the step)."""
    t0 = time.perf_counter()
    clock.mark()
    work.before_step()
    with autocast():
        out = work.runner(x)                   # [T, N, K]
        loss = work.loss(out.float(), y)
    clock.mark()
    loss.backward()
    clock.mark()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.mark()
    phases = clock.elapsed_ms()               # synchronises on GPU
    return loss.detach(), phases, (time.perf_counter() - t0) * 1e3


# ---------------------------------------------------------------------------- the run
def run_benchmark(args, work, opt, x, y, backend, num_classes):
    """Warm-up, timed steps, and the record (configuration, metrics, information)."""
    if args.precision == "bf16":
        def autocast():
            return torch.autocast(device_type=args.device, dtype=torch.bfloat16)
    else:
        autocast = contextlib.nullcontext

    clock = PhaseClock(args.device)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    t_warm = time.perf_counter()
    for _ in range(args.warmup):
        train_step(work, opt, x, y, autocast, clock)
    warmup_s = time.perf_counter() - t_warm

    walls, fwd, bwd, optim, losses = [], [], [], [], []
    cpu0 = process_cpu_s()
    for _ in range(args.steps):
        loss, (f, b, o), wall = train_step(work, opt, x, y, autocast, clock)
        walls.append(wall)
        fwd.append(f)
        bwd.append(b)
        optim.append(o)
        losses.append(float(loss))

    cpu_ms_per_step = (process_cpu_s() - cpu0) * 1e3 / args.steps
    profile = profile_steps(args, work, opt, x, y, autocast, clock) if getattr(args, "profile", False) else None
    latency = statistics.median(walls)
    sps = args.batch_size / (latency / 1e3)
    rec = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "hostname": socket.gethostname(),
        # configuration (bench_config_fields)
        "backend": backend,
        "benchmark_regime": args.benchmark_regime,
        "model": args.model,
        "mode": "none",
        "world_size": 1,
        "optimizer_sharding": "none",
        "memopt_level": 0,
        "batch_size": args.batch_size,
        "global_batch_size": args.batch_size,
        "per_rank_batch_size": args.batch_size,
        "data_replicas": 1,
        "num_classes": num_classes,
        "image_size": args.image_size if args.model.startswith("spikformer") else None,
        "T": args.T,
        "steps": args.steps,
        "warmup": args.warmup,
        "device": args.device,
        "precision": args.precision,
        "threads": args.threads,
        "compile": bool(args.compile),
        # the vector width PyTorch's CPU kernels use (ATEN_CPU_CAPABILITY; report.py --isa)
        "cpu_capability": cpu_capability() if args.device == "cpu" else None,
        "tf32": bool(args.tf32) if args.device == "cuda" else None,
        # spikemesh's names for the same settings (--conv-fp32-precision, --matmul-fp32-precision)
        "conv_fp32_precision": fp32_precision(args, "conv"),
        "matmul_fp32_precision": fp32_precision(args, "matmul"),
        # metrics (bench_metric_fields)
        "step_latency_ms": latency,
        "global_throughput_sps": sps,
        "per_device_throughput_sps": sps,
        "forward_ms": statistics.median(fwd),
        "backward_ms": statistics.median(bwd),
        "optimizer_ms": statistics.median(optim),
        "peak_rss_mb": peak_rss_mb(),
        # information
        "step_latency_min_ms": min(walls),
        "step_latency_max_ms": max(walls),
        "warmup_s": warmup_s,
        # CPU time (user + system, all threads) per timed step: a busy-cores figure of
        # cpu_ms_per_step / mean latency well below --threads means the machine was shared
        "cpu_ms_per_step": cpu_ms_per_step,
        "cores_busy": cpu_ms_per_step / statistics.mean(walls),
        "final_loss": losses[-1],
        "optimizer": args.optimizer,
        "dropout": args.dropout,
        "lr": args.lr,
        "params": sum(p.numel() for p in work.model.parameters()),
        "torch_version": torch.__version__,
    }
    if args.device == "cuda":
        rec["peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
        rec["gpu"] = torch.cuda.get_device_name()
    if profile is not None:
        rec["profile_self_cpu_ms_per_step"] = profile
    return rec


def profile_steps(args, work, opt, x, y, autocast, clock, top=20):
    """`args.steps` more steps under torch.profiler (after the timed ones, so the timing is not
    disturbed); prints the top operators by self CPU time and returns {op: ms per step}."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            train_step(work, opt, x, y, autocast, clock)
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) / 1e3 / args.steps
    out = sys.stderr if args.json else sys.stdout
    print(f"profile: self CPU time per step by operator (torch.profiler, {args.steps} steps, "
          f"{total:.1f} ms per step in all operators)", file=out)
    result = {}
    for e in rows[:top]:
        ms = e.self_cpu_time_total / 1e3 / args.steps
        result[e.key] = round(ms, 3)
        print(f"  {e.key:<48} {ms:10.2f} ms  {100 * ms / total:5.1f} %  ({e.count // args.steps} calls)",
              file=out)
    return result


# ---------------------------------------------------------------------------- output
def print_summary(rec, out):
    def p(line):
        print(line, file=out)

    p(f"{rec['backend']} {rec['model']}: batch {rec['batch_size']}, T {rec['T']}, {rec['device']} "
      f"{rec['precision']}, {rec['threads']} threads, compile {'on' if rec['compile'] else 'off'}, "
      f"{rec['warmup']} warm-up + {rec['steps']} steps (warm-up {rec['warmup_s']:.1f} s)")
    p(f"  step latency   {rec['step_latency_ms']:10.2f} ms (median; min {rec['step_latency_min_ms']:.2f}, "
      f"max {rec['step_latency_max_ms']:.2f})")
    p(f"    forward      {rec['forward_ms']:10.2f} ms")
    p(f"    backward     {rec['backward_ms']:10.2f} ms")
    p(f"    optimizer    {rec['optimizer_ms']:10.2f} ms")
    p(f"  process CPU    {rec['cpu_ms_per_step']:10.2f} ms per step ({rec['cores_busy']:.2f} cores busy "
      f"of {rec['threads']} threads)")
    p(f"  throughput     {rec['global_throughput_sps']:10.2f} samples/s")
    p(f"  peak RSS       {rec['peak_rss_mb']:10.1f} MB")
    if "peak_allocated_mb" in rec:
        p(f"  peak allocated {rec['peak_allocated_mb']:10.1f} MB (torch.cuda.max_memory_allocated)")
    p(f"  final loss     {rec['final_loss']:10.4f}")


def cpu_capability():
    """PyTorch's CPU kernel level ("AVX2", "AVX512", ...), None where this torch cannot say."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        return None


def append_record(path, rec):
    """One os.write of the whole line with O_APPEND (concurrent appenders never interleave)."""
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    line = (json.dumps(rec) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if os.write(fd, line) != len(line):
            raise OSError(f"short write to {path}")
    finally:
        os.close(fd)


def emit(args, rec):
    """Summary (stdout, or stderr with --json), --result-log append, --json record."""
    summary_to = sys.stderr if args.json else sys.stdout
    print_summary(rec, summary_to)
    if args.result_log:
        append_record(args.result_log, rec)
        print(f"appended to {args.result_log}", file=summary_to)
    if args.json:
        print(json.dumps(rec, indent=2))
    return 0
