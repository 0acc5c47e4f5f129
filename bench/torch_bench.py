#!/usr/bin/python3
"""torch_bench.py — the same-model PyTorch benchmark that `spikemesh bench` is measured against.

Plain idiomatic PyTorch, the way SpikingJelly's "torch" backend runs these models: multi-step
neurons as a per-time-step Python loop with a surrogate-gradient autograd.Function, conv / BN /
pool applied on [T*N, C, H, W] (SeqToANNContainer), autograd for BPTT, torch.optim.Adam.
The models are the parity test's twins (tests/parity/torch_models.py), whose state-dict names
and shapes equal spikemesh's built-in models (input/models/*.toml).

Protocol and record: bench/peer_bench.py (docs/semantics.md §7: fixed synthetic batch,
warm-up, timed steps, medians, peak RSS; MB means MiB).

    /usr/bin/python3 bench/torch_bench.py --model cifar10dvs_vgg --batch-size 4 --T 10 \
        --steps 3 --warmup 1 --threads 2 --result-log results/bench.jsonl

With --result-log the run is appended as one JSON line with the field names of spikemesh's
benchmark records (include/spikemesh/io/bench_record.h), backend "pytorch"; bench/compare.py
puts such records next to spikemesh's.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

import peer_bench as peer  # the timing harness shared with bench/sj_bench.py (same folder)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "parity"))
import torch_models as tm  # noqa: E402  (the parity test's PyTorch twins)

MODEL_CHOICES = ("cifar10dvs_vgg", "fmnist_csnn", "spikformer_ti", "spikformer_s")
SPIKFORMER_SIZES = {"spikformer_ti": (256, 8, 4), "spikformer_s": (384, 12, 6)}  # E, heads, depth


# ---------------------------------------------------------------------------- arguments
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    peer.add_common_args(ap, MODEL_CHOICES)
    args = ap.parse_args(argv)
    peer.check_common_args(ap, args)
    return args


# ---------------------------------------------------------------------------- model and data
# Per model: the spec's dropout default (input/models/*.toml) and how inputs vary over time.
MODEL_DEFAULTS = {
    "cifar10dvs_vgg": dict(dropout=0.25, input_kind="events"),
    "fmnist_csnn": dict(dropout=0.0, input_kind="static"),
    "spikformer_ti": dict(dropout=0.0, input_kind="static"),
    "spikformer_s": dict(dropout=0.0, input_kind="static"),
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
    if args.model in SPIKFORMER_SIZES:  # the parity twin, sized by the flags
        E, heads, depth = SPIKFORMER_SIZES[args.model]
        model = tm.Spikformer(E=E, heads=heads, depth=depth, image_size=args.image_size,
                              num_classes=args.num_classes)
        spec = dict(tm.MODELS["spikformer_ti"], input_shape=(3, args.image_size, args.image_size),
                    classes=args.num_classes)
    else:
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
    static = MODEL_DEFAULTS[args.model]["input_kind"] == "static"
    x, y = peer.synthetic_batch(args, spec["input_shape"], spec["classes"], static, device)
    runner = torch.compile(model) if args.compile else model
    work = peer.Workload(model, runner, lambda out, y: tm.model_loss(spec["loss"], out, y))
    return peer.run_benchmark(args, work, opt, x, y, "pytorch", spec["classes"])


def main(argv=None):
    args = parse_args(argv)
    return peer.emit(args, run(args))


if __name__ == "__main__":
    sys.exit(main())
