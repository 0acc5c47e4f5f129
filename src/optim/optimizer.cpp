// optimizer.cpp — the Optimizer base (param checks, lr, step count) and the factory.
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/optim/optimizer_cuda.h"

#include <cmath>
#include <unordered_set>

#include "optimizer_kinds.h"

namespace sm {

Optimizer::Optimizer(const OptimizerConfig& cfg, std::vector<Param*> params)
    : cfg_(cfg), params_(std::move(params)) {
  std::unordered_set<const Param*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param* p = params_[i];
    SM_CHECK(p != nullptr, "optimizer param " << i << " is null");
    SM_CHECK(seen.insert(p).second, "param '" << p->name << "' given to the optimizer twice");
    SM_CHECK(p->value.defined() && p->grad.defined(),
             "param '" << p->name << "' has no bound value/grad storage");
    const DType dt = p->value.dtype();
    SM_CHECK(dt == DType::F32 || dt == DType::F64,
             "param '" << p->name << "' has dtype " << dtype_name(dt) << "; optimizers take f32/f64");
    SM_CHECK(p->grad.dtype() == dt, "param '" << p->name << "': grad dtype "
                                              << dtype_name(p->grad.dtype()) << " != value dtype "
                                              << dtype_name(dt));
    SM_CHECK(p->grad.numel() == p->value.numel(),
             "param '" << p->name << "': grad " << shape_str(p->grad.shape()) << " vs value "
                       << shape_str(p->value.shape()));
  }
}

void Optimizer::set_lr(double lr) {
  if (!(std::isfinite(lr) && lr >= 0.0)) SM_INPUT_ERROR("invalid learning rate " << lr << " (must be >= 0)");
  cfg_.lr = lr;
}

void Optimizer::set_step_count(int64_t steps) {
  SM_CHECK(steps >= 0, "negative optimizer step count " << steps);
  step_count_ = steps;
}

void Optimizer::stage_step() { SM_CHECK(false, "optimizer '" << cfg_.name << "' has no device-resident step"); }

void Optimizer::enqueue_update(const int32_t*) {
  SM_CHECK(false, "optimizer '" << cfg_.name << "' has no device-resident step");
}

Tensor Optimizer::zeros_like_param(const Param& p) {
  return Tensor::zeros(p.value.shape(), p.value.dtype(), p.value.device());
}

void Optimizer::require_cpu(const Param& p) {
  SM_CHECK(p.value.device().is_cpu() && p.grad.device().is_cpu(),
           "param '" << p.name << "' is on " << p.value.device().str()
                     << "; the optimizer update runs on CPU tensors only");
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<Param*> params) {
  if (!(std::isfinite(cfg.lr) && cfg.lr >= 0.0))
    SM_INPUT_ERROR("optimizer '" << cfg.name << "': invalid learning rate " << cfg.lr << " (must be >= 0)");
  if (!(std::isfinite(cfg.weight_decay) && cfg.weight_decay >= 0.0))
    SM_INPUT_ERROR("optimizer '" << cfg.name << "': invalid weight_decay " << cfg.weight_decay
                                 << " (must be >= 0)");
  if (!params.empty() && params.front() != nullptr && params.front()->value.device().is_cuda())
    return make_optimizer_cuda(cfg, std::move(params));  // fused device kernels
  if (cfg.name == "sgd") return make_sgd(cfg, std::move(params));
  if (cfg.name == "adam") return make_adam(cfg, std::move(params), /*decoupled=*/false);
  if (cfg.name == "adamw") return make_adam(cfg, std::move(params), /*decoupled=*/true);
  SM_INPUT_ERROR("unknown optimizer '" << cfg.name << "' (expected sgd, adam or adamw)");
}

}  // namespace sm
