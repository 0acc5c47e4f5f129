// optim.h (kernels/cuda) — fused optimizer updates on f32 master weights and the global
// gradient norm for clipping, matching src/optim/sgd.cpp, adam.cpp and grad_clip.cpp
// (PyTorch semantics). Per element the update is computed in double exactly as the CPU
// code writes it and the state is stored rounded to f32, so GPU and CPU agree to f32
// rounding. Optionally the updated weights are also written as bf16 (a compute copy).
// Include only when SPIKEMESH_HAVE_CUDA is defined. Device pointers; async on `stream`.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace sm {
namespace cuda {

// torch.optim.SGD (dampening 0): d = g + wd·p; buf = momentum·buf + d (stored f32);
// d = nesterov ? d + momentum·buf : buf; p += -lr·d. momentum_buf nullptr: no momentum.
struct SgdStepArgs {
  double lr = 0.0, weight_decay = 0.0, momentum = 0.0;
  bool nesterov = false;
};
// p, g, momentum_buf: f32 [n]; p_bf16: bf16 copy of the updated p, or nullptr.
void sgd_step_cuda(float* p, const float* g, float* momentum_buf, int64_t n,
                   const SgdStepArgs& a, __nv_bfloat16* p_bf16, cudaStream_t stream);

// torch.optim.Adam (l2 = wd added to the grad) / AdamW (decay_factor = 1 - lr·wd), no amsgrad:
//   m = lerp(m, g, 1-β1); v = β2·v + (1-β2)·g²; denom = sqrt(v)/bias_corr2_sqrt + eps;
//   p += -step_size·m/denom, step_size = lr/(1-β1^t), bias_corr2_sqrt = sqrt(1-β2^t).
struct AdamStepArgs {
  double l2 = 0.0, decay_factor = 1.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double step_size = 0.0, bias_corr2_sqrt = 1.0;
};
// The scalars of step t (t >= 1, counting this step), as adam.cpp computes them.
AdamStepArgs adam_step_args(double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled, int64_t t);
// p, g, exp_avg, exp_avg_sq: f32 [n]; p_bf16: bf16 copy of the updated p, or nullptr.
void adam_step_cuda(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                    const AdamStepArgs& a, __nv_bfloat16* p_bf16, cudaStream_t stream);

// One gradient tensor of a multi-tensor operation (device pointer, element count).
struct GradSpan {
  float* data = nullptr;
  int64_t n = 0;
};

// sum_sq (device double [1]) = Σ over tensors (in order) of Σ g², each tensor summed as
// fixed 8192-element blocks (fixed tree inside a block) whose partials are added in block
// order, tensor totals added in tensor order — independent of the GPU and of timing.
// Uses stream-ordered scratch (one double per block). The caller all-reduces sum_sq over
// the group holding grad shards, then takes the norm sqrt(sum_sq) (or scales on device).
void grad_sum_squares_cuda(const std::vector<GradSpan>& grads, double* sum_sq,
                           cudaStream_t stream);

// Clipping (torch.nn.utils.clip_grad_norm_): factor = max_norm/(sqrt(sum_sq) + 1e-6); every
// grad is multiplied by factor (in double, stored f32) unless factor >= 1 (a NaN norm makes
// the grads NaN, as in PyTorch). sum_sq is read on the device: no host synchronisation.
// max_norm <= 0: nothing is done.
void clip_grads_cuda(const std::vector<GradSpan>& grads, const double* sum_sq, double max_norm,
                     cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
