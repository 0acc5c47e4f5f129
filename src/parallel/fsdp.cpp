// fsdp.cpp — per-unit parameter sharding with gather-on-demand, prefetch and gradient
// reduce-scatter. Every communication is collective over the dp comm and issued in the same
// unit order on every rank (the hooks run in model order, whatever the local batch size).
#include "spikemesh/parallel/fsdp.h"

#include <algorithm>

#include "spikemesh/models/model.h"
#include "spikemesh/parallel/replica_check.h"

namespace sm {

namespace {
bool narrower_or_equal(DType d, DType model) {
  if (model == DType::F64) return d == DType::F64 || d == DType::F32 || d == DType::BF16;
  return d == DType::F32 || d == DType::BF16;
}
}  // namespace

Fsdp::Fsdp(Stage& stage, Comm& dp, bool reshard_after_forward, DType param_dtype, DType reduce_dtype)
    : model_(stage.model()),
      stage_(stage),
      dp_(dp),
      group_(dp),
      reshard_after_forward_(reshard_after_forward),
      param_dtype_(param_dtype),
      reduce_dtype_(reduce_dtype),
      model_dtype_(stage.model().dtype()) {
  SM_CHECK(model_.finalized(), "FSDP needs a finalised model");
  if (!narrower_or_equal(param_dtype, model_dtype_))
    SM_INPUT_ERROR("--fsdp-param-dtype " << dtype_name(param_dtype) << " with --precision "
                                         << dtype_name(model_dtype_) << ": must be the model dtype or narrower");
  if (!narrower_or_equal(reduce_dtype, model_dtype_))
    SM_INPUT_ERROR("--fsdp-reduce-dtype " << dtype_name(reduce_dtype) << " with --precision "
                                          << dtype_name(model_dtype_) << ": must be the model dtype or narrower");
  check_replicas_identical(dp_, params_checksum(stage_.params()), "initial parameters");
  units_.resize(stage.size());
  const size_t es = dtype_size(model_dtype_);
  double full = 0;
  std::vector<int64_t> unit_bytes;
  for_each_unit_to_shard(stage, dp.rank(), dp.size(), [&](size_t k, Unit& u, const UnitShardLayout& lay) {
    UnitState& s = units_[k];
    const int64_t n = lay.numel;
    s.has_params = true;
    s.layout = lay;
    s.shard_value = Tensor::zeros({s.layout.chunk}, model_dtype_, model_.device());  // [chunk]
    const int64_t a = std::min(n, s.layout.begin), b = std::min(n, s.layout.begin + s.layout.chunk);
    if (b > a) s.shard_value.slice0(0, b - a).copy_from(u.flat_value().slice0(a, b));
    s.shard_grad = Tensor::zeros({s.layout.chunk}, model_dtype_, model_.device());
    shards_.add_unit(u, s.layout, s.shard_value, s.shard_grad);
    bind_unit_flat(u, Tensor(), Tensor());  // the full copy made by finalize() is freed here
    full += static_cast<double>(n * es);
    unit_bytes.push_back(s.layout.padded * static_cast<int64_t>(es));
    account(s.layout.chunk * static_cast<int64_t>(es));
  });
  std::sort(unit_bytes.rbegin(), unit_bytes.rend());
  int64_t two = 0;
  for (size_t i = 0; i < unit_bytes.size() && i < 2; ++i) two += unit_bytes[i];
  stats_.param_full_mb = full / 1048576.0;
  stats_.param_shard_mb = static_cast<double>(live_bytes_) / 1048576.0;
  stats_.largest_units_mb = static_cast<double>(two) / 1048576.0;
  peak_bytes_ = live_bytes_;
}

Fsdp::~Fsdp() {
  for (UnitState& s : units_) {  // never leave an operation in flight on freed buffers
    try {
      if (s.gather) s.gather->wait();
      if (s.reduce) s.reduce->wait();
    } catch (...) {
    }
  }
}

void Fsdp::account(int64_t bytes) {
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
}

StrategyStats Fsdp::stats() const {
  StrategyStats s = stats_;
  s.param_peak_mb = static_cast<double>(peak_bytes_) / 1048576.0;
  return s;
}

size_t Fsdp::next_with_params(size_t k, int dir) const {
  for (int64_t j = static_cast<int64_t>(k) + dir; j >= 0 && j < static_cast<int64_t>(units_.size()); j += dir)
    if (units_[j].has_params) return static_cast<size_t>(j);
  return units_.size();
}

void Fsdp::start_gather(size_t k) {
  UnitState& s = units_[k];
  SM_CHECK(!s.gather && !s.gathered.defined(), "unit " << k << " gathered twice");
  const int64_t es = static_cast<int64_t>(dtype_size(model_dtype_));
  if (param_dtype_ == model_dtype_) {
    s.gathered = Tensor::empty({s.layout.padded}, model_dtype_, model_.device());  // [padded]
    account(s.layout.padded * es);
    s.gather = dp_.all_gather_async(s.shard_value, s.gathered);  // collective over dp
  } else {
    s.send = Tensor::empty({s.layout.chunk}, param_dtype_, model_.device());  // [chunk]
    cast_copy(s.shard_value, s.send);
    s.recv = Tensor::empty({s.layout.padded}, param_dtype_, model_.device());  // [padded]
    account(s.layout.padded * static_cast<int64_t>(dtype_size(param_dtype_)));
    s.gather = dp_.all_gather_async(s.send, s.recv);  // collective over dp
  }
}

void Fsdp::ensure_gathered(size_t k) {
  UnitState& s = units_[k];
  if (!s.gather && !s.gathered.defined()) start_gather(k);
  if (s.gather) {
    s.gather->wait();
    s.gather.reset();
    if (param_dtype_ != model_dtype_) {
      s.gathered = Tensor::empty({s.layout.padded}, model_dtype_, model_.device());
      account(s.layout.padded * static_cast<int64_t>(dtype_size(model_dtype_)));
      cast_copy(s.recv, s.gathered);
      account(-s.layout.padded * static_cast<int64_t>(dtype_size(param_dtype_)));
      s.recv = Tensor();
      s.send = Tensor();
    }
  }
  bind_unit_flat(stage_.unit(k), s.gathered, s.full_grad);
}

void Fsdp::release(size_t k) {
  UnitState& s = units_[k];
  if (s.gather) {  // a prefetch nobody used (e.g. eval over an empty batch): finish it first
    s.gather->wait();
    s.gather.reset();
    if (param_dtype_ != model_dtype_) {
      account(-s.layout.padded * static_cast<int64_t>(dtype_size(param_dtype_)));
      s.recv = Tensor();
      s.send = Tensor();
      s.gathered = Tensor();
      bind_unit_flat(stage_.unit(k), Tensor(), Tensor());
      return;
    }
  }
  if (s.gathered.defined()) account(-s.layout.padded * static_cast<int64_t>(dtype_size(model_dtype_)));
  s.gathered = Tensor();
  bind_unit_flat(stage_.unit(k), Tensor(), Tensor());
}

void Fsdp::begin_step() {
  for (UnitState& s : units_)
    if (s.has_params) {
      SM_CHECK(!s.reduce, "a gradient reduce-scatter is still in flight at the start of a step");
      s.shard_grad.zero();
    }
}

void Fsdp::before_forward(size_t k, bool training) {
  if (!units_[k].has_params) return;
  ensure_gathered(k);
  const size_t j = next_with_params(k, +1);
  if (j < units_.size() && !units_[j].gather && !units_[j].gathered.defined()) start_gather(j);
}

void Fsdp::after_forward(size_t k, bool training) {
  if (!units_[k].has_params) return;
  const bool last = next_with_params(k, +1) == units_.size();
  if (!training || (reshard_after_forward_ && !last)) release(k);
}

void Fsdp::before_backward(size_t k) {
  UnitState& s = units_[k];
  if (!s.has_params) return;
  s.full_grad = Tensor::zeros({s.layout.padded}, model_dtype_, model_.device());  // [padded], this backward only
  ensure_gathered(k);  // binds the gathered values and the full gradient
  const size_t j = next_with_params(k, -1);
  if (j < units_.size() && !units_[j].gather && !units_[j].gathered.defined()) start_gather(j);
}

void Fsdp::after_backward(size_t k) {
  UnitState& s = units_[k];
  if (s.has_params) {
    if (reduce_dtype_ == model_dtype_) {
      s.reduce_in = s.full_grad;
    } else {
      s.reduce_in = Tensor::empty({s.layout.padded}, reduce_dtype_, model_.device());  // [padded]
      cast_copy(s.full_grad, s.reduce_in);
    }
    s.reduce_out = Tensor::empty({s.layout.chunk}, reduce_dtype_, model_.device());  // [chunk]
    s.reduce = dp_.reduce_scatter_async(s.reduce_in, s.reduce_out, ReduceOp::Avg);  // collective over dp
    ++stats_.grad_reductions;
    s.full_grad = Tensor();
    release(k);
  }
  for (UnitState& o : units_) {
    if (o.reduce) o.reduce->test();
    if (o.gather) o.gather->test();
  }
}

void Fsdp::end_backward() {
  for (UnitState& s : units_)
    if (finish_shard_reduction(s.reduce, s.shard_grad, &s.reduce_out)) {
      s.reduce_in = Tensor();
      s.reduce_out = Tensor();
    }
}

void Fsdp::gather_full_params() {
  for (size_t k = 0; k < units_.size(); ++k)
    if (units_[k].has_params) ensure_gathered(k);
}

void Fsdp::release_full_params() {
  for (size_t k = 0; k < units_.size(); ++k)
    if (units_[k].has_params) release(k);
}

}  // namespace sm
