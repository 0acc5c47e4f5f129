// loss_cuda.cpp — with_cuda_support(): the losses of layers/loss.h on CUDA outputs, over
// kernels/cuda/loss.h (time mean, per-row loss and gradient in double, fixed-order sums;
// only the final [T, N, K] gradient in the output's dtype). Labels are validated on the host
// (an out-of-range label is the same Input error as on the CPU, loss_common.h) and copied to
// the device. Per microbatch slot the wrapper remembers which side ran the forward: host
// outputs go to the inner loss (same slot), device outputs keep their state here.
#include "spikemesh/layers/loss.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "layer_util_cuda.h"
#include "loss_common.h"
#include "spikemesh/core/graph_capture_cuda.h"
#include "spikemesh/kernels/cpu/loss.h"
#include "spikemesh/kernels/cuda/loss.h"
#endif

namespace sm {

#ifdef SPIKEMESH_HAVE_CUDA
namespace {

using loss_detail::LossSaved;

class DeviceAwareLoss final : public Loss {
 public:
  explicit DeviceAwareLoss(std::unique_ptr<Loss> inner) : inner_(std::move(inner)) {
    SM_CHECK(inner_, "with_cuda_support of no loss");
    SM_CHECK(inner_->name() == "mean_ce" || inner_->name() == "rate_mse",
             "loss '" << inner_->name() << "' has no CUDA implementation");
  }
  std::string name() const override { return inner_->name(); }

  LossResult forward(const Tensor& out, const Tensor& labels, int slot = 0,
                     const Tensor& soft_targets = Tensor()) override {
    if (!out.device().is_cuda()) {
      slots_.fresh(slot).on_device = false;  // backward goes to the inner loss
      inner_->set_per_class(per_class());
      return inner_->forward(out, labels, slot, soft_targets);
    }
    if (soft_targets.defined()) return forward_on_host(out, labels, slot, soft_targets);
    SM_CHECK(out.ndim() == 3, name() << ": model output must be [T, N, K], got " << shape_str(out.shape()));
    cuda_layer::check_activation(out, "loss", name());
    // Validate on the host (labels are small), then use a device copy. Under a CUDA graph
    // capture (core/graph_capture_cuda.h) nothing is read back: the labels must already be on
    // the device (the data set's labels were range-checked when it was opened; the kernels
    // clamp), and the loss and correct count stay on the device for the driver.
    GraphCapture* capture = active_graph_capture();
    LossSaved s;
    Tensor dev_labels = labels, host_labels;
    if (capture) {
      if (labels.device() != out.device()) refuse_graph_capture(name() + ": labels are not on the output's device");
      SM_CHECK(labels.dtype() == DType::I64 && labels.ndim() == 1 && labels.dim(0) == out.dim(1),
               name() << ": labels " << shape_str(labels.shape()) << " do not match batch of " << out.dim(1));
      s.steps = out.dim(0), s.n = out.dim(1), s.k = out.dim(2), s.dtype = out.dtype();
    } else {
      host_labels = labels.to(Device::cpu());
      s = loss_detail::check_inputs(name(), out, host_labels);
      if (labels.device() != out.device()) dev_labels = host_labels.to(out.device());
    }
    s.on_device = true;
    const int64_t steps = s.steps, n = s.n, k = s.k;
    const Device dev = out.device();
    CudaAllocLabel label("loss", nullptr);
    cudaStream_t st = cuda_layer::stream_of(out);
    Tensor mean = Tensor::empty({n, k}, DType::F64, dev);  // [N, K] time mean
    s.grad = Tensor::empty({n, k}, DType::F64, dev);       // [N, K] dL/dmean
    Tensor result = Tensor::empty({2}, DType::F64, dev);   // loss, (unused)
    Tensor correct = Tensor::empty({1}, DType::I64, dev);
    cuda_layer::dispatch_activation(s.dtype, "loss", [&](auto t) {
      using T = decltype(t);
      cuda::time_mean_cuda<T>(static_cast<const T*>(out.raw()), steps, n, k, mean.data<double>(), st);
    });
    LossResult r;
    r.count = n;
    if (n > 0) {
      if (name() == "mean_ce")
        cuda::cross_entropy_cuda(mean.data<double>(), dev_labels.data<int64_t>(), n, k, result.data<double>(),
                                 correct.data<int64_t>(), s.grad.data<double>(), st);
      else
        cuda::rate_mse_cuda(mean.data<double>(), dev_labels.data<int64_t>(), n, k, result.data<double>(),
                            correct.data<int64_t>(), s.grad.data<double>(), st);
      if (capture) {  // read by the driver after each replay
        capture->loss = result;
        capture->correct = correct;
      } else {
        r.loss = result.at(0);  // synchronises
        r.correct = static_cast<int64_t>(correct.item());
        if (per_class()) {  // evaluation: the [N, K] time mean on the host, counted as on the CPU
          const Tensor mh = mean.to(Device::cpu());
          r.class_correct.assign(static_cast<size_t>(k), 0);
          r.class_count.assign(static_cast<size_t>(k), 0);
          cpu::count_correct_per_class(mh.data<double>(), host_labels.data<int64_t>(), n, k, r.class_correct.data(),
                                       r.class_count.data());
          r.time_mean.assign(mh.data<double>(), mh.data<double>() + n * k);
        }
      }
    } else if (capture) {
      refuse_graph_capture(name() + ": an empty batch");
    }
    slots_.fresh(slot) = std::move(s);
    return r;
  }

  Tensor backward(double grad_scale = 1.0, int slot = 0) override {
    if (slots_.has(slot) && !slots_.get(slot).on_device) {
      const LossSaved s = slots_.get(slot);
      slots_.release(slot);
      Tensor d = inner_->backward(grad_scale, slot);
      return s.mirror.is_cuda() ? d.to(s.mirror).to_dtype(s.dtype) : d;
    }
    return loss_detail::take_gradient(slots_, slot, name(), grad_scale,
                                      [](const LossSaved& s, double scale, Tensor& d) {
                                        cudaStream_t st = cuda_layer::stream_of(d);
                                        cuda_layer::dispatch_activation(s.dtype, "loss", [&](auto t) {
                                          using T = decltype(t);
                                          cuda::broadcast_over_time_cuda<T>(s.grad.data<double>(), s.steps, s.n,
                                                                            s.k, scale, static_cast<T*>(d.raw()), st);
                                        });
                                      });
  }

 private:
  // Soft targets (mixing augmentations) on a GPU output: the [T, N, K] output is small, so it
  // is reduced by the inner loss on the host and its gradient copied back (never in a graph).
  LossResult forward_on_host(const Tensor& out, const Tensor& labels, int slot, const Tensor& soft_targets) {
    if (active_graph_capture()) refuse_graph_capture(name() + ": soft targets are reduced on the host");
    const DType dt = out.dtype() == DType::F64 ? DType::F64 : DType::F32;
    const Tensor host = out.to_dtype(dt).to(Device::cpu());
    LossSaved& s = slots_.fresh(slot);
    s.on_device = false;
    s.mirror = out.device();
    s.dtype = out.dtype();
    inner_->set_per_class(per_class());
    return inner_->forward(host, labels.to(Device::cpu()), slot, soft_targets);
  }

  std::unique_ptr<Loss> inner_;
  SlotStore<LossSaved> slots_;  // per slot: which side ran the forward, and the device state
};

}  // namespace

std::unique_ptr<Loss> with_cuda_support(std::unique_ptr<Loss> inner) {
  return std::make_unique<DeviceAwareLoss>(std::move(inner));
}

#else

std::unique_ptr<Loss> with_cuda_support(std::unique_ptr<Loss> inner) { return inner; }

#endif  // SPIKEMESH_HAVE_CUDA

}  // namespace sm
