// optim.cu (kernels/cuda) — fused SGD / Adam / AdamW steps on f32 master weights and the
// deterministic global gradient norm + clipping (see kernels/cuda/optim.h; src/optim/sgd.cpp,
// adam.cpp and grad_clip.cpp are the reference). Per element the update is evaluated in
// double with the CPU's expression order and stored rounded to f32.
#include <climits>
#include <cmath>

#include "common.cuh"
#include "optim_element.cuh"
#include "spikemesh/kernels/multi_tensor.h"
#include "spikemesh/kernels/cuda/optim.h"

namespace sm {
namespace cuda {
namespace {

constexpr int64_t kNormBlock = kGradNormBlock;

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ buf, int64_t n, SgdStepArgs a,
                           __nv_bfloat16* __restrict__ p_bf16) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride())
    detail::sgd_element(p, g, buf, p_bf16, i, a.lr, a.weight_decay, a.momentum, a.nesterov);
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v, int64_t n,
                            AdamStepArgs a, __nv_bfloat16* __restrict__ p_bf16) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride())
    detail::adam_element(p, g, m, v, p_bf16, i, a.l2, a.decay_factor, a.beta1, a.beta2, a.eps, a.step_size,
                         a.bias_corr2_sqrt);
}

// Block b: Σ g² over elements [b·kNormBlock, min(n, (b+1)·kNormBlock)) -> partial[b].
__global__ void __launch_bounds__(kThreads)
    sum_squares_kernel(const float* __restrict__ g, int64_t n, double* __restrict__ partial) {
  __shared__ double smem[kThreads];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kNormBlock;
  const int64_t end = begin + kNormBlock < n ? begin + kNormBlock : n;
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double x = g[i];
    acc += x * x;
  }
  const double total = detail::block_sum(acc, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void clip_kernel(float* __restrict__ g, int64_t n, const double* __restrict__ sum_sq,
                            double max_norm) {
  const double factor = max_norm / (sqrt(*sum_sq) + 1e-6);
  if (factor >= 1.0) return;  // clamp(max=1); a NaN factor scales (NaN propagates)
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride())
    g[i] = static_cast<float>(static_cast<double>(g[i]) * factor);
}

}  // namespace

void sgd_step_cuda(float* p, const float* g, float* momentum_buf, int64_t n, const SgdStepArgs& a,
                   __nv_bfloat16* p_bf16, cudaStream_t stream) {
  SM_CHECK(n >= 0, "sgd_step_cuda: negative size");
  if (n == 0) return;
  sgd_kernel<<<detail::blocks_for(n), kThreads, 0, stream>>>(p, g, momentum_buf, n, a, p_bf16);
  SM_CUDA_CHECK_LAUNCH();
}

AdamStepArgs adam_step_args(double lr, double beta1, double beta2, double eps,
                            double weight_decay, bool decoupled, int64_t t) {
  const OptimStepScalars s = adam_step_scalars(lr, beta1, beta2, weight_decay, decoupled, t);  // adam.cpp's values
  AdamStepArgs a;
  a.l2 = decoupled ? 0.0 : weight_decay;
  a.decay_factor = s.decay_factor;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.step_size = s.step_size;
  a.bias_corr2_sqrt = s.bias_corr2_sqrt;
  return a;
}

void adam_step_cuda(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                    const AdamStepArgs& a, __nv_bfloat16* p_bf16, cudaStream_t stream) {
  SM_CHECK(n >= 0, "adam_step_cuda: negative size");
  if (n == 0) return;
  adam_kernel<<<detail::blocks_for(n), kThreads, 0, stream>>>(p, g, exp_avg, exp_avg_sq, n, a, p_bf16);
  SM_CUDA_CHECK_LAUNCH();
}

void grad_sum_squares_cuda(const std::vector<GradSpan>& grads, double* sum_sq,
                           cudaStream_t stream) {
  int64_t total_blocks = 0;
  for (const GradSpan& s : grads) {
    SM_CHECK(s.n >= 0 && (s.n == 0 || s.data != nullptr), "grad_sum_squares_cuda: bad span");
    total_blocks += (s.n + kNormBlock - 1) / kNormBlock;
  }
  const int64_t count = static_cast<int64_t>(grads.size());
  // [total_blocks] block partials, then [count] per-tensor totals.
  detail::Scratch scratch(static_cast<size_t>(total_blocks + count) * sizeof(double), stream);
  double* partials = scratch.as<double>();
  double* totals = partials + total_blocks;
  int64_t offset = 0;
  for (int64_t k = 0; k < count; ++k) {
    const GradSpan& s = grads[static_cast<size_t>(k)];
    const int64_t blocks = (s.n + kNormBlock - 1) / kNormBlock;
    if (blocks > 0) {
      SM_CHECK(blocks <= INT32_MAX, "grad_sum_squares_cuda: tensor too large");
      sum_squares_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(s.data, s.n,
                                                                                partials + offset);
      SM_CUDA_CHECK_LAUNCH();
    }
    detail::sum_partials(partials + offset, blocks, totals + k, false, stream);  // 0 when empty
    offset += blocks;
  }
  detail::sum_partials(totals, count, sum_sq, false, stream);
}

void clip_grads_cuda(const std::vector<GradSpan>& grads, const double* sum_sq, double max_norm,
                     cudaStream_t stream) {
  if (!(max_norm > 0.0)) return;
  for (const GradSpan& s : grads) {
    SM_CHECK(s.n >= 0 && (s.n == 0 || s.data != nullptr), "clip_grads_cuda: bad span");
    if (s.n == 0) continue;
    clip_kernel<<<detail::blocks_for(s.n), kThreads, 0, stream>>>(s.data, s.n, sum_sq, max_norm);
    SM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cuda
}  // namespace sm
