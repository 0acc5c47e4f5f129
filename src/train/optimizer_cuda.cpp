// optimizer_cuda.cpp — SGD / Adam / AdamW and gradient clipping on CUDA parameters over
// kernels/cuda/optim.h (contracts in train/optimizer_cuda.h).
#include "spikemesh/train/optimizer_cuda.h"

#include <cmath>

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/kernels/cuda/optim.h"
#endif

namespace sm {

#ifdef SPIKEMESH_HAVE_CUDA
namespace {

void check_cuda_param(const Param& p) {
  SM_CHECK(p.value.defined() && p.grad.defined(), "param '" << p.name << "' has no bound value/grad storage");
  SM_CHECK(p.value.device().is_cuda() && p.grad.device() == p.value.device(),
           "param '" << p.name << "': value on " << p.value.device().str() << ", grad on " << p.grad.device().str()
                     << "; the CUDA optimizer needs both on one GPU");
  SM_CHECK(p.value.dtype() == DType::F32 && p.grad.dtype() == DType::F32,
           "param '" << p.name << "': the CUDA optimizer updates f32 master weights, got "
                     << dtype_name(p.value.dtype()));
}

void check_state(const Param& p, const Tensor& s, const char* what) {
  SM_CHECK(s.defined() && s.dtype() == DType::F32 && s.device() == p.value.device() && s.numel() == p.value.numel(),
           "param '" << p.name << "': " << what << " must be f32 [" << p.value.numel() << "] on "
                     << p.value.device().str());
}

class CudaOptimizer final : public Optimizer {
 public:
  enum class Kind { Sgd, Adam, AdamW };
  CudaOptimizer(const OptimizerConfig& cfg, std::vector<Param*> params, Kind kind)
      : Optimizer(cfg, std::move(params)), kind_(kind) {
    for (const Param* p : params_) check_cuda_param(*p);
    if (kind_ == Kind::Sgd) {
      if (cfg_.momentum != 0.0)
        for (const Param* p : params_) first_.push_back(zeros_like_param(*p));
    } else {
      for (const Param* p : params_) {
        first_.push_back(zeros_like_param(*p));
        second_.push_back(zeros_like_param(*p));
      }
    }
  }

  void step() override {
    ++step_count_;
    for (size_t k = 0; k < params_.size(); ++k) {
      Param& p = *params_[k];
      const double wd = decay_of(p);
      if (kind_ == Kind::Sgd)
        sgd_update_cuda(p, first_.empty() ? nullptr : &first_[k], cfg_.lr, wd, cfg_.momentum, cfg_.nesterov);
      else
        adam_update_cuda(p, first_[k], second_[k], cfg_.lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd,
                         kind_ == Kind::AdamW, step_count_);
    }
  }

  std::vector<OptimState> state() override {
    std::vector<OptimState> out;
    for (size_t k = 0; k < first_.size(); ++k) {
      if (kind_ == Kind::Sgd) {
        out.push_back({params_[k]->name, "momentum_buffer", &first_[k]});
      } else {
        out.push_back({params_[k]->name, "exp_avg", &first_[k]});
        out.push_back({params_[k]->name, "exp_avg_sq", &second_[k]});
      }
    }
    return out;
  }

  std::vector<std::string> state_names() const override {
    if (kind_ != Kind::Sgd) return {"exp_avg", "exp_avg_sq"};
    if (cfg_.momentum == 0.0) return {};
    return {"momentum_buffer"};
  }

 private:
  Kind kind_;
  std::vector<Tensor> first_;   // momentum_buffer (sgd, momentum != 0) or exp_avg
  std::vector<Tensor> second_;  // exp_avg_sq (adam/adamw)
};

void check_beta(const char* opt, const char* which, double beta) {
  if (!(beta >= 0.0 && beta < 1.0))
    SM_INPUT_ERROR("optimizer '" << opt << "': invalid " << which << " " << beta << " (must be in [0, 1))");
}

}  // namespace

std::unique_ptr<Optimizer> make_optimizer_cuda(const OptimizerConfig& cfg, std::vector<Param*> params) {
  // The validation of make_optimizer / make_sgd / make_adam (same messages).
  if (!(std::isfinite(cfg.lr) && cfg.lr >= 0.0))
    SM_INPUT_ERROR("optimizer '" << cfg.name << "': invalid learning rate " << cfg.lr << " (must be >= 0)");
  if (!(std::isfinite(cfg.weight_decay) && cfg.weight_decay >= 0.0))
    SM_INPUT_ERROR("optimizer '" << cfg.name << "': invalid weight_decay " << cfg.weight_decay << " (must be >= 0)");
  if (cfg.name == "sgd") {
    if (!(std::isfinite(cfg.momentum) && cfg.momentum >= 0.0))
      SM_INPUT_ERROR("optimizer 'sgd': invalid momentum " << cfg.momentum << " (must be >= 0)");
    if (cfg.nesterov && cfg.momentum == 0.0) SM_INPUT_ERROR("optimizer 'sgd': nesterov momentum requires momentum > 0");
    return std::make_unique<CudaOptimizer>(cfg, std::move(params), CudaOptimizer::Kind::Sgd);
  }
  if (cfg.name == "adam" || cfg.name == "adamw") {
    const char* opt = cfg.name.c_str();
    check_beta(opt, "beta1", cfg.beta1);
    check_beta(opt, "beta2", cfg.beta2);
    if (!(std::isfinite(cfg.eps) && cfg.eps >= 0.0))
      SM_INPUT_ERROR("optimizer '" << opt << "': invalid eps " << cfg.eps << " (must be >= 0)");
    return std::make_unique<CudaOptimizer>(
        cfg, std::move(params), cfg.name == "adam" ? CudaOptimizer::Kind::Adam : CudaOptimizer::Kind::AdamW);
  }
  SM_INPUT_ERROR("unknown optimizer '" << cfg.name << "' (expected sgd, adam or adamw)");
}

void sgd_update_cuda(Param& p, Tensor* momentum_buffer, double lr, double weight_decay, double momentum,
                     bool nesterov) {
  check_cuda_param(p);
  if (momentum_buffer) check_state(p, *momentum_buffer, "momentum_buffer");
  cuda::SgdStepArgs a;
  a.lr = lr;
  a.weight_decay = weight_decay;
  a.momentum = momentum;
  a.nesterov = nesterov;
  cuda::DeviceGuard guard(p.value.device().ordinal);
  cuda::sgd_step_cuda(p.value.data<float>(), p.grad.data<float>(),
                      momentum_buffer ? momentum_buffer->data<float>() : nullptr, p.value.numel(), a, nullptr,
                      cuda::stream_for(p.value.device()));
}

void adam_update_cuda(Param& p, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                      double eps, double weight_decay, bool decoupled, int64_t t) {
  check_cuda_param(p);
  check_state(p, exp_avg, "exp_avg");
  check_state(p, exp_avg_sq, "exp_avg_sq");
  SM_CHECK(t >= 1, "adam step " << t << " (1-based)");
  const cuda::AdamStepArgs a = cuda::adam_step_args(lr, beta1, beta2, eps, weight_decay, decoupled, t);
  cuda::DeviceGuard guard(p.value.device().ordinal);
  cuda::adam_step_cuda(p.value.data<float>(), p.grad.data<float>(), exp_avg.data<float>(), exp_avg_sq.data<float>(),
                       p.value.numel(), a, nullptr, cuda::stream_for(p.value.device()));
}

double clip_grad_norm_cuda(const std::vector<Param*>& params, double max_norm, Collectives* group,
                           const std::vector<Param*>* counted) {
  std::vector<cuda::GradSpan> spans, counted_spans;
  Device dev = Device::cpu();
  for (Param* p : params) {
    SM_CHECK(p != nullptr, "clip_grad_norm: null param");
    check_cuda_param(*p);
    SM_CHECK(dev.is_cpu() || dev == p->grad.device(), "clip_grad_norm over two devices");
    dev = p->grad.device();
    spans.push_back({p->grad.data<float>(), p->grad.numel()});
  }
  if (counted)
    for (Param* p : *counted) counted_spans.push_back({p->grad.data<float>(), p->grad.numel()});
  if (spans.empty()) return 0.0;
  cuda::DeviceGuard guard(dev.ordinal);
  cudaStream_t st = cuda::stream_for(dev);
  Tensor sum_sq = Tensor::zeros({1}, DType::F64, dev);
  if (!counted || !counted_spans.empty())
    cuda::grad_sum_squares_cuda(counted ? counted_spans : spans, sum_sq.data<double>(), st);
  if (group != nullptr) {
    Tensor host = sum_sq.to(Device::cpu());  // synchronises
    group->all_reduce_sum(host);
    sum_sq.copy_from(host);
  }
  const double norm = std::sqrt(sum_sq.item());  // synchronises
  cuda::clip_grads_cuda(spans, sum_sq.data<double>(), max_norm, st);
  return norm;
}

#else  // !SPIKEMESH_HAVE_CUDA

std::unique_ptr<Optimizer> make_optimizer_cuda(const OptimizerConfig&, std::vector<Param*>) {
  SM_CHECK(false, "the CUDA optimizer needs a CUDA build");
  return nullptr;
}
void sgd_update_cuda(Param&, Tensor*, double, double, double, bool) {
  SM_CHECK(false, "the CUDA optimizer needs a CUDA build");
}
void adam_update_cuda(Param&, Tensor&, Tensor&, double, double, double, double, double, bool, int64_t) {
  SM_CHECK(false, "the CUDA optimizer needs a CUDA build");
}
double clip_grad_norm_cuda(const std::vector<Param*>&, double, Collectives*, const std::vector<Param*>*) {
  SM_CHECK(false, "clipping CUDA gradients needs a CUDA build");
  return 0.0;
}

#endif  // SPIKEMESH_HAVE_CUDA

}  // namespace sm
