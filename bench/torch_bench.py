#!/usr/bin/python3
"""torch_bench.py — the same-model PyTorch benchmark that `spikemesh bench` is measured against.

Plain idiomatic PyTorch, the way SpikingJelly's "torch" backend runs these models: multi-step
neurons as a per-time-step Python loop with a surrogate-gradient autograd.Function, conv / BN /
pool applied on [T*N, C, H, W] (SeqToANNContainer), autograd for BPTT, torch.optim.Adam.
The models are the parity test's twins (tests/parity/torch_models.py), whose state-dict names
and shapes equal spikemesh's built-in models (input/models/*.toml).

Protocol (spec/spikingjelly.md §4): one fixed synthetic batch (inputs standard normal, labels
uniform), `warmup` untimed steps, then `steps` timed training steps (forward + loss, backward,
optimizer step + zero_grad), each phase timed (CUDA events on GPU, perf_counter on CPU, a
synchronize at the end of every step). Reports the median step latency, samples/s, the
median of each phase, peak RSS (getrusage ru_maxrss) and on CUDA torch.cuda.max_memory_allocated.
MB means MiB (2**20 bytes) everywhere, as in torch's memory reports.

    /usr/bin/python3 bench/torch_bench.py --model cifar10dvs_vgg --batch-size 4 --T 10 \
        --steps 3 --warmup 1 --threads 2 --result-log results/bench.jsonl

With --result-log the run is appended as one JSON line with the field names of spikemesh's
benchmark records (include/spikemesh/io/bench_record.h), backend "pytorch"; bench/compare.py
puts such records next to spikemesh's.
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
import torch.nn as nn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "parity"))
import torch_models as tm  # noqa: E402  (the parity test's PyTorch twins)

MODEL_CHOICES = ("cifar10dvs_vgg", "fmnist_csnn")


# ---------------------------------------------------------------------------- arguments
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", choices=MODEL_CHOICES, default="cifar10dvs_vgg")
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
    args = ap.parse_args(argv)
    for name in ("batch_size", "T", "steps", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False")
    if args.compile is None:
        args.compile = args.device == "cuda" and hasattr(torch, "compile")
    elif args.compile and not hasattr(torch, "compile"):
        ap.error(f"--compile: torch {torch.__version__} has no torch.compile (needs torch >= 2.0)")
    return args


# ---------------------------------------------------------------------------- model and data
# Per model: the spec's dropout default (input/models/*.toml) and how inputs vary over time.
MODEL_DEFAULTS = {
    "cifar10dvs_vgg": dict(dropout=0.25, input_kind="events"),
    "fmnist_csnn": dict(dropout=0.0, input_kind="static"),
}


class TimeSharedDropout(nn.Module):
    """SpikingJelly's multi-step layer.Dropout: one mask [1, N, ...] for all time steps,
    kept values scaled by 1/(1-p); identity in eval mode."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x_seq):  # [T, N, ...]
        if not self.training or self.p == 0:
            return x_seq
        mask = torch.empty_like(x_seq[:1]).bernoulli_(1 - self.p) / (1 - self.p)
        return x_seq * mask


def build_model(args):
    """The parity twin of spikemesh's built-in model (dropout-free, for determinism), with the
    VGG's dropout put back in front of the Linear as spikemesh has it (classifier.0 = dropout,
    classifier.1 = Linear, the same state-dict names). Returns (module, spec entry)."""
    spec = tm.MODELS[args.model]
    model = spec["build"]()
    p = args.dropout if args.dropout is not None else MODEL_DEFAULTS[args.model]["dropout"]
    if not 0 <= p < 1:
        raise SystemExit(f"--dropout {p}: must be in [0, 1)")
    if p > 0:
        if args.model != "cifar10dvs_vgg":
            raise SystemExit("--dropout applies to cifar10dvs_vgg only")
        model.classifier = nn.Sequential(TimeSharedDropout(p), *model.classifier)
    args.dropout = p
    return model, spec


def synthetic_batch(args, spec, device):
    """x [T, N, *input_shape] standard normal (static models: one frame repeated over T, as the
    static encoder feeds them); y [N] uniform over the classes. Fixed for the whole run."""
    g = torch.Generator().manual_seed(args.seed)
    shape = tuple(spec["input_shape"])
    if MODEL_DEFAULTS[args.model]["input_kind"] == "static":
        frame = torch.randn((args.batch_size,) + shape, generator=g)
        x = frame.unsqueeze(0).expand(args.T, *frame.shape).contiguous()
    else:
        x = torch.randn((args.T, args.batch_size) + shape, generator=g)
    y = torch.randint(0, spec["classes"], (args.batch_size,), generator=g)
    return x.to(device), y.to(device)


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


def train_step(model, opt, x, y, loss_name, autocast, clock):
    """One training step; returns (loss tensor, [forward, backward, optimizer] ms, wall ms)."""
    t0 = time.perf_counter()
    clock.mark()
    with autocast():
        out = model(x)                         # [T, N, K]
        loss = tm.model_loss(loss_name, out.float(), y)
    clock.mark()
    loss.backward()
    clock.mark()
    opt.step()
    opt.zero_grad(set_to_none=True)
    clock.mark()
    phases = clock.elapsed_ms()               # synchronises on GPU
    return loss.detach(), phases, (time.perf_counter() - t0) * 1e3


def process_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


# ---------------------------------------------------------------------------- main
def run(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = True

    model, spec = build_model(args)
    model = model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    x, y = synthetic_batch(args, spec, device)
    n_params = sum(p.numel() for p in model.parameters())
    runner = torch.compile(model) if args.compile else model

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
        train_step(runner, opt, x, y, spec["loss"], autocast, clock)
    warmup_s = time.perf_counter() - t_warm

    walls, fwd, bwd, optim, losses = [], [], [], [], []
    cpu0 = process_cpu_s()
    for _ in range(args.steps):
        loss, (f, b, o), wall = train_step(runner, opt, x, y, spec["loss"], autocast, clock)
        walls.append(wall)
        fwd.append(f)
        bwd.append(b)
        optim.append(o)
        losses.append(float(loss))

    cpu_ms_per_step = (process_cpu_s() - cpu0) * 1e3 / args.steps
    latency = statistics.median(walls)
    sps = args.batch_size / (latency / 1e3)
    rec = {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "hostname": socket.gethostname(),
        # configuration (bench_config_fields)
        "backend": "pytorch",
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
        "num_classes": spec["classes"],
        "T": args.T,
        "steps": args.steps,
        "warmup": args.warmup,
        "device": args.device,
        "precision": args.precision,
        "threads": args.threads,
        "compile": bool(args.compile),
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
        "params": n_params,
        "torch_version": torch.__version__,
    }
    if args.device == "cuda":
        rec["peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
        rec["gpu"] = torch.cuda.get_device_name()
    return rec


def print_summary(rec, out):
    def p(line):
        print(line, file=out)

    p(f"pytorch {rec['model']}: batch {rec['batch_size']}, T {rec['T']}, {rec['device']} "
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


def main(argv=None):
    args = parse_args(argv)
    rec = run(args)
    # with --json, stdout carries only the record (the summary goes to stderr)
    summary_to = sys.stderr if args.json else sys.stdout
    print_summary(rec, summary_to)
    if args.result_log:
        append_record(args.result_log, rec)
        print(f"appended to {args.result_log}", file=summary_to)
    if args.json:
        print(json.dumps(rec, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
