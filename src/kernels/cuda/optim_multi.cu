// optim_multi.cu (kernels/cuda) — multi-tensor SGD / Adam / AdamW updates, gradient clipping
// and the global norm's sum of squares over chunk tables (kernels/cuda/optim_multi.h). One
// block per chunk; the per-element updates are optim_element.cuh's, shared with optim.cu.
#include <climits>
#include <cmath>

#include "common.cuh"
#include "optim_element.cuh"
#include "spikemesh/kernels/cuda/optim_multi.h"

namespace sm {
namespace cuda {
namespace {

static_assert(sizeof(TensorChunk) == 16, "TensorChunk is 16 bytes on both sides");
static_assert(sizeof(OptimStepScalars) == 64, "OptimStepScalars is 64 bytes on both sides");
static_assert(kMultiTensorChunk % kThreads == 0, "a chunk is whole blocks");

constexpr int kMaxFlagsPerLaunch = 32;
struct FlagBatch {
  ExpectedFlag flags[kMaxFlagsPerLaunch];
  int32_t count;
};

__global__ void store_scalars_kernel(OptimStepScalars* dst, OptimStepScalars v) { *dst = v; }

// The end of chunk c's elements in a tensor of n elements.
__device__ __forceinline__ int64_t chunk_end(const TensorChunk& c, int64_t n, int64_t chunk) {
  return c.begin + chunk < n ? c.begin + chunk : n;
}

__global__ void __launch_bounds__(kThreads)
    sgd_multi_kernel(const MultiTensorParam* __restrict__ params, const TensorChunk* __restrict__ chunks,
                     MultiSgdArgs a, const OptimStepScalars* __restrict__ scalars,
                     const int32_t* __restrict__ skip) {
  if (skip && *skip != 0) return;
  const TensorChunk c = chunks[blockIdx.x];
  const MultiTensorParam t = params[c.tensor];
  const double lr = scalars->lr;
  const double wd = t.decayed ? a.weight_decay : 0.0;
  const int64_t end = chunk_end(c, t.n, kMultiTensorChunk);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads)
    detail::sgd_element(t.p, t.g, t.state1, t.p_bf16, i, lr, wd, a.momentum, a.nesterov);
}

__global__ void __launch_bounds__(kThreads)
    adam_multi_kernel(const MultiTensorParam* __restrict__ params, const TensorChunk* __restrict__ chunks,
                      MultiAdamArgs a, const OptimStepScalars* __restrict__ scalars,
                      const int32_t* __restrict__ skip) {
  if (skip && *skip != 0) return;
  const TensorChunk c = chunks[blockIdx.x];
  const MultiTensorParam t = params[c.tensor];
  const OptimStepScalars s = *scalars;
  // adam_step_args for this tensor: wd = decay_of(p) (0 when the tensor opts out).
  const double l2 = a.decoupled || !t.decayed ? 0.0 : a.weight_decay;
  const double decay_factor = a.decoupled && t.decayed ? s.decay_factor : 1.0;
  const int64_t end = chunk_end(c, t.n, kMultiTensorChunk);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads)
    detail::adam_element(t.p, t.g, t.state1, t.state2, t.p_bf16, i, l2, decay_factor, a.beta1, a.beta2, a.eps,
                         s.step_size, s.bias_corr2_sqrt);
}

// Block b: Σ g² over chunk b (kGradNormBlock elements) -> partial[b] (optim.cu's
// sum_squares_kernel for one block of one tensor).
__global__ void __launch_bounds__(kThreads)
    sum_squares_multi_kernel(const GradSpan* __restrict__ spans, const TensorChunk* __restrict__ chunks,
                             double* __restrict__ partial) {
  __shared__ double smem[kThreads];
  const TensorChunk c = chunks[blockIdx.x];
  const GradSpan s = spans[c.tensor];
  const int64_t end = chunk_end(c, s.n, kGradNormBlock);
  double acc = 0.0;
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads) {
    const double x = s.data[i];
    acc += x * x;
  }
  const double total = detail::block_sum(acc, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Block k: tensor k's partials [starts[k], starts[k+1]) summed as detail::sum_partials does.
__global__ void __launch_bounds__(kThreads)
    tensor_totals_kernel(const double* __restrict__ partials, const int64_t* __restrict__ starts,
                         double* __restrict__ totals) {
  __shared__ double smem[kThreads];
  const int64_t first = starts[blockIdx.x], n = starts[blockIdx.x + 1] - first;
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) acc += partials[first + j];
  const double total = detail::block_sum(acc, smem);
  if (threadIdx.x == 0) totals[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads)
    clip_multi_kernel(const GradSpan* __restrict__ spans, const TensorChunk* __restrict__ chunks,
                      const double* __restrict__ sum_sq, double max_norm) {
  const double factor = max_norm / (sqrt(*sum_sq) + 1e-6);
  if (factor >= 1.0) return;  // clamp(max=1); a NaN factor scales (NaN propagates)
  const TensorChunk c = chunks[blockIdx.x];
  const GradSpan s = spans[c.tensor];
  const int64_t end = chunk_end(c, s.n, kMultiTensorChunk);
  for (int64_t i = c.begin + threadIdx.x; i < end; i += kThreads)
    s.data[i] = static_cast<float>(static_cast<double>(s.data[i]) * factor);
}

__global__ void flags_mismatch_kernel(FlagBatch b, int32_t* mismatch, bool accumulate) {
  int32_t differs = accumulate ? *mismatch : 0;
  for (int32_t k = 0; k < b.count; ++k)
    if ((*b.flags[k].flag != 0 ? 1 : 0) != b.flags[k].expected) differs = 1;
  *mismatch = differs;
}

unsigned grid_of(int64_t num_chunks, const char* what) {
  SM_CHECK(num_chunks > 0 && num_chunks <= INT32_MAX, what << ": " << num_chunks << " chunks");
  return static_cast<unsigned>(num_chunks);
}

}  // namespace

void store_step_scalars_cuda(OptimStepScalars* dst, const OptimStepScalars& v, cudaStream_t stream) {
  SM_CHECK(dst != nullptr, "store_step_scalars_cuda: no destination");
  store_scalars_kernel<<<1, 1, 0, stream>>>(dst, v);
  SM_CUDA_CHECK_LAUNCH();
}

void sgd_multi_step_cuda(const MultiTensorParam* params, const TensorChunk* chunks, int64_t num_chunks,
                         const MultiSgdArgs& a, const OptimStepScalars* scalars, const int32_t* skip,
                         cudaStream_t stream) {
  if (num_chunks == 0) return;
  sgd_multi_kernel<<<grid_of(num_chunks, "sgd_multi_step_cuda"), kThreads, 0, stream>>>(params, chunks, a, scalars,
                                                                                       skip);
  SM_CUDA_CHECK_LAUNCH();
}

void adam_multi_step_cuda(const MultiTensorParam* params, const TensorChunk* chunks, int64_t num_chunks,
                          const MultiAdamArgs& a, const OptimStepScalars* scalars, const int32_t* skip,
                          cudaStream_t stream) {
  if (num_chunks == 0) return;
  adam_multi_kernel<<<grid_of(num_chunks, "adam_multi_step_cuda"), kThreads, 0, stream>>>(params, chunks, a,
                                                                                         scalars, skip);
  SM_CUDA_CHECK_LAUNCH();
}

void grad_sum_squares_multi_cuda(const GradSpan* spans, const TensorChunk* chunks, int64_t num_chunks,
                                 const int64_t* starts, int64_t count, double* scratch, double* sum_sq,
                                 cudaStream_t stream) {
  SM_CHECK(count >= 0 && count <= INT32_MAX, "grad_sum_squares_multi_cuda: " << count << " tensors");
  double* partials = scratch;
  double* totals = scratch + num_chunks;
  if (num_chunks > 0) {
    sum_squares_multi_kernel<<<grid_of(num_chunks, "grad_sum_squares_multi_cuda"), kThreads, 0, stream>>>(
        spans, chunks, partials);
    SM_CUDA_CHECK_LAUNCH();
  }
  if (count > 0) {
    tensor_totals_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(partials, starts, totals);
    SM_CUDA_CHECK_LAUNCH();
  }
  detail::sum_partials(totals, count, sum_sq, false, stream);  // 0 when there is no tensor
}

void clip_grads_multi_cuda(const GradSpan* spans, const TensorChunk* chunks, int64_t num_chunks,
                           const double* sum_sq, double max_norm, cudaStream_t stream) {
  if (!(max_norm > 0.0) || num_chunks == 0) return;
  clip_multi_kernel<<<grid_of(num_chunks, "clip_grads_multi_cuda"), kThreads, 0, stream>>>(spans, chunks, sum_sq,
                                                                                          max_norm);
  SM_CUDA_CHECK_LAUNCH();
}

void flags_mismatch_cuda(const ExpectedFlag* flags, int64_t count, int32_t* mismatch, cudaStream_t stream) {
  SM_CHECK(count >= 0 && mismatch != nullptr, "flags_mismatch_cuda: bad arguments");
  int64_t done = 0;
  do {
    FlagBatch b{};
    b.count = static_cast<int32_t>(std::min<int64_t>(kMaxFlagsPerLaunch, count - done));
    for (int32_t k = 0; k < b.count; ++k) b.flags[k] = flags[done + k];
    flags_mismatch_kernel<<<1, 1, 0, stream>>>(b, mismatch, done > 0);
    SM_CUDA_CHECK_LAUNCH();
    done += b.count;
  } while (done < count);
}

}  // namespace cuda
}  // namespace sm
