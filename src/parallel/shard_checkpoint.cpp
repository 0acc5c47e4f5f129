// shard_checkpoint.cpp — the checkpoint tensor list of sharded (ZeRO/FSDP) state: parameter
// shards, replicated buffers, and the optimizer state of the shard Params (io/tensor_shard.h).
#include <map>
#include <utility>

#include "spikemesh/models/model.h"
#include "spikemesh/parallel/flat_shard.h"
#include "spikemesh/train/optimizer.h"

namespace sm {

namespace {
// The state names the optimizer keeps per parameter (e.g. exp_avg, exp_avg_sq), found on a
// one-element probe so that a rank holding no shard of a parameter still lists them.
std::vector<std::string> state_names_of(const Optimizer& opt, DType dt) {
  Param probe;
  probe.name = "probe";
  probe.shape = probe.local_shape = {1};
  probe.value = Tensor::zeros({1}, dt);
  probe.grad = Tensor::zeros({1}, dt);
  auto o = make_optimizer(opt.config(), {&probe});
  std::vector<std::string> names;
  for (const OptimState& s : o->state()) names.push_back(s.state_name);
  return names;
}
}  // namespace

std::vector<TensorShard> sharded_checkpoint_shards(Model& model, const ShardParams& shards, Optimizer& opt,
                                                   bool saving, int dp_rank) {
  const DType dt = model.dtype();
  std::vector<TensorShard> out;
  for (const ShardParams::Entry& e : shards.entries()) {
    TensorShard s;
    s.path = param_dataset_path(e.full->name);
    s.shape = e.full->shape;
    s.dtype = dt;
    s.offset = e.offset;
    s.count = e.count;
    if (e.shard) s.data = e.shard->value;
    out.push_back(std::move(s));
  }
  for (TensorShard& s : buffer_shards(model, saving ? dp_rank == 0 : true)) out.push_back(std::move(s));
  std::map<std::pair<std::string, std::string>, Tensor*> state;
  for (const OptimState& s : opt.state()) state[{s.param_name, s.state_name}] = s.value;
  const std::vector<std::string> names = state_names_of(opt, dt);
  for (const ShardParams::Entry& e : shards.entries()) {
    for (const std::string& n : names) {
      TensorShard s;
      s.path = optim_dataset_path(e.full->name, n);
      s.shape = e.full->shape;
      s.dtype = dt;
      s.offset = e.offset;
      s.count = e.count;
      if (e.shard) {
        auto it = state.find({e.full->name, n});
        SM_CHECK(it != state.end(), "optimizer has no state '" << n << "' for shard of '" << e.full->name << "'");
        SM_CHECK(it->second->numel() == e.count, "optimizer state '" << n << "' of '" << e.full->name
                                                                     << "' does not match its shard");
        s.data = *it->second;
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace sm
