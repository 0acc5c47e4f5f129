// adam.cpp — torch.optim.Adam (L2 weight decay added to the grad) and torch.optim.AdamW
// (decoupled decay p *= 1 - lr·wd), without amsgrad. Mirrors PyTorch's single-tensor path:
//   exp_avg.lerp_(g, 1-β1); exp_avg_sq.mul_(β2).addcmul_(g, g, 1-β2);
//   denom = sqrt(exp_avg_sq) / sqrt(1-β2^t) + eps; p.addcdiv_(exp_avg, denom, -lr/(1-β1^t)).
// Invariants: exp_avg / exp_avg_sq are allocated (zero) at construction in the param dtype;
// the update reads the state as stored (rounded to the param dtype), like PyTorch.
#include <cmath>

#include "optimizer_kinds.h"

namespace sm {
namespace {

struct AdamScalars {
  double l2;            // added to the grad (Adam); 0 for AdamW
  double decay_factor;  // p *= decay_factor first (AdamW: 1 - lr·wd); 1 for Adam
  double beta1, beta2, eps;
  double step_size;          // lr / (1 - β1^t)
  double bias_corr2_sqrt;    // sqrt(1 - β2^t)
};

// torch.lerp(start, end, w) as computed by ATen (two forms for accuracy near w = 1; kLowW: |w| < 0.5).
template <bool kLowW>
inline double lerp(double start, double end, double w) {
  if constexpr (kLowW) return std::fma(w, end - start, start);
  else return std::fma(-(end - start), 1.0 - w, end);
}

// The update of n elements with L2 and the form of lerp as compile-time flags, so that the loop
// has no control flow and vectorises. The file is built without FMA contraction (Makefile): the
// products fused into one rounding are the explicit std::fma calls, the same wherever the
// compiler vectorises.
template <typename T, bool kL2, bool kLowW>
void adam_elements(T* p, const T* g, T* m, T* v, int64_t n, const AdamScalars& s) {
#pragma omp parallel for schedule(static) if (n >= kOptimParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    double pi = p[i];
    double gi = g[i];
    if constexpr (kL2) gi = std::fma(s.l2, pi, gi);  // grad.add(param, alpha=wd)
    pi = pi * s.decay_factor;  // param.mul_(1 - lr*wd), its own rounding; exact when the factor is 1
    const T m_new = static_cast<T>(lerp<kLowW>(m[i], gi, 1.0 - s.beta1));
    const T v_new = static_cast<T>(std::fma(static_cast<double>(v[i]), s.beta2, (1.0 - s.beta2) * gi * gi));
    m[i] = m_new;
    v[i] = v_new;
    const double denom = std::sqrt(static_cast<double>(v_new)) / s.bias_corr2_sqrt + s.eps;
    p[i] = static_cast<T>(pi + (-s.step_size) * static_cast<double>(m_new) / denom);
  }
}

// One param: p, g, m (exp_avg), v (exp_avg_sq) hold n elements ([local numel]).
template <typename T>
void adam_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamScalars& s) {
  const bool l2 = s.l2 != 0.0, low_w = std::abs(1.0 - s.beta1) < 0.5;
  if (l2) {
    if (low_w) adam_elements<T, true, true>(p, g, m, v, n, s);
    else adam_elements<T, true, false>(p, g, m, v, n, s);
  } else {
    if (low_w) adam_elements<T, false, true>(p, g, m, v, n, s);
    else adam_elements<T, false, false>(p, g, m, v, n, s);
  }
}

class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& cfg, std::vector<Param*> params, bool decoupled)
      : Optimizer(cfg, std::move(params)), decoupled_(decoupled) {
    exp_avg_.reserve(params_.size());
    exp_avg_sq_.reserve(params_.size());
    for (const Param* p : params_) {
      exp_avg_.push_back(zeros_like_param(*p));
      exp_avg_sq_.push_back(zeros_like_param(*p));
    }
  }

  void step() override {
    ++step_count_;
    const double t = static_cast<double>(step_count_);
    const double bias_corr1 = 1.0 - std::pow(cfg_.beta1, t);
    const double bias_corr2 = 1.0 - std::pow(cfg_.beta2, t);
    for (size_t k = 0; k < params_.size(); ++k) {
      Param& p = *params_[k];
      require_cpu(p);
      const double wd = decay_of(p);
      AdamScalars s;
      s.l2 = decoupled_ ? 0.0 : wd;
      s.decay_factor = decoupled_ ? 1.0 - cfg_.lr * wd : 1.0;
      s.beta1 = cfg_.beta1;
      s.beta2 = cfg_.beta2;
      s.eps = cfg_.eps;
      s.step_size = cfg_.lr / bias_corr1;
      s.bias_corr2_sqrt = std::sqrt(bias_corr2);
      const int64_t n = p.value.numel();
      if (p.value.dtype() == DType::F64) {
        adam_update<double>(p.value.data<double>(), p.grad.data<double>(), exp_avg_[k].data<double>(),
                            exp_avg_sq_[k].data<double>(), n, s);
      } else {
        adam_update<float>(p.value.data<float>(), p.grad.data<float>(), exp_avg_[k].data<float>(),
                           exp_avg_sq_[k].data<float>(), n, s);
      }
    }
  }

  std::vector<OptimState> state() override {
    std::vector<OptimState> out;
    out.reserve(2 * params_.size());
    for (size_t k = 0; k < params_.size(); ++k) {
      out.push_back({params_[k]->name, "exp_avg", &exp_avg_[k]});
      out.push_back({params_[k]->name, "exp_avg_sq", &exp_avg_sq_[k]});
    }
    return out;
  }

  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  bool decoupled_;
  std::vector<Tensor> exp_avg_;     // one per param, same order and shape
  std::vector<Tensor> exp_avg_sq_;  // one per param, same order and shape
};

void check_beta(const char* opt, const char* which, double beta) {
  if (!(beta >= 0.0 && beta < 1.0))
    SM_INPUT_ERROR("optimizer '" << opt << "': invalid " << which << " " << beta << " (must be in [0, 1))");
}

}  // namespace

std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& cfg, std::vector<Param*> params,
                                     bool decoupled) {
  const char* opt = decoupled ? "adamw" : "adam";
  check_beta(opt, "beta1", cfg.beta1);
  check_beta(opt, "beta2", cfg.beta2);
  if (!(std::isfinite(cfg.eps) && cfg.eps >= 0.0))
    SM_INPUT_ERROR("optimizer '" << opt << "': invalid eps " << cfg.eps << " (must be >= 0)");
  return std::make_unique<Adam>(cfg, std::move(params), decoupled);
}

}  // namespace sm
