// loss.cpp — "mean_ce" and "rate_mse" losses over the model output [T, N, K] (see
// layers/loss.h). forward keeps, in its microbatch slot, the per-sample gradient factor
// [N, K] (double) and the output's shape/dtype; backward broadcasts it over T with the 1/T of
// the time mean and releases the slot.
#include "spikemesh/layers/loss.h"

#include <vector>

#include "loss_common.h"
#include "spikemesh/kernels/cpu/loss.h"

namespace sm {

namespace loss_detail {

LossSaved check_inputs(const std::string& name, const Tensor& out, const Tensor& labels_host) {
  SM_CHECK(out.ndim() == 3, name << ": model output must be [T, N, K], got " << shape_str(out.shape()));
  SM_CHECK(labels_host.dtype() == DType::I64, name << ": labels must be i64, got " << dtype_name(labels_host.dtype()));
  LossSaved s;
  s.steps = out.dim(0);
  s.n = out.dim(1);
  s.k = out.dim(2);
  s.dtype = out.dtype();
  SM_CHECK(labels_host.ndim() == 1 && labels_host.dim(0) == s.n,
           name << ": labels " << shape_str(labels_host.shape()) << " do not match batch of " << s.n);
  const int64_t* lab = labels_host.data<int64_t>();
  for (int64_t i = 0; i < s.n; ++i)
    if (lab[i] < 0 || lab[i] >= s.k)
      SM_INPUT_ERROR("label " << lab[i] << " (sample " << i << " of the batch) is out of range for " << s.k
                              << " classes (valid: 0.." << s.k - 1 << ")");
  return s;
}

const double* check_soft_targets(const std::string& name, const Tensor& soft, int64_t n, int64_t k) {
  if (!soft.defined()) return nullptr;
  SM_CHECK(soft.device().is_cpu() && soft.dtype() == DType::F64 && soft.ndim() == 2 && soft.dim(0) == n &&
               soft.dim(1) == k,
           name << ": soft targets must be host f64 [" << n << ", " << k << "], got " << shape_str(soft.shape()));
  return soft.data<double>();
}

}  // namespace loss_detail

namespace {

using loss_detail::LossSaved;

// The math of a loss on the time mean: returns the loss of mean [N, K] and fills
// grad [N, K] = dL/dmean; against `soft` [N, K] targets when given, else one-hot labels.
using LossMath = double (*)(const double* mean, const int64_t* labels, const double* soft, int64_t n, int64_t k,
                            double* grad);

// mean over N of -log softmax(mean_t logits)[label] (soft: of Σ_k target_k·(-log softmax_k)).
double mean_ce(const double* mean, const int64_t* labels, const double* soft, int64_t n, int64_t k, double* grad) {
  const double total = soft ? cpu::soft_cross_entropy_sum(mean, soft, n, k, grad)
                            : cpu::cross_entropy_sum(mean, labels, n, k, grad);  // grad = softmax
  const double inv_n = 1.0 / static_cast<double>(n);
  for (int64_t r = 0; r < n; ++r) {
    if (soft)
      for (int64_t j = 0; j < k; ++j) grad[r * k + j] -= soft[r * k + j];
    else
      grad[r * k + labels[r]] -= 1.0;
    for (int64_t j = 0; j < k; ++j) grad[r * k + j] *= inv_n;
  }
  return total * inv_n;
}

// mean over N·K of (mean_t out - onehot)² (soft: of (mean_t out - target)²).
double rate_mse(const double* mean, const int64_t* labels, const double* soft, int64_t n, int64_t k, double* grad) {
  const double total = soft ? cpu::soft_sq_error_sum(mean, soft, n, k, grad)
                            : cpu::onehot_sq_error_sum(mean, labels, n, k, grad);  // grad = difference
  const double inv = 1.0 / static_cast<double>(n * k);
  for (int64_t i = 0; i < n * k; ++i) grad[i] *= 2.0 * inv;
  return total * inv;
}

// Validation, time mean and gradient broadcast around one LossMath.
class TimeMeanLoss final : public Loss {
 public:
  TimeMeanLoss(std::string name, LossMath math) : name_(std::move(name)), math_(math) {}
  std::string name() const override { return name_; }

  LossResult forward(const Tensor& out, const Tensor& labels, int slot = 0,
                     const Tensor& soft_targets = Tensor()) override {
    SM_CHECK(out.device().is_cpu() && labels.device().is_cpu(), name_ << " runs on CPU tensors");
    SM_CHECK(out.dtype() == DType::F32 || out.dtype() == DType::F64,
             name_ << " supports f32/f64 outputs, got " << dtype_name(out.dtype()));
    LossSaved s = loss_detail::check_inputs(name_, out, labels);
    const int64_t n = s.n, k = s.k;
    const int64_t* lab = labels.data<int64_t>();
    std::vector<double> mean(static_cast<size_t>(n * k));  // [N, K]
    if (s.dtype == DType::F64)
      cpu::time_mean<double>(out.data<double>(), s.steps, n, k, mean.data());
    else
      cpu::time_mean<float>(out.data<float>(), s.steps, n, k, mean.data());
    s.grad = Tensor::zeros({n, k}, DType::F64);  // [N, K]
    LossResult r;
    r.count = n;
    r.correct = cpu::count_correct(mean.data(), lab, n, k);
    if (per_class()) {
      r.class_correct.assign(static_cast<size_t>(k), 0);
      r.class_count.assign(static_cast<size_t>(k), 0);
      cpu::count_correct_per_class(mean.data(), lab, n, k, r.class_correct.data(), r.class_count.data());
      r.time_mean = mean;
    }
    const double* soft = loss_detail::check_soft_targets(name_, soft_targets, n, k);
    r.loss = n > 0 ? math_(mean.data(), lab, soft, n, k, s.grad.data<double>()) : 0.0;
    slots_.fresh(slot) = std::move(s);
    return r;
  }

  Tensor backward(double grad_scale = 1.0, int slot = 0) override {
    return loss_detail::take_gradient(slots_, slot, name_, grad_scale, [](const LossSaved& s, double scale, Tensor& d) {
      if (s.dtype == DType::F64)
        cpu::broadcast_over_time<double>(s.grad.data<double>(), s.steps, s.n, s.k, scale, d.data<double>());
      else
        cpu::broadcast_over_time<float>(s.grad.data<double>(), s.steps, s.n, s.k, scale, d.data<float>());
    });
  }

 private:
  std::string name_;
  LossMath math_;
  SlotStore<LossSaved> slots_;
};

}  // namespace

std::unique_ptr<Loss> make_loss(const std::string& name) {
  if (name == "mean_ce") return std::make_unique<TimeMeanLoss>(name, mean_ce);
  if (name == "rate_mse") return std::make_unique<TimeMeanLoss>(name, rate_mse);
  SM_INPUT_ERROR("unknown loss '" << name << "' (valid: mean_ce, rate_mse)");
}

}  // namespace sm
