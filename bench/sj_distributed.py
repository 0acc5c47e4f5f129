#!/usr/bin/env python3
"""sj_distributed.py — SpikingJelly's side of bench/multirank.sh: trains the CIFAR10-DVS VGG
for a few steps with SpikingJelly's distributed vision helpers on CPU (gloo) and writes the
per-step losses as JSON, so that they can be set beside spikemesh's losses for the same
initial weights, data, order and optimizer.

    torchrun --standalone --nproc-per-node 2 bench/sj_distributed.py --mode dp|tp|pp \
        --init INIT.h5 --data DATA.h5 --out RESULT.json [--steps 5 --global-batch 4 --precision fp64]
    python bench/sj_distributed.py --mode none ...          # one rank, no process group

What runs (SpikingJelly 2.0, `spikingjelly.activation_based.distributed`):
  * Its trainer, `vision.train_classification`, is called first with a real TrainingConfig for
    this model. It requires CUDA + NCCL (its first statement raises on a machine without CUDA),
    so on the CPU the exception text is recorded (`sj_trainer_probe`) and the script runs the
    same step itself, built from the pieces that trainer uses:
  * the model: a `vision.ModelConfig` / `vision.ModelBuilder` pair for the VGG (SpikingJelly's
    extension point for architectures), whose `build()` applies SpikingJelly's channel tensor
    parallelism (`tensor_parallel.ChannelShardConv2d` colwise/rowwise pairs with
    `ChannelShardBatchNorm2d`, as its SEW-ResNet builder does) and cuts pipeline stages;
  * dp: the trainer's DDP wrapper (`vision.execution._wrap_data_parallel`: DDP, buffers
    broadcast from rank 0, no SyncBatchNorm); tp: the builder's sharded model, no wrapper;
    pp: the trainer's GPipe set-up (`PipelineStage` + `ScheduleGPipe`, its `_ResetAfterForward`
    and `_pipeline_loss`, the loss broadcast from the last stage);
  * per step exactly as `train_classification`: zero_grad, forward of the [T, N, ...] sequence,
    cross-entropy of the mean over T, backward, optimizer step, `functional.reset_net`.
Where one of SpikingJelly's private helpers is missing or refuses the CPU, the equivalent torch
call is used and the exception is recorded in `notes`.

Inputs: the initial state dict exported by spikemesh (HDF5 /params, /buffers: `spikemesh
dump-grads --out`), a dataset HDF5 in spikemesh's format (/train/x [N, T, C, H, W], /train/y;
`spikemesh data synth-dvs`). Step k uses samples [k*B, (k+1)*B) in file order (spikemesh
`train --no-shuffle`); data-parallel rank r takes the r-th contiguous slice of them, as
spikemesh's sampler does. Optimizer Adam (spikemesh's default), lr 1e-3, no weight decay.
Output (rank 0): one JSON object, status ok | unavailable | failed, with `losses` (the global
batch's loss per step: dp: mean over ranks; pp: mean over microbatches) and `reason` otherwise.
No spikemesh code is imported (bench/sj_models.py uses SpikingJelly only); no network access.
"""
import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import ClassVar, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MODES = ("none", "dp", "tp", "pp")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=MODES, required=True,
                   help="none: one rank; dp, tp, pp: that layout over all torchrun ranks")
    p.add_argument("--init", required=True, help="spikemesh state dict (HDF5 /params, /buffers)")
    p.add_argument("--data", required=True, help="dataset HDF5 (/train/x [N,T,C,H,W], /train/y)")
    p.add_argument("--out", required=True, help="result JSON (written by rank 0)")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps (default 5)")
    p.add_argument("--global-batch", type=int, default=4, help="samples per step over all dp ranks (default 4)")
    p.add_argument("--precision", choices=("fp64", "fp32"), default="fp64")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--pp-microbatches", type=int, default=1,
                   help="GPipe microbatches (default 1: batch norm then sees the whole batch, as on one rank)")
    p.add_argument("--pp-variant", choices=("sj", "requires-grad"), default="sj",
                   help="sj: pipeline stage example tensors exactly as vision.train_classification makes them "
                        "(torch.empty); requires-grad: the same marked requires_grad (what torch 2.15's static "
                        "stage metadata needs for gradients to cross stages)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--no-probe", action="store_true", help="do not call vision.train_classification first")
    return p.parse_args()


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def exc_text(e):
    """One line: the exception and, when it wraps one, its cause."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    cause = e.__cause__ or e.__context__
    if cause is not None and cause is not e:
        text += " (caused by " + " ".join(f"{type(cause).__name__}: {cause}".split()) + ")"
    return text


# ---------------------------------------------------------------- imports (reported, never raised)
try:
    import h5py
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from spikingjelly.activation_based import functional
    from spikingjelly.activation_based.distributed import vision
    from spikingjelly.activation_based.distributed.tensor_parallel import (
        ChannelShardBatchNorm2d, ChannelShardConv2d)
    import sj_models
    IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 — any import failure is a finding, not a crash
    IMPORT_ERROR = exc_text(e)


def versions():
    out = {"python": sys.version.split()[0]}
    try:
        import importlib.metadata as md
        out["torch"] = md.version("torch")
        out["spikingjelly"] = md.version("spikingjelly")
    except Exception:  # noqa: BLE001
        pass
    return out


# ---------------------------------------------------------------- the VGG for SpikingJelly's vision API
if IMPORT_ERROR is None:
    @dataclass(frozen=True)
    class SpikemeshVGGConfig(vision.ModelConfig):
        """The VGG of bench/sj_models.py as a SpikingJelly vision model config."""
        builder: ClassVar[str] = f"{__name__}.SpikemeshVGGBuilder"
        time_steps: int = 2
        num_classes: int = 10
        step_mode: str = "m"
        dropout: float = 0.0
        init_state: Optional[str] = None   # spikemesh HDF5 state dict to start from
        dtype: str = "float64"

    class SpikemeshVGGBuilder(vision.ModelBuilder):
        """Builds the local tp/pp shard. TP: blocks (0,1), (2,3), (4,5), (6,7) are
        colwise/rowwise pairs (conv out-channels split with its BN and LIF on the local shard,
        then in-channels split and partial sums all-reduced), like SpikingJelly's SEW-ResNet
        builder; the classifier is replicated. PP (2 stages): blocks 0-3 | blocks 4-7, pool,
        flatten, classifier."""

        def _build_canonical_model(self):
            c = self.config
            model, _ = sj_models.build_model("cifar10dvs_vgg", c.dropout)
            model.to(getattr(torch, c.dtype))
            if c.init_state:
                load_state(model, c.init_state)
            functional.set_step_mode(model, c.step_mode)
            return model

        def _pipeline_stage(self, model, rank, size):
            if size == 1:
                return model
            if size != 2:
                raise ValueError("this VGG builder cuts 1 or 2 pipeline stages")
            feats = list(model.features.children())
            chunks = (nn.Sequential(*feats[:4]),
                      nn.Sequential(*feats[4:], model.flatten, *model.classifier.children()))
            return chunks[rank]

        def build(self, *, process_group, memopt_process_group, pipeline_rank, pipeline_size,
                  pipeline_microbatches, device, micro_batch_size, memopt_level,
                  memopt_compress_inputs, memopt_checkpoint_budget):
            if memopt_level:
                raise ValueError("memopt is not used in this comparison")
            c = self.config
            model = self._build_canonical_model()
            tp = dist.get_world_size(process_group) if process_group is not None else 1
            if tp > 1:
                blocks = list(model.features.children())[:8]
                for i, blk in enumerate(blocks):
                    conv_i = len(blk.proj_bn) - 2          # proj_bn = [pool,] conv, bn
                    blk.proj_bn[conv_i] = ChannelShardConv2d(blk.proj_bn[conv_i], process_group,
                                                             "colwise" if i % 2 == 0 else "rowwise")
                    if i % 2 == 0:
                        blk.proj_bn[conv_i + 1] = ChannelShardBatchNorm2d(blk.proj_bn[conv_i + 1], process_group)
            model = self._pipeline_stage(model, pipeline_rank, pipeline_size)
            model.to(device)
            if pipeline_size == 1:
                return model, (), None, None
            mb = micro_batch_size // pipeline_microbatches
            T = c.time_steps
            boundary = (T, mb, 256, 24, 24)                 # output of block 3
            if pipeline_rank == 0:
                return model, (), (mb, T, 2, 48, 48), boundary   # stage 0 takes batch-first input
            return model, (), boundary, (T, mb, c.num_classes)


def load_state(model, path):
    """spikemesh's HDF5 state dict (/params, /buffers) into `model`."""
    sj_models.load_spikemesh_state(model, path)


class H5Batches:
    """Step k: samples [k*B, (k+1)*B) of /train in file order; dp rank r: its contiguous slice."""

    def __init__(self, path, global_batch, steps, dtype):
        with h5py.File(path, "r") as f:
            n = f["train/y"].shape[0]
            if n < global_batch * steps:
                raise SystemExit(f"{path}: {n} training samples, {steps} steps of {global_batch} need "
                                 f"{global_batch * steps}")
            scale = float(f.attrs.get("x_scale", 1.0))
            self.x = torch.from_numpy(f["train/x"][: global_batch * steps].astype(np.float64) * scale).to(dtype)
            self.y = torch.from_numpy(f["train/y"][: global_batch * steps].astype(np.int64))
            self.T = int(self.x.shape[1])
        self.B = global_batch

    def batch(self, k, dp_rank=0, dp_size=1):
        per = self.B // dp_size
        lo = k * self.B + dp_rank * per
        return self.x[lo:lo + per], self.y[lo:lo + per]       # [n, T, C, H, W], [n]


def build_datasets(path):
    """dataset_builder for the TrainingConfig of the trainer probe: (train, test) TensorDatasets."""
    from torch.utils.data import TensorDataset
    with h5py.File(path, "r") as f:
        return tuple(TensorDataset(torch.from_numpy(f[f"{s}/x"][()].astype(np.float32)),
                                   torch.from_numpy(f[f"{s}/y"][()].astype(np.int64))) for s in ("train", "test"))


def probe_trainer(args, T):
    """Call SpikingJelly's own distributed trainer; returns {api, ran, error}."""
    api = "spikingjelly.activation_based.distributed.vision.train_classification"
    if torch.cuda.is_available():
        return {"api": api, "ran": False, "error": None,
                "note": "not called: CUDA is present, and this comparison runs on the CPU"}
    from spikingjelly.activation_based.precision import PrecisionConfig
    mesh = {"dp": (1, 1), "tp": (2, 1), "pp": (1, 2), "none": (1, 1)}[args.mode]
    cfg = vision.TrainingConfig(
        model=SpikemeshVGGConfig(time_steps=T, init_state=args.init),
        dataset_builder=f"{__name__}.build_datasets", dataset_kwargs={"path": args.data},
        input_layout="NTCHW", batch_size=args.global_batch, workers=0,
        optimizer="torch.optim.Adam", optimizer_kwargs={"lr": args.lr},
        tensor_parallel_size=mesh[0], pipeline_parallel_size=mesh[1],
        precision=PrecisionConfig(mode="fp32"), max_steps=args.steps, seed=0)
    try:
        vision.train_classification(cfg)
        return {"api": api, "ran": True, "error": None}
    except Exception as e:  # noqa: BLE001
        return {"api": api, "ran": False, "error": exc_text(e)}


def sj_private(module, name):
    """One of SpikingJelly's trainer helpers, or None where this version lacks it."""
    import importlib
    try:
        return getattr(importlib.import_module(f"spikingjelly.activation_based.distributed.vision.{module}"), name)
    except (ImportError, AttributeError):
        return None


def run(args, res):
    dtype = {"fp64": torch.float64, "fp32": torch.float32}[args.precision]
    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.mode == "none" and world != 1:
        raise SystemExit("--mode none runs on one rank")
    if args.mode != "none" and world != 2:
        raise SystemExit(f"--mode {args.mode} needs 2 ranks (torchrun --nproc-per-node 2), got {world}")
    if world > 1:
        from datetime import timedelta
        dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank = dist.get_rank() if world > 1 else 0
    data = H5Batches(args.data, args.global_batch, args.steps, dtype)
    T = data.T
    res.update(T=T)
    if not args.no_probe:
        res["sj_trainer_probe"] = probe_trainer(args, T)

    dp = 2 if args.mode == "dp" else 1
    tp = 2 if args.mode == "tp" else 1
    pp = 2 if args.mode == "pp" else 1
    group = dist.group.WORLD if world > 1 else None
    if args.global_batch % dp or args.global_batch % args.pp_microbatches:
        raise SystemExit("--global-batch must be divisible by dp and by --pp-microbatches")
    res.update(mesh={"dp": dp, "tp": tp, "pp": pp}, global_batch=args.global_batch,
               per_rank_batch=args.global_batch // dp, pp_microbatches=args.pp_microbatches if pp > 1 else None)

    # Same seed on every rank, as train_classification does before building (no randomness is
    # used: dropout 0, weights loaded).
    torch.manual_seed(0)
    cfg = SpikemeshVGGConfig(time_steps=T, init_state=args.init, dtype=str(dtype).split(".")[1])
    model, _, in_shape, out_shape = SpikemeshVGGBuilder(cfg).build(
        process_group=group if tp > 1 else None, memopt_process_group=None,
        pipeline_rank=rank if pp > 1 else 0, pipeline_size=pp, pipeline_microbatches=args.pp_microbatches,
        device=torch.device("cpu"), micro_batch_size=args.global_batch, memopt_level=0,
        memopt_compress_inputs=False, memopt_checkpoint_budget="memory")
    functional.set_step_mode(model, "m")
    notes = res["notes"]
    how = [f"model: vision.ModelBuilder subclass for the VGG{' (ChannelShardConv2d/ChannelShardBatchNorm2d, tp=2)' if tp > 1 else ''}"]

    if dp > 1:   # the trainer's wrapper: DDP, broadcast_buffers for multi-step models, no SyncBatchNorm
        wrap = sj_private("execution", "_wrap_data_parallel")
        wrapped = None
        if wrap is not None:
            from spikingjelly.activation_based.precision import PrecisionConfig
            try:
                wrapped = wrap(model, data_parallel="ddp", pipeline_parallel_size=1, step_mode="m",
                               precision=PrecisionConfig(mode="fp32"), device=torch.device("cpu"),
                               dp_size=dp, dp_group=group, dp_mesh=None, fsdp_roots=())
                how.append("dp: vision.execution._wrap_data_parallel (DDP over gloo)")
            except Exception as e:  # noqa: BLE001
                notes.append(f"vision.execution._wrap_data_parallel refuses the CPU ({exc_text(e)}); "
                             "used the same DDP call without device_ids")
        else:
            notes.append("vision.execution._wrap_data_parallel not found; used DDP as SpikingJelly 2.0 does")
        if wrapped is None:
            wrapped = torch.nn.parallel.DistributedDataParallel(model, process_group=group, broadcast_buffers=True)
            how.append("dp: torch DDP(broadcast_buffers=True), as vision.execution._wrap_data_parallel")
        model = wrapped
    if tp > 1:
        how.append("tp: channel-sharded model, no wrapper (dp = 1)")

    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses = []
    if pp > 1:
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
        from torch.distributed.pipelining.microbatch import TensorChunkSpec
        Reset = sj_private("training", "_ResetAfterForward")
        ploss = sj_private("execution", "_pipeline_loss")
        if Reset is None or ploss is None:
            raise RuntimeError("SpikingJelly's pipeline helpers (_ResetAfterForward, _pipeline_loss) are missing")
        import functools
        in_args, out_args = torch.empty(in_shape, dtype=dtype), torch.empty(out_shape, dtype=dtype)
        if args.pp_variant == "requires-grad":   # received activations and sent outputs carry gradients
            in_args.requires_grad_(rank > 0)
            out_args.requires_grad_(True)
        stage = PipelineStage(Reset(model, batch_first=rank == 0), rank, pp, torch.device("cpu"),
                              input_args=in_args, output_args=out_args, group=group)
        sched = ScheduleGPipe(stage, n_microbatches=args.pp_microbatches,
                              loss_fn=functools.partial(ploss, loss_function=nn.functional.cross_entropy),
                              output_merge_spec=TensorChunkSpec(1))
        how.append(f"pp: torch PipelineStage + ScheduleGPipe ({args.pp_microbatches} microbatch(es)) with "
                   "vision.training._ResetAfterForward and vision.execution._pipeline_loss; stage example "
                   + ("tensors torch.empty(...) as in vision.training" if args.pp_variant == "sj"
                      else "tensors marked requires_grad (not as in vision.training)"))
        res["pp_variant"] = args.pp_variant
    model.train()
    times = []
    for k in range(args.steps):
        t0 = time.perf_counter()
        x, y = data.batch(k, rank if dp > 1 else 0, dp)
        opt.zero_grad(set_to_none=True)
        if pp > 1:
            step_losses = []
            if rank == 0:
                sched.step(x.contiguous())
            else:
                sched.step(target=y, losses=step_losses)
            loss = torch.stack(step_losses).mean().detach() if step_losses else torch.zeros((), dtype=dtype)
            dist.broadcast(loss, src=pp - 1, group=group)
            opt.step()
        else:
            out = model(x.transpose(0, 1).contiguous())       # [T, n, K]
            loss = nn.functional.cross_entropy(out.mean(0), y)  # sj_models.mean_ce_loss
            loss.backward()
            opt.step()
            functional.reset_net(model)
            loss = loss.detach().clone()
            if dp > 1:                                        # the global batch's loss (equal slices)
                dist.all_reduce(loss, group=group)
                loss /= dp
        losses.append(float(loss))
        times.append(time.perf_counter() - t0)
    res.update(status="ok", reason=None, losses=losses, step_s=times, how=how)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def main():
    args = parse_args()
    t0 = time.time()
    rank = int(os.environ.get("RANK", "0"))
    res = {"system": "spikingjelly", "mode": args.mode, "status": "failed", "reason": None, "losses": [],
           "precision": args.precision, "backend": "gloo" if args.mode != "none" else None, "device": "cpu",
           "world_size": int(os.environ.get("WORLD_SIZE", "1")), "steps": args.steps, "lr": args.lr,
           "optimizer": "adam", "versions": versions(), "notes": []}
    if IMPORT_ERROR is not None:
        res.update(status="unavailable", reason=f"import failed: {IMPORT_ERROR}")
        if rank == 0:
            write_json(args.out, res)
        print(f"sj_distributed: {res['reason']}", file=sys.stderr)
        return 0
    code = 0
    import warnings
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run(args, res)
            finally:   # torch's warnings, once each (e.g. the in-place all-reduce inside autograd of tp)
                seen = []
                for w in caught:
                    text = f"{w.category.__name__}: {str(w.message).splitlines()[0][:300]}"
                    if text not in seen:
                        seen.append(text)
                res["warnings"] = seen
    except (Exception, SystemExit) as e:  # noqa: BLE001 — recorded, then a non-zero exit
        res.update(status="failed", reason=exc_text(e) if not isinstance(e, SystemExit) else str(e))
        traceback.print_exc()
        code = 1
    res["wall_s"] = round(time.time() - t0, 2)
    if rank == 0 or res["status"] != "ok":
        write_json(args.out if rank == 0 else f"{args.out}.rank{rank}", res)
    if rank == 0 and res["status"] == "ok":
        print(f"sj_distributed {args.mode}: losses " + " ".join(f"{v:.9g}" for v in res["losses"]))
    return code


if __name__ == "__main__":
    sys.exit(main())
