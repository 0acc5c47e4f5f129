// zero.cpp — ZeRO-1/2: per-unit gradient reduce-scatter, sharded optimizer step, parameter
// all-gather. Communication is collective over the dp comm.
#include "spikemesh/parallel/zero.h"

#include "spikemesh/models/model.h"
#include "spikemesh/parallel/replica_check.h"

namespace sm {

ZeroSharding::ZeroSharding(Stage& stage, Comm& dp, int zero_stage)
    : model_(stage.model()), stage_(stage), dp_(dp), group_(dp), zero_stage_(zero_stage) {
  Model& model = model_;
  SM_CHECK(zero_stage == 1 || zero_stage == 2, "ZeRO stage must be 1 or 2, got " << zero_stage);
  SM_CHECK(model.finalized(), "ZeRO needs a finalised model");
  check_replicas_identical(dp_, params_checksum(stage_.params()), "initial parameters");
  const DType dt = model.dtype();
  units_.resize(stage.size());
  double full = 0, shard = 0;
  for_each_unit_to_shard(stage, dp.rank(), dp.size(), [&](size_t k, Unit& u, const UnitShardLayout& lay) {
    UnitState& s = units_[k];
    const int64_t n = lay.numel;
    s.has_params = true;
    s.layout = lay;
    // Padded full buffers: the old ones' values copied in, the padding zero.
    Tensor value = Tensor::zeros({s.layout.padded}, dt, model_.device());  // [padded]
    value.slice0(0, n).copy_from(u.flat_value().slice0(0, n));
    Tensor grad = zero_stage_ == 1 ? Tensor::zeros({s.layout.padded}, dt, model_.device()) : Tensor();
    bind_unit_flat(u, value, grad);
    s.shard_value = value.slice0(s.layout.begin, s.layout.begin + s.layout.chunk).clone();  // [chunk]
    s.shard_grad = Tensor::zeros({s.layout.chunk}, dt, model_.device());
    if (zero_stage_ == 2) s.recv = Tensor::empty({s.layout.chunk}, dt, model_.device());
    shards_.add_unit(u, s.layout, s.shard_value, s.shard_grad);
    full += static_cast<double>(n) * dtype_size(dt);
    shard += static_cast<double>(s.layout.chunk) * dtype_size(dt);
  });
  stats_.param_full_mb = full / 1048576.0;
  stats_.param_shard_mb = shard / 1048576.0;
  stats_.param_peak_mb = (full + shard) / 1048576.0;  // replicas plus master shards
}

void ZeroSharding::begin_step() {
  for (size_t k = 0; k < units_.size(); ++k) {
    UnitState& s = units_[k];
    if (!s.has_params) continue;
    SM_CHECK(!s.handle, "a gradient reduce-scatter is still in flight at the start of a step");
    s.shard_grad.zero();
    if (zero_stage_ == 1) stage_.unit(k).zero_grad();
  }
}

void ZeroSharding::before_backward(size_t unit) {
  UnitState& s = units_[unit];
  if (zero_stage_ != 2 || !s.has_params) return;
  Unit& u = stage_.unit(unit);
  s.full_grad = Tensor::zeros({s.layout.padded}, model_.dtype(), model_.device());  // [padded], this backward only
  bind_unit_flat(u, u.flat_value(), s.full_grad);
}

void ZeroSharding::after_backward(size_t unit) {
  UnitState& s = units_[unit];
  if (s.has_params) {
    Unit& u = stage_.unit(unit);
    if (zero_stage_ == 1 && last_micro_) {
      s.handle = dp_.reduce_scatter_async(u.flat_grad(), s.shard_grad, ReduceOp::Avg);  // collective over dp
      ++stats_.grad_reductions;
    } else if (zero_stage_ == 2) {
      s.handle = dp_.reduce_scatter_async(s.full_grad, s.recv, ReduceOp::Avg);  // collective over dp
      ++stats_.grad_reductions;
      bind_unit_flat(u, u.flat_value(), Tensor());  // the layers no longer see a full gradient
    }
  }
  for (auto& o : units_)
    if (o.handle) o.handle->test();
}

void ZeroSharding::end_backward() {
  for (UnitState& s : units_)  // stage 1 reduced straight into the shard
    if (finish_shard_reduction(s.handle, s.shard_grad, zero_stage_ == 2 ? &s.recv : nullptr) && zero_stage_ == 2)
      s.full_grad = Tensor();  // freed: gradients live only as shards
}

void ZeroSharding::after_optimizer_step() {
  // All-gather every unit's updated chunk into its full flat buffer; all in flight at once.
  for (size_t k = 0; k < units_.size(); ++k) {
    UnitState& s = units_[k];
    if (!s.has_params) continue;
    s.handle = dp_.all_gather_async(s.shard_value, stage_.unit(k).flat_value());  // collective over dp
  }
  for (UnitState& s : units_)
    if (s.handle) {
      s.handle->wait();
      s.handle.reset();
    }
}

}  // namespace sm
