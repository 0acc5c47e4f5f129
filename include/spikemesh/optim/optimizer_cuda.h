// optimizer_cuda.h — the optimizers and gradient clipping on CUDA parameters (f32 master
// weights, gradients and state on one GPU), over the fused kernels of kernels/cuda/optim.h.
// Same semantics, state names and validation as optim/optimizer.h and grad_clip.h; every
// element's update is computed in double and stored f32 (GPU and CPU agree to f32 rounding).
// All work is enqueued on the parameters' device compute stream (no host synchronisation,
// except clip_grad_norm_cuda, which returns the norm).
//
// Two ways in:
//  * make_optimizer_cuda(cfg, params): a whole Optimizer for CUDA params (bench, tests; the
//    factory make_optimizer may dispatch here when params live on a GPU);
//  * sgd_update_cuda / adam_update_cuda: one parameter's update, for a device dispatch inside
//    the CPU optimizers' step loops (their state tensors are allocated on the param's device).
// In a build without CUDA these throw an internal error.
//
// make_optimizer_cuda's optimizers update every parameter in ONE launch per step (the
// multi-tensor kernels of kernels/cuda/optim_multi.h) and support the device-resident step
// (Optimizer::stage_step / enqueue_update): lr and Adam's bias corrections are read from
// device memory, so the update can be captured in a CUDA graph.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/core/tensor.h"

#include "spikemesh/layers/collectives.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

// Validates cfg exactly like make_optimizer (Input errors) and builds sgd/adam/adamw for
// CUDA params (each f32, value and grad on the same CUDA device).
std::unique_ptr<Optimizer> make_optimizer_cuda(const OptimizerConfig& cfg, std::vector<Param*> params);

// torch.optim.SGD on one CUDA param; momentum_buffer nullptr when momentum == 0.
void sgd_update_cuda(Param& p, Tensor* momentum_buffer, double lr, double weight_decay, double momentum,
                     bool nesterov);
// torch.optim.Adam (decoupled = false) / AdamW (true) on one CUDA param at step t (1-based,
// counting this step).
void adam_update_cuda(Param& p, Tensor& exp_avg, Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                      double eps, double weight_decay, bool decoupled, int64_t t);

// clip_grad_norm (grad_clip.h) for CUDA grads: the squared sum in a fixed order on the device,
// all-reduced over `group` when given (through a host double), clipping on the device.
// Returns the norm before clipping (one synchronisation).
double clip_grad_norm_cuda(const std::vector<Param*>& params, double max_norm, Collectives* group = nullptr,
                           const std::vector<Param*>* counted = nullptr);

// Clipping by the global norm with every value on the device, for a step captured in a CUDA
// graph (one rank, no all-reduce): enqueue() computes sum_sq() (f64 [1], device) over the
// `counted` grads exactly as clip_grad_norm_cuda does (bitwise: the same order) and scales
// the `scaled` grads by max_norm / (sqrt(sum_sq) + 1e-6) when that is below 1, in four
// launches whatever the number of tensors, without a host synchronisation. The norm is
// sqrt(sum_sq()) once the caller has read it back. The grads' storage must not move while
// this object lives (its tables hold their addresses).
class DeviceGradClip {
 public:
  DeviceGradClip(const std::vector<Param*>& scaled, const std::vector<Param*>& counted, double max_norm);
  ~DeviceGradClip();
  DeviceGradClip(const DeviceGradClip&) = delete;
  DeviceGradClip& operator=(const DeviceGradClip&) = delete;
  void enqueue();  // on the grads' device compute stream (capturable)
  const Tensor& sum_sq() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sm
