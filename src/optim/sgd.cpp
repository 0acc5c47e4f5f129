// sgd.cpp — torch.optim.SGD (dampening 0): weight decay added to the grad, heavy-ball or
// Nesterov momentum. The momentum buffer starts at zero (allocated eagerly), which equals
// PyTorch's "buf = clone(g)" on the first step because momentum·0 + g == g exactly.
// With momentum == 0 there is no state, as in PyTorch.
#include <cmath>

#include "optimizer_kinds.h"

namespace sm {
namespace {

struct SgdScalars {
  double lr, weight_decay, momentum;
  bool nesterov;
};

// One param: p, g, buf hold n elements ([local numel]); buf is null when momentum == 0.
template <typename T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SgdScalars& s) {
#pragma omp parallel for schedule(static) if (n >= kOptimParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const double pi = p[i];
    double d = g[i];
    if (s.weight_decay != 0.0) d = d + s.weight_decay * pi;  // grad.add(param, alpha=wd)
    if (buf) {
      const T b = static_cast<T>(static_cast<double>(buf[i]) * s.momentum + d);  // stored buf
      buf[i] = b;
      d = s.nesterov ? d + s.momentum * static_cast<double>(b) : static_cast<double>(b);
    }
    p[i] = static_cast<T>(pi + (-s.lr) * d);  // param.add_(d, alpha=-lr)
  }
}

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& cfg, std::vector<Param*> params) : Optimizer(cfg, std::move(params)) {
    if (cfg_.momentum != 0.0) {
      momentum_buffers_.reserve(params_.size());
      for (const Param* p : params_) momentum_buffers_.push_back(zeros_like_param(*p));
    }
  }

  void step() override {
    ++step_count_;
    for (size_t k = 0; k < params_.size(); ++k) {
      Param& p = *params_[k];
      require_cpu(p);
      const SgdScalars s{cfg_.lr, decay_of(p), cfg_.momentum, cfg_.nesterov};
      const int64_t n = p.value.numel();
      if (p.value.dtype() == DType::F64) {
        double* buf = momentum_buffers_.empty() ? nullptr : momentum_buffers_[k].data<double>();
        sgd_update<double>(p.value.data<double>(), p.grad.data<double>(), buf, n, s);
      } else {
        float* buf = momentum_buffers_.empty() ? nullptr : momentum_buffers_[k].data<float>();
        sgd_update<float>(p.value.data<float>(), p.grad.data<float>(), buf, n, s);
      }
    }
  }

  std::vector<OptimState> state() override {
    std::vector<OptimState> out;
    for (size_t k = 0; k < momentum_buffers_.size(); ++k)
      out.push_back({params_[k]->name, "momentum_buffer", &momentum_buffers_[k]});
    return out;
  }

  std::vector<std::string> state_names() const override {
    if (cfg_.momentum == 0.0) return {};
    return {"momentum_buffer"};
  }

 private:
  std::vector<Tensor> momentum_buffers_;  // one per param (same order), empty if momentum == 0
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& cfg, std::vector<Param*> params) {
  if (!(std::isfinite(cfg.momentum) && cfg.momentum >= 0.0))
    SM_INPUT_ERROR("optimizer 'sgd': invalid momentum " << cfg.momentum << " (must be >= 0)");
  if (cfg.nesterov && cfg.momentum == 0.0)
    SM_INPUT_ERROR("optimizer 'sgd': nesterov momentum requires momentum > 0");
  return std::make_unique<Sgd>(cfg, std::move(params));
}

}  // namespace sm
