// checkpoint_state.cpp — Model/Optimizer state as checkpoint tensors and the one-process
// save/load through the one writer/reader (train/checkpoint_state.h). No MPI call here.
#include "spikemesh/train/checkpoint_state.h"

#include <algorithm>

#include "spikemesh/core/precision.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/checkpointing.h"
#include "spikemesh/train/optimizer.h"

namespace sm {

namespace {

// A tensor held here whole (box `where`) or not at all.
TensorShard held(const std::string& path, const Shape& shape, const Box& where, Tensor& value, bool holds) {
  TensorShard s;
  s.path = path;
  s.shape = shape;
  s.dtype = value.dtype();
  s.box = holds ? where : empty_box(shape.size());
  if (holds) {
    SM_CHECK(value.defined() && value.numel() == where.numel(),
             "'" << path << "' holds " << (value.defined() ? value.numel() : 0) << " elements for box " << where.str());
    s.data = value;
  }
  return s;
}

}  // namespace

std::vector<TensorShard> buffer_shards(Model& model, bool holds, int tp_rank, bool saving,
                                       const std::vector<Buffer*>* local) {
  std::vector<TensorShard> out;
  for (Buffer* b : model.buffers()) {
    const bool split = b->shard.sharded();
    const bool on_stage = !local || std::find(local->begin(), local->end(), b) != local->end();
    const bool here = on_stage && holds && (split || !saving || tp_rank == 0);  // whole buffers: tp rank 0 writes
    const int blocks = split ? b->shard.segments : 1;  // a tp channel shard: one box per block
    const int64_t ls = b->held_shape().empty() ? 1 : b->held_shape()[0] / blocks;
    for (int s = 0; s < blocks; ++s) {
      Box where = full_box(b->held_shape());
      Tensor part = b->value;
      if (split) {  // rows [s·ls, (s+1)·ls) of the local buffer: block s, piece shard.index
        where.count[0] = ls;
        where.offset[0] = s * (b->shape[0] / blocks) + b->shard.index * ls;
        part = b->value.slice0(s * ls, (s + 1) * ls);
      }
      out.push_back(held(buffer_dataset_path(b->name), b->shape, where, part, here));
    }
  }
  return out;
}

std::vector<TensorShard> replicated_state_shards(Model& model, Optimizer* opt, bool holds) {
  SM_CHECK(model.finalized(), "state of model '" << model.info.name << "' before finalize()");
  SM_CHECK(opt != nullptr, "replicated_state_shards needs the optimizer");
  Layout one(model, nullptr, LayoutOptions{});  // a one-rank run's list: every tensor whole
  std::vector<TensorShard> out = layout_checkpoint_shards(one, *opt, true);
  if (!holds)
    for (TensorShard& s : out) {
      s.box = empty_box(s.shape.size());
      s.data = Tensor();
    }
  return out;
}

CheckpointMeta checkpoint_meta_of(const Model& model, const Optimizer& opt) {
  CheckpointMeta cm;
  cm.model = model.info.name;
  cm.optimizer = opt.config().name;
  cm.optimizer_step = opt.step_count();
  return cm;
}

// One process: the trainer's own path (a one-rank Layout and the CheckpointManager).
std::string save_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const TrainState& st,
                            const std::string& config_toml, const std::string& precision, int keep) {
  Layout layout(model, nullptr, LayoutOptions{});
  CheckpointManager ckpt(layout, opt, dir, config_toml, precision, keep);
  TrainState state = st;
  return ckpt.save(state, LossScaler::for_precision(Precision::FP32));
}

CheckpointInfo load_checkpoint(const std::string& path, Model& model, Optimizer& opt) {
  Layout layout(model, nullptr, LayoutOptions{});
  CheckpointManager ckpt(layout, opt, "", "", "", 1);
  LossScaler none = LossScaler::for_precision(Precision::FP32);
  return ckpt.load(path, none);
}

}  // namespace sm
