// model_checkpoint.cpp — a replicated Model/Optimizer's checkpoint tensors and the one-process
// save/load through a one-rank Layout's CheckpointManager (train/model_checkpoint.h). No MPI
// call here.
#include "spikemesh/train/model_checkpoint.h"

#include "spikemesh/core/precision.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/run_checkpoints.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

std::vector<TensorShard> replicated_state_shards(Model& model, Optimizer* opt, bool holds) {
  SM_CHECK(model.finalized(), "state of model '" << model.info.name << "' before finalize()");
  SM_CHECK(opt != nullptr, "replicated_state_shards needs the optimizer");
  // a one-rank run's list: every tensor whole
  Layout one(model, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, model));
  std::vector<TensorShard> out = layout_checkpoint_shards(one, *opt, true);
  if (!holds)
    for (TensorShard& s : out) {
      s.box = empty_box(s.shape.size());
      s.data = Tensor();
    }
  return out;
}

// One process: the trainer's own path (a one-rank Layout and the CheckpointManager).
std::string save_model_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const TrainState& st,
                                  const std::string& config_toml, const std::string& precision, int keep) {
  Layout layout(model, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, model));
  CheckpointManager ckpt(layout, opt, dir, config_toml, precision, keep);
  TrainState state = st;
  return ckpt.save(state, LossScaler::for_precision(Precision::FP32));
}

CheckpointInfo load_model_checkpoint(const std::string& path, Model& model, Optimizer& opt) {
  Layout layout(model, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, model));
  CheckpointManager ckpt(layout, opt, "", "", "", 1);
  LossScaler none = LossScaler::for_precision(Precision::FP32);
  return ckpt.load(path, none);
}

}  // namespace sm
