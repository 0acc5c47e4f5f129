// loss.cpp — "mean_ce" and "rate_mse" losses over the model output [T, N, K] (see
// layers/loss.h). forward keeps the per-sample gradient factor [N, K] (double) and the
// output's shape/dtype; backward broadcasts it over T with the 1/T of the time mean.
#include "spikemesh/layers/loss.h"

#include <vector>

#include "spikemesh/kernels/cpu/loss.h"

namespace sm {
namespace {

// Shared validation, time mean and gradient broadcast; subclasses supply the math.
class TimeMeanLoss : public Loss {
 public:
  LossResult forward(const Tensor& out, const Tensor& labels) override {
    SM_CHECK(out.device().is_cpu() && labels.device().is_cpu(), name() << " runs on CPU tensors");
    SM_CHECK(out.ndim() == 3, name() << ": model output must be [T, N, K], got " << shape_str(out.shape()));
    SM_CHECK(out.dtype() == DType::F32 || out.dtype() == DType::F64,
             name() << " supports f32/f64 outputs, got " << dtype_name(out.dtype()));
    SM_CHECK(labels.dtype() == DType::I64, name() << ": labels must be i64, got " << dtype_name(labels.dtype()));
    steps_ = out.dim(0);
    n_ = out.dim(1);
    k_ = out.dim(2);
    SM_CHECK(labels.ndim() == 1 && labels.dim(0) == n_,
             name() << ": labels " << shape_str(labels.shape()) << " do not match batch of " << n_);
    const int64_t* lab = labels.data<int64_t>();
    for (int64_t i = 0; i < n_; ++i)
      if (lab[i] < 0 || lab[i] >= k_)
        SM_INPUT_ERROR("label " << lab[i] << " (sample " << i << " of the batch) is out of range for "
                                << k_ << " classes (valid: 0.." << k_ - 1 << ")");
    dtype_ = out.dtype();
    std::vector<double> mean(static_cast<size_t>(n_ * k_));  // [N, K]
    if (dtype_ == DType::F64)
      cpu::time_mean<double>(out.data<double>(), steps_, n_, k_, mean.data());
    else
      cpu::time_mean<float>(out.data<float>(), steps_, n_, k_, mean.data());
    grad_.assign(mean.size(), 0.0);
    LossResult r;
    r.count = n_;
    r.correct = cpu::count_correct(mean.data(), lab, n_, k_);
    r.loss = n_ > 0 ? loss_and_grad(mean.data(), lab) : 0.0;
    return r;
  }

  Tensor backward(double grad_scale) override {
    SM_CHECK(steps_ > 0, name() << ": backward before forward");
    Tensor d = Tensor::empty({steps_, n_, k_}, dtype_);  // [T, N, K]
    const double scale = grad_scale / static_cast<double>(steps_);
    if (dtype_ == DType::F64)
      cpu::broadcast_over_time<double>(grad_.data(), steps_, n_, k_, scale, d.data<double>());
    else
      cpu::broadcast_over_time<float>(grad_.data(), steps_, n_, k_, scale, d.data<float>());
    return d;
  }

 protected:
  // Returns the loss for the time-mean `mean` [N, K] and fills grad_ = dL/dmean [N, K].
  virtual double loss_and_grad(const double* mean, const int64_t* labels) = 0;

  int64_t steps_ = 0, n_ = 0, k_ = 0;
  DType dtype_ = DType::F32;
  std::vector<double> grad_;  // [N, K] dL/d(mean over T)
};

// mean over N of -log softmax(mean_t logits)[label].
class MeanCrossEntropy final : public TimeMeanLoss {
 public:
  std::string name() const override { return "mean_ce"; }

 protected:
  double loss_and_grad(const double* mean, const int64_t* labels) override {
    const double total = cpu::cross_entropy_sum(mean, labels, n_, k_, grad_.data());
    const double inv_n = 1.0 / static_cast<double>(n_);
    for (int64_t r = 0; r < n_; ++r) {
      grad_[r * k_ + labels[r]] -= 1.0;
      for (int64_t j = 0; j < k_; ++j) grad_[r * k_ + j] *= inv_n;
    }
    return total * inv_n;
  }
};

// mean over N·K of (mean_t out - onehot)².
class RateMse final : public TimeMeanLoss {
 public:
  std::string name() const override { return "rate_mse"; }

 protected:
  double loss_and_grad(const double* mean, const int64_t* labels) override {
    const double total = cpu::onehot_sq_error_sum(mean, labels, n_, k_, grad_.data());
    const double inv = 1.0 / static_cast<double>(n_ * k_);
    for (double& g : grad_) g *= 2.0 * inv;
    return total * inv;
  }
};

}  // namespace

std::unique_ptr<Loss> make_loss(const std::string& name) {
  if (name == "mean_ce") return std::make_unique<MeanCrossEntropy>();
  if (name == "rate_mse") return std::make_unique<RateMse>();
  SM_INPUT_ERROR("unknown loss '" << name << "' (valid: mean_ce, rate_mse)");
}

}  // namespace sm
