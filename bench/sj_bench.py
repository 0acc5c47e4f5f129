#!/usr/bin/env python3
"""sj_bench.py — the SpikingJelly peer of `spikemesh bench`: the same model built from
SpikingJelly's own layers and neurons (bench/sj_models.py, multi-step mode), trained on the same
fixed synthetic batch with the same optimizer, precision and thread count, `torch.compile` on or
off. Needs the venv of `make bench-deps` (a current torch and spikingjelly):

    .venv-bench/bin/python bench/sj_bench.py --model cifar10dvs_vgg --batch-size 4 --T 10 \
        --steps 5 --warmup 2 --threads 2 [--compile] --result-log output/bench/records.jsonl

Neurons: SpikingJelly's automatic dispatch picks its fastest operator for the device
(`functional.lif_multi_step`: registered CPU/CUDA/Triton kernels where they apply, its torch
reference otherwise); `sj_neuron_impl` records that the dispatch chose. The membrane state is reset
with `functional.reset_net` at the start of every step (timed with the forward). The record is
peer_bench.py's with backend "spikingjelly" plus `spikingjelly_version`. Nothing is downloaded.

fp32 on a GPU: `--tf32 off` (the default) is strict IEEE fp32, `--tf32 on` PyTorch's TF32 tensor
cores for cuDNN convolutions and cuBLAS matrix products (torch.backends.cudnn.allow_tf32 and
torch.backends.cuda.matmul.allow_tf32; PyTorch's own default is TF32 convolutions); the record's
conv_fp32_precision and matmul_fp32_precision ("ieee" | "tf32", spikemesh's names) and tf32 say
which ran, and bench/compare.py pairs it with the spikemesh runs of the same convolution precision.
cuDNN runs in benchmark mode (cudnn.benchmark = True) either way.
"""
import argparse
import importlib.metadata
import logging
import os
import sys
import warnings

# torch without triton logs a warning per import on CPU-only machines; the record is what matters
logging.getLogger("torch").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*[Tt]riton.*")

import torch  # noqa: E402

import peer_bench as peer  # noqa: E402  (same folder)
import sj_models  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    peer.add_common_args(ap, sj_models.MODEL_CHOICES)
    args = ap.parse_args(argv)
    peer.check_common_args(ap, args)
    return args


def run(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cudnn.benchmark = True

    model, info = sj_models.build_model(args.model, args.dropout, args.T, args.image_size, args.num_classes)
    args.dropout = info["dropout"]
    model = model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    x, y = peer.synthetic_batch(args, info["input_shape"], info["classes"], info["static"], device)
    runner = torch.compile(model) if args.compile else model
    work = peer.Workload(model, runner, sj_models.loss_of(info), lambda: sj_models.reset(model))
    rec = peer.run_benchmark(args, work, opt, x, y, "spikingjelly", info["classes"])
    rec["spikingjelly_version"] = importlib.metadata.version("spikingjelly")
    # SpikingJelly 2 has no backend argument: lif_multi_step dispatches by device and dtype to
    # its registered operator (CPU: spikingjelly._ops.lif.cpu; CUDA: its native or Triton kernel)
    rec["sj_neuron_impl"] = f"automatic dispatch ({args.device})"
    return rec


def main(argv=None):
    args = parse_args(argv)
    return peer.emit(args, run(args))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
