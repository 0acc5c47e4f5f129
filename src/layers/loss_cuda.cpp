// loss_cuda.cpp — with_cuda_support(): the losses of layers/loss.h on CUDA outputs, over
// kernels/cuda/loss.h (time mean, per-row loss and gradient in double, fixed-order sums;
// only the final [T, N, K] gradient in the output's dtype). Labels are validated on the host
// (an out-of-range label is the same Input error as on the CPU) and copied to the device.
#include "spikemesh/layers/loss.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "cuda_layer_util.h"
#include "spikemesh/kernels/cuda/loss.h"
#endif

namespace sm {

#ifdef SPIKEMESH_HAVE_CUDA
namespace {

class DeviceAwareLoss final : public Loss {
 public:
  explicit DeviceAwareLoss(std::unique_ptr<Loss> inner) : inner_(std::move(inner)) {
    SM_CHECK(inner_, "with_cuda_support of no loss");
    SM_CHECK(inner_->name() == "mean_ce" || inner_->name() == "rate_mse",
             "loss '" << inner_->name() << "' has no CUDA implementation");
  }
  std::string name() const override { return inner_->name(); }

  LossResult forward(const Tensor& out, const Tensor& labels) override {
    on_device_ = out.device().is_cuda();
    if (!on_device_) return inner_->forward(out, labels);
    SM_CHECK(out.ndim() == 3, name() << ": model output must be [T, N, K], got " << shape_str(out.shape()));
    cuda_layer::check_activation(out, "loss", name());
    SM_CHECK(labels.dtype() == DType::I64, name() << ": labels must be i64, got " << dtype_name(labels.dtype()));
    steps_ = out.dim(0);
    n_ = out.dim(1);
    k_ = out.dim(2);
    SM_CHECK(labels.ndim() == 1 && labels.dim(0) == n_,
             name() << ": labels " << shape_str(labels.shape()) << " do not match batch of " << n_);
    // Validate on the host (labels are small), then use a device copy.
    const Tensor host_labels = labels.to(Device::cpu());
    const int64_t* lab = host_labels.data<int64_t>();
    for (int64_t i = 0; i < n_; ++i)
      if (lab[i] < 0 || lab[i] >= k_)
        SM_INPUT_ERROR("label " << lab[i] << " (sample " << i << " of the batch) is out of range for " << k_
                                << " classes (valid: 0.." << k_ - 1 << ")");
    const Tensor dev_labels = labels.device() == out.device() ? labels : host_labels.to(out.device());
    dtype_ = out.dtype();
    device_ = out.device();
    CudaAllocLabel label("loss", nullptr);
    cudaStream_t st = cuda_layer::stream_of(out);
    Tensor mean = Tensor::empty({n_, k_}, DType::F64, device_);  // [N, K] time mean
    grad_ = Tensor::empty({n_, k_}, DType::F64, device_);        // [N, K] dL/dmean
    Tensor result = Tensor::empty({2}, DType::F64, device_);     // loss, (unused)
    Tensor correct = Tensor::empty({1}, DType::I64, device_);
    cuda_layer::dispatch_activation(dtype_, "loss", [&](auto t) {
      using T = decltype(t);
      cuda::time_mean_cuda<T>(static_cast<const T*>(out.raw()), steps_, n_, k_, mean.data<double>(), st);
    });
    LossResult r;
    r.count = n_;
    if (n_ == 0) return r;
    if (name() == "mean_ce")
      cuda::cross_entropy_cuda(mean.data<double>(), dev_labels.data<int64_t>(), n_, k_, result.data<double>(),
                               correct.data<int64_t>(), grad_.data<double>(), st);
    else
      cuda::rate_mse_cuda(mean.data<double>(), dev_labels.data<int64_t>(), n_, k_, result.data<double>(),
                          correct.data<int64_t>(), grad_.data<double>(), st);
    r.loss = result.at(0);  // synchronises
    r.correct = static_cast<int64_t>(correct.item());
    return r;
  }

  Tensor backward(double grad_scale) override {
    if (!on_device_) return inner_->backward(grad_scale);
    SM_CHECK(steps_ > 0, name() << ": backward before forward");
    Tensor d = Tensor::empty({steps_, n_, k_}, dtype_, device_);  // [T, N, K]
    if (n_ == 0) return d;
    const double scale = grad_scale / static_cast<double>(steps_);
    cudaStream_t st = cuda_layer::stream_of(d);
    cuda_layer::dispatch_activation(dtype_, "loss", [&](auto t) {
      using T = decltype(t);
      cuda::broadcast_over_time_cuda<T>(grad_.data<double>(), steps_, n_, k_, scale, static_cast<T*>(d.raw()), st);
    });
    return d;
  }

 private:
  std::unique_ptr<Loss> inner_;
  bool on_device_ = false;
  int64_t steps_ = 0, n_ = 0, k_ = 0;
  DType dtype_ = DType::F32;
  Device device_;
  Tensor grad_;  // device double [N, K]
};

}  // namespace

std::unique_ptr<Loss> with_cuda_support(std::unique_ptr<Loss> inner) {
  return std::make_unique<DeviceAwareLoss>(std::move(inner));
}

#else

std::unique_ptr<Loss> with_cuda_support(std::unique_ptr<Loss> inner) { return inner; }

#endif  // SPIKEMESH_HAVE_CUDA

}  // namespace sm
