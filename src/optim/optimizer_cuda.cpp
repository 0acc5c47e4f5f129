// optimizer_cuda.cpp — SGD / Adam / AdamW and gradient clipping on CUDA parameters over
// kernels/cuda/optim.h (contracts in optim/optimizer_cuda.h).
#include "spikemesh/optim/optimizer_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/kernels/cuda/optim.h"
#include "spikemesh/kernels/cuda/optim_multi.h"
#include "spikemesh/kernels/multi_tensor.h"
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

// Host bytes of `v` as a device U8 tensor on `dev` (a synchronous upload).
template <typename T>
Tensor device_bytes(const std::vector<T>& v, Device dev) {
  Tensor host = Tensor::empty({static_cast<int64_t>(std::max<size_t>(1, v.size() * sizeof(T)))}, DType::U8);
  if (!v.empty()) std::memcpy(host.raw(), v.data(), v.size() * sizeof(T));
  return host.to(dev);
}

// One launch per step over every param (kernels/cuda/optim_multi.h): a device table of the
// params' pointers and a chunk table, built at construction; the per-step values in a device
// struct written by stage_step(). The table is rebuilt (in place) when a param's storage moved.
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
    if (params_.empty()) return;
    dev_ = params_.front()->value.device();
    for (const Param* p : params_)
      SM_CHECK(p->value.device() == dev_, "the CUDA optimizer's params live on " << dev_.str() << " and "
                                                                                  << p->value.device().str());
    std::vector<int64_t> sizes;
    for (const Param* p : params_) sizes.push_back(p->value.numel());
    const std::vector<TensorChunk> chunks = build_chunk_table(sizes, kMultiTensorChunk);
    num_chunks_ = static_cast<int64_t>(chunks.size());
    cuda::DeviceGuard guard(dev_.ordinal);
    table_host_ = param_table();
    table_ = device_bytes(table_host_, dev_);
    chunks_ = device_bytes(chunks, dev_);
    scalars_ = Tensor::zeros({static_cast<int64_t>(sizeof(OptimStepScalars))}, DType::U8, dev_);
  }

  void step() override {
    stage_step();
    enqueue_update(nullptr);
  }

  bool supports_captured_update() const override { return true; }

  void stage_step() override {
    ++step_count_;
    if (params_.empty()) return;
    const std::vector<cuda::MultiTensorParam> now = param_table();
    cuda::DeviceGuard guard(dev_.ordinal);
    if (now.size() != table_host_.size() ||
        std::memcmp(now.data(), table_host_.data(), now.size() * sizeof(now[0])) != 0) {
      // A param's storage moved: the same device buffer (a captured update reads it) gets the new pointers.
      table_.copy_from(device_bytes(now, Device::cpu()));
      table_host_ = now;
    }
    const OptimStepScalars s = kind_ == Kind::Sgd ? sgd_step_scalars(cfg_.lr)
                                                  : adam_step_scalars(cfg_.lr, cfg_.beta1, cfg_.beta2,
                                                                      cfg_.weight_decay, kind_ == Kind::AdamW,
                                                                      step_count_);
    cuda::store_step_scalars_cuda(reinterpret_cast<OptimStepScalars*>(scalars_.raw()), s, cuda::stream_for(dev_));
  }

  void enqueue_update(const int32_t* skip) override {
    if (params_.empty()) return;
    cuda::DeviceGuard guard(dev_.ordinal);
    const auto* table = reinterpret_cast<const cuda::MultiTensorParam*>(table_.raw());
    const auto* chunks = reinterpret_cast<const TensorChunk*>(chunks_.raw());
    const auto* scalars = reinterpret_cast<const OptimStepScalars*>(scalars_.raw());
    if (kind_ == Kind::Sgd) {
      cuda::MultiSgdArgs a;
      a.weight_decay = cfg_.weight_decay;
      a.momentum = cfg_.momentum;
      a.nesterov = cfg_.nesterov;
      cuda::sgd_multi_step_cuda(table, chunks, num_chunks_, a, scalars, skip, cuda::stream_for(dev_));
    } else {
      cuda::MultiAdamArgs a;
      a.weight_decay = cfg_.weight_decay;
      a.beta1 = cfg_.beta1;
      a.beta2 = cfg_.beta2;
      a.eps = cfg_.eps;
      a.decoupled = kind_ == Kind::AdamW;
      cuda::adam_multi_step_cuda(table, chunks, num_chunks_, a, scalars, skip, cuda::stream_for(dev_));
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
  Device dev_ = Device::cpu();
  std::vector<cuda::MultiTensorParam> table_host_;  // what table_ holds
  Tensor table_, chunks_, scalars_;                 // device: MultiTensorParam[], TensorChunk[], OptimStepScalars
  int64_t num_chunks_ = 0;

  // The params' current pointers and sizes.
  std::vector<cuda::MultiTensorParam> param_table() const {
    std::vector<cuda::MultiTensorParam> t(params_.size());
    for (size_t k = 0; k < params_.size(); ++k) {
      const Param& p = *params_[k];
      t[k].p = p.value.data<float>();
      t[k].g = p.grad.data<float>();
      t[k].state1 = first_.empty() ? nullptr : first_[k].data<float>();
      t[k].state2 = second_.empty() ? nullptr : second_[k].data<float>();
      t[k].n = p.value.numel();
      t[k].decayed = p.weight_decay && cfg_.weight_decay != 0.0 ? 1 : 0;
    }
    return t;
  }
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

struct DeviceGradClip::Impl {
  Device dev = Device::cpu();
  double max_norm = 0.0;
  Tensor scaled_spans, scaled_chunks;  // device GradSpan[], TensorChunk[] (kMultiTensorChunk)
  Tensor counted_spans, counted_chunks, counted_starts;  // kGradNormBlock chunks, starts [count + 1]
  int64_t scaled_num_chunks = 0, counted_num_chunks = 0, counted_count = 0;
  Tensor scratch, sum_sq;  // device f64 [chunks + count], f64 [1]
};

namespace {
std::vector<cuda::GradSpan> spans_of(const std::vector<Param*>& params, Device& dev) {
  std::vector<cuda::GradSpan> spans;
  for (Param* p : params) {
    SM_CHECK(p != nullptr, "clip_grad_norm: null param");
    SM_CHECK(p->grad.defined() && p->grad.device().is_cuda() && p->grad.dtype() == DType::F32,
             "param '" << p->name << "': clipping on the device needs f32 CUDA grads");
    SM_CHECK(dev.is_cpu() || dev == p->grad.device(), "clip_grad_norm over two devices");
    dev = p->grad.device();
    spans.push_back({p->grad.data<float>(), p->grad.numel()});
  }
  return spans;
}
std::vector<int64_t> sizes_of(const std::vector<cuda::GradSpan>& spans) {
  std::vector<int64_t> sizes;
  for (const cuda::GradSpan& s : spans) sizes.push_back(s.n);
  return sizes;
}
}  // namespace

DeviceGradClip::DeviceGradClip(const std::vector<Param*>& scaled, const std::vector<Param*>& counted,
                               double max_norm)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.max_norm = max_norm;
  const std::vector<cuda::GradSpan> s = spans_of(scaled, m.dev), c = spans_of(counted, m.dev);
  SM_CHECK(m.dev.is_cuda(), "DeviceGradClip: no CUDA gradient");
  const std::vector<TensorChunk> sc = build_chunk_table(sizes_of(s), kMultiTensorChunk);
  const std::vector<TensorChunk> cc = build_chunk_table(sizes_of(c), kGradNormBlock);
  m.scaled_num_chunks = static_cast<int64_t>(sc.size());
  m.counted_num_chunks = static_cast<int64_t>(cc.size());
  m.counted_count = static_cast<int64_t>(c.size());
  cuda::DeviceGuard guard(m.dev.ordinal);
  m.scaled_spans = device_bytes(s, m.dev);
  m.scaled_chunks = device_bytes(sc, m.dev);
  m.counted_spans = device_bytes(c, m.dev);
  m.counted_chunks = device_bytes(cc, m.dev);
  m.counted_starts = device_bytes(chunk_starts(cc, m.counted_count), m.dev);
  m.scratch = Tensor::zeros({m.counted_num_chunks + m.counted_count + 1}, DType::F64, m.dev);
  m.sum_sq = Tensor::zeros({1}, DType::F64, m.dev);
}

DeviceGradClip::~DeviceGradClip() = default;

void DeviceGradClip::enqueue() {
  Impl& m = *impl_;
  cuda::DeviceGuard guard(m.dev.ordinal);
  cudaStream_t st = cuda::stream_for(m.dev);
  cuda::grad_sum_squares_multi_cuda(reinterpret_cast<const cuda::GradSpan*>(m.counted_spans.raw()),
                                    reinterpret_cast<const TensorChunk*>(m.counted_chunks.raw()),
                                    m.counted_num_chunks, reinterpret_cast<const int64_t*>(m.counted_starts.raw()),
                                    m.counted_count, m.scratch.data<double>(), m.sum_sq.data<double>(), st);
  cuda::clip_grads_multi_cuda(reinterpret_cast<const cuda::GradSpan*>(m.scaled_spans.raw()),
                              reinterpret_cast<const TensorChunk*>(m.scaled_chunks.raw()), m.scaled_num_chunks,
                              m.sum_sq.data<double>(), m.max_norm, st);
}

const Tensor& DeviceGradClip::sum_sq() const { return impl_->sum_sq; }

#else  // !SPIKEMESH_HAVE_CUDA

struct DeviceGradClip::Impl {
  Tensor sum_sq;
};
DeviceGradClip::DeviceGradClip(const std::vector<Param*>&, const std::vector<Param*>&, double) {
  SM_CHECK(false, "clipping CUDA gradients needs a CUDA build");
}
DeviceGradClip::~DeviceGradClip() = default;
void DeviceGradClip::enqueue() {}
const Tensor& DeviceGradClip::sum_sq() const { return impl_->sum_sq; }

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
