// batchnorm.cu (kernels/cuda) — batch-norm kernels (see kernels/cuda/batchnorm.h; the CPU
// kernels kernels/cpu/batchnorm.cpp and the layer logic layers/batchnorm.cpp are the
// reference).
//
// Reductions: the outer rows are cut into chunks of rows_per_chunk rows (a function of the
// shape only); block (k, c) of the first kernel sums chunk k of channel c (thread j takes
// elements j, j + kThreads, ... of the chunk, in double; then the fixed block tree) into
// partial[c·chunks + k]; the second kernel adds the partials of each channel in chunk order.
// Element-wise passes run flat over all elements with channel = (index / inner) % C, in
// 32-bit index arithmetic whenever the tensor has fewer than 2^32 elements.
#include <cfloat>
#include <climits>
#include <cmath>

#include "common.cuh"
#include "spikemesh/kernels/cuda/batchnorm.h"

namespace sm {
namespace cuda {
namespace {

constexpr int64_t kChunkElems = 1 << 14;  // elements of one channel per reduction block

struct Chunking {
  int64_t rows_per_chunk, chunks;
};

Chunking chunking(const cpu::BnShape& s) {
  int64_t rows = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(1, s.inner));
  rows = std::min(rows, std::max<int64_t>(1, s.outer));
  return {rows, (s.outer + rows - 1) / rows};
}

void check_shape(const cpu::BnShape& s, const char* who) {
  SM_CHECK(s.outer >= 0 && s.channels >= 1 && s.inner >= 1,
           who << ": bad shape outer=" << s.outer << " C=" << s.channels << " inner=" << s.inner);
  SM_CHECK(s.channels <= 65535, who << ": at most 65535 channels, got " << s.channels);
  SM_CHECK(s.inner < (int64_t(1) << 31), who << ": spatial size " << s.inner << " too large");
}

// Partial sums of chunk blockIdx.x of channel blockIdx.y.
//  forward (kBackward = false): a = x; v = x - shift → s0 += v, s1 += v².
//  backward (kBackward = true): a = dy, b = act; s0 += dy, s1 += dy·(act - center).
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads)
    moments_partial_kernel(const T* __restrict__ a, const T* __restrict__ b, int64_t C,
                           int64_t inner, int64_t outer, int64_t rows_per_chunk,
                           const float* __restrict__ shift, const double* __restrict__ center,
                           int64_t chunks, double* __restrict__ part0, double* __restrict__ part1) {
  __shared__ double smem[kThreads];
  const int64_t k = blockIdx.x, c = blockIdx.y;
  const int64_t row0 = k * rows_per_chunk;
  const int64_t rows = (outer - row0 < rows_per_chunk) ? outer - row0 : rows_per_chunk;
  const uint32_t inner32 = static_cast<uint32_t>(inner);
  const uint32_t count = static_cast<uint32_t>(rows * inner);  // <= max(kChunkElems, inner) < 2^31
  const double kc = kBackward ? center[c] : (shift ? static_cast<double>(shift[c]) : 0.0);
  double s0 = 0.0, s1 = 0.0;
  for (uint32_t idx = threadIdx.x; idx < count; idx += kThreads) {
    const uint32_t r = idx / inner32, p = idx - r * inner32;
    const int64_t e = ((row0 + r) * C + c) * inner + p;
    if (kBackward) {
      const double g = static_cast<double>(to_f32(a[e]));
      s0 += g;
      s1 += g * (static_cast<double>(to_f32(b[e])) - kc);
    } else {
      const double v = static_cast<double>(to_f32(a[e])) - kc;
      s0 += v;
      s1 += v * v;
    }
  }
  const double t0 = detail::block_sum(s0, smem);
  const double t1 = detail::block_sum(s1, smem);
  if (threadIdx.x == 0) {
    part0[c * chunks + k] = t0;
    part1[c * chunks + k] = t1;
  }
}

// out[c] = Σ_k part[c·chunks + k] in chunk order, one thread per channel.
__global__ void moments_finish_kernel(const double* __restrict__ part0,
                                      const double* __restrict__ part1, int64_t C, int64_t chunks,
                                      double* __restrict__ out0, double* __restrict__ out1) {
  for (int64_t c = detail::global_thread(); c < C; c += detail::grid_stride()) {
    double a0 = 0.0, a1 = 0.0;
    for (int64_t k = 0; k < chunks; ++k) {
      a0 += part0[c * chunks + k];
      a1 += part1[c * chunks + k];
    }
    out0[c] = a0;
    out1[c] = a1;
  }
}

template <typename T, bool kBackward>
void launch_moments(const T* a, const T* b, const cpu::BnShape& s, const float* shift,
                    const double* center, double* out0, double* out1, cudaStream_t stream) {
  const int64_t C = s.channels;
  if (s.outer == 0) {  // empty batch: the sums are zero
    SM_CUDA_CHECK(cudaMemsetAsync(out0, 0, C * sizeof(double), stream));
    SM_CUDA_CHECK(cudaMemsetAsync(out1, 0, C * sizeof(double), stream));
    return;
  }
  const Chunking ch = chunking(s);
  SM_CHECK(ch.chunks <= INT32_MAX, "batchnorm: too many reduction chunks " << ch.chunks);
  detail::Scratch part(static_cast<size_t>(2 * C * ch.chunks) * sizeof(double), stream);
  double* part0 = part.as<double>();
  double* part1 = part0 + C * ch.chunks;
  const dim3 grid(static_cast<unsigned>(ch.chunks), static_cast<unsigned>(C));
  moments_partial_kernel<T, kBackward><<<grid, kThreads, 0, stream>>>(
      a, b, C, s.inner, s.outer, ch.rows_per_chunk, shift, center, ch.chunks, part0, part1);
  SM_CUDA_CHECK_LAUNCH();
  moments_finish_kernel<<<detail::blocks_for(C), kThreads, 0, stream>>>(part0, part1, C, ch.chunks,
                                                                        out0, out1);
  SM_CUDA_CHECK_LAUNCH();
}

// y = fma(x - center, scale, offset) per channel, f32 arithmetic. Index: uint32_t or int64_t.
template <typename T, typename Index>
__global__ void normalize_kernel(const T* __restrict__ x, Index n, Index inner, Index C,
                                 const double* __restrict__ center, const double* __restrict__ scale,
                                 const float* __restrict__ offset, T* __restrict__ y) {
  for (Index e = detail::global_thread<Index>(); e < n; e += detail::grid_stride<Index>()) {
    const Index c = (e / inner) % C;
    // Explicitly fma(x - center, scale, offset), as the CPU's bn_normalize and the neuron's
    // fused read (kernels/cuda/neuron_math.cuh) round it.
    y[e] = from_f32<T>(__fmaf_rn(__fsub_rn(to_f32(x[e]), static_cast<float>(center[c])),
                                 static_cast<float>(scale[c]), offset[c]));
  }
}

// dx = a·dy + b·(act - center) + d per channel (b term skipped when act is null).
template <typename T, typename Index>
__global__ void backward_input_kernel(const T* __restrict__ dy, const T* __restrict__ act, Index n,
                                      Index inner, Index C, const double* __restrict__ center,
                                      const double* __restrict__ a, const double* __restrict__ b,
                                      const double* __restrict__ d, T* __restrict__ dx) {
  for (Index e = detail::global_thread<Index>(); e < n; e += detail::grid_stride<Index>()) {
    const Index c = (e / inner) % C;
    const float ac = static_cast<float>(a[c]);
    const float dc = static_cast<float>(d[c]);
    float v = ac * to_f32(dy[e]);
    if (act) {
      const float bc = static_cast<float>(b[c]);
      const float m = static_cast<float>(center[c]);
      v = v + bc * (to_f32(act[e]) - m);
    }
    dx[e] = from_f32<T>(v + dc);
  }
}

__global__ void train_stats_kernel(const double* __restrict__ sum, const double* __restrict__ sumsq,
                                   double count, int64_t C, double eps, double momentum,
                                   float* __restrict__ running_mean, float* __restrict__ running_var,
                                   int64_t* __restrict__ tracked, const float* __restrict__ gamma,
                                   double* __restrict__ mean, double* __restrict__ invstd,
                                   double* __restrict__ scale) {
  // n = 1: PyTorch raises; the CPU layer skips Bessel's correction instead of dividing by 0.
  const double bessel = count > 1 ? count / (count - 1) : 1.0;
  for (int64_t c = detail::global_thread(); c < C; c += detail::grid_stride()) {
    const double rm = static_cast<double>(running_mean[c]);
    const double rv = static_cast<double>(running_var[c]);
    const double d = sum[c] / count;
    const double mu = rm + d;
    const double var = fmax(0.0, sumsq[c] / count - d * d);
    running_mean[c] = static_cast<float>((1 - momentum) * rm + momentum * mu);
    running_var[c] = static_cast<float>((1 - momentum) * rv + momentum * var * bessel);
    const double is = 1.0 / sqrt(var + eps);
    mean[c] = mu;
    invstd[c] = is;
    scale[c] = static_cast<double>(gamma[c]) * is;
  }
  if (tracked && detail::global_thread() == 0) *tracked += 1;
}

__global__ void eval_stats_kernel(const float* __restrict__ running_mean,
                                  const float* __restrict__ running_var,
                                  const float* __restrict__ gamma, int64_t C, double eps,
                                  double* __restrict__ mean, double* __restrict__ invstd,
                                  double* __restrict__ scale) {
  for (int64_t c = detail::global_thread(); c < C; c += detail::grid_stride()) {
    const double is = 1.0 / sqrt(static_cast<double>(running_var[c]) + eps);
    mean[c] = static_cast<double>(running_mean[c]);
    invstd[c] = is;
    scale[c] = static_cast<double>(gamma[c]) * is;
  }
}

// One block: y_scale, y_offset for every channel and the AND of their recoverability.
__global__ void __launch_bounds__(kThreads)
    output_recovery_kernel(const float* __restrict__ gamma, const float* __restrict__ beta,
                           const double* __restrict__ scale, int64_t C,
                           double* __restrict__ y_scale, double* __restrict__ y_offset,
                           int* __restrict__ recoverable) {
  constexpr double kMaxBetaOverGamma = 8.0;  // as layers/batchnorm.cpp
  int ok = 1;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    const double g = static_cast<double>(gamma[c]);
    const double bt = static_cast<double>(beta[c]);
    const double ys = static_cast<double>(static_cast<float>(scale[c]));
    y_scale[c] = ys;
    y_offset[c] = bt;
    const bool good = isfinite(g) && isfinite(bt) && g != 0.0 && isfinite(ys) &&
                      fabs(ys) >= static_cast<double>(FLT_MIN) &&
                      fabs(bt) <= kMaxBetaOverGamma * fabs(g);
    if (!good) ok = 0;
  }
  const int all_ok = __syncthreads_and(ok);
  if (threadIdx.x == 0) *recoverable = all_ok ? 1 : 0;
}

__global__ void backward_local_kernel(const double* __restrict__ sum_dy, double* __restrict__ sum_dy_xc,
                                      const double* __restrict__ unscale,
                                      const double* __restrict__ invstd, int64_t C,
                                      double* __restrict__ dgamma, double* __restrict__ dbeta) {
  for (int64_t c = detail::global_thread(); c < C; c += detail::grid_stride()) {
    double sx = sum_dy_xc[c];
    if (unscale) {
      sx /= unscale[c];
      sum_dy_xc[c] = sx;
    }
    dgamma[c] = sx * invstd[c];
    dbeta[c] = sum_dy[c];
  }
}

__global__ void backward_coefficients_kernel(const double* __restrict__ sum_dy,
                                             const double* __restrict__ sum_dy_xc,
                                             const double* __restrict__ scale,
                                             const double* __restrict__ invstd,
                                             const double* __restrict__ unscale, double count,
                                             bool batch_stats, int64_t C, double* __restrict__ b,
                                             double* __restrict__ d) {
  for (int64_t c = detail::global_thread(); c < C; c += detail::grid_stride()) {
    if (!batch_stats) {
      b[c] = 0.0;
      d[c] = 0.0;
      continue;
    }
    const double a = scale[c], is = invstd[c];
    const double u = unscale ? unscale[c] : 1.0;
    b[c] = -a * is * is * sum_dy_xc[c] / count / u;  // per unit of act - center
    d[c] = -a * sum_dy[c] / count;
  }
}

__global__ void accumulate_grads_kernel(const double* __restrict__ dgamma,
                                        const double* __restrict__ dbeta, int64_t C,
                                        float* __restrict__ gamma_grad, float* __restrict__ beta_grad) {
  for (int64_t c = detail::global_thread(); c < C; c += detail::grid_stride()) {
    gamma_grad[c] += static_cast<float>(dgamma[c]);
    beta_grad[c] += static_cast<float>(dbeta[c]);
  }
}

int64_t numel(const cpu::BnShape& s) { return s.outer * s.channels * s.inner; }

}  // namespace

template <typename T>
void bn_shifted_moments_cuda(const T* x, const cpu::BnShape& s, const float* shift, double* sum,
                             double* sumsq, cudaStream_t stream) {
  check_shape(s, "bn_shifted_moments_cuda");
  launch_moments<T, false>(x, nullptr, s, shift, nullptr, sum, sumsq, stream);
}

void bn_train_stats_cuda(const double* sum, const double* sumsq, double count, int64_t C,
                         double eps, double momentum, float* running_mean, float* running_var,
                         int64_t* num_batches_tracked, const float* gamma, double* mean,
                         double* invstd, double* scale, cudaStream_t stream) {
  SM_CHECK(count > 0, "batchnorm over an empty batch");
  SM_CHECK(C >= 1, "bn_train_stats_cuda: C = " << C);
  train_stats_kernel<<<detail::blocks_for(C), kThreads, 0, stream>>>(
      sum, sumsq, count, C, eps, momentum, running_mean, running_var, num_batches_tracked, gamma,
      mean, invstd, scale);
  SM_CUDA_CHECK_LAUNCH();
}

void bn_eval_stats_cuda(const float* running_mean, const float* running_var, const float* gamma,
                        int64_t C, double eps, double* mean, double* invstd, double* scale,
                        cudaStream_t stream) {
  SM_CHECK(C >= 1, "bn_eval_stats_cuda: C = " << C);
  eval_stats_kernel<<<detail::blocks_for(C), kThreads, 0, stream>>>(running_mean, running_var, gamma,
                                                                     C, eps, mean, invstd, scale);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bn_normalize_cuda(const T* x, const cpu::BnShape& s, const double* center,
                       const double* scale, const float* offset, T* y, cudaStream_t stream) {
  check_shape(s, "bn_normalize_cuda");
  const int64_t n = numel(s);
  if (n == 0) return;
  const int grid = detail::blocks_for(n);
  if (n <= static_cast<int64_t>(UINT32_MAX) - static_cast<int64_t>(grid) * kThreads)
    normalize_kernel<T, uint32_t><<<grid, kThreads, 0, stream>>>(
        x, static_cast<uint32_t>(n), static_cast<uint32_t>(s.inner),
        static_cast<uint32_t>(s.channels), center, scale, offset, y);
  else
    normalize_kernel<T, int64_t><<<grid, kThreads, 0, stream>>>(x, n, s.inner, s.channels, center,
                                                                 scale, offset, y);
  SM_CUDA_CHECK_LAUNCH();
}

void bn_output_recovery_cuda(const float* gamma, const float* beta, const double* scale,
                             int64_t C, double* y_scale, double* y_offset, int* recoverable,
                             cudaStream_t stream) {
  SM_CHECK(C >= 1, "bn_output_recovery_cuda: C = " << C);
  output_recovery_kernel<<<1, kThreads, 0, stream>>>(gamma, beta, scale, C, y_scale, y_offset,
                                                     recoverable);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bn_backward_moments_cuda(const T* dy, const T* act, const cpu::BnShape& s,
                              const double* center, double* sum_dy, double* sum_dy_xc,
                              cudaStream_t stream) {
  check_shape(s, "bn_backward_moments_cuda");
  launch_moments<T, true>(dy, act, s, nullptr, center, sum_dy, sum_dy_xc, stream);
}

void bn_backward_local_cuda(const double* sum_dy, double* sum_dy_xc, const double* unscale,
                            const double* invstd, int64_t C, double* dgamma, double* dbeta,
                            cudaStream_t stream) {
  SM_CHECK(C >= 1, "bn_backward_local_cuda: C = " << C);
  backward_local_kernel<<<detail::blocks_for(C), kThreads, 0, stream>>>(sum_dy, sum_dy_xc, unscale,
                                                                         invstd, C, dgamma, dbeta);
  SM_CUDA_CHECK_LAUNCH();
}

void bn_backward_coefficients_cuda(const double* sum_dy, const double* sum_dy_xc,
                                   const double* scale, const double* invstd,
                                   const double* unscale, double count, bool batch_stats,
                                   int64_t C, double* b, double* d, cudaStream_t stream) {
  SM_CHECK(C >= 1, "bn_backward_coefficients_cuda: C = " << C);
  SM_CHECK(!batch_stats || count > 0, "bn_backward_coefficients_cuda: count = " << count);
  backward_coefficients_kernel<<<detail::blocks_for(C), kThreads, 0, stream>>>(
      sum_dy, sum_dy_xc, scale, invstd, unscale, count, batch_stats, C, b, d);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bn_backward_input_cuda(const T* dy, const T* act, const cpu::BnShape& s,
                            const double* center, const double* a, const double* b,
                            const double* d, T* dx, cudaStream_t stream) {
  check_shape(s, "bn_backward_input_cuda");
  SM_CHECK(act == nullptr || (center != nullptr && b != nullptr),
           "bn_backward_input_cuda: act needs center and b");
  const int64_t n = numel(s);
  if (n == 0) return;
  const int grid = detail::blocks_for(n);
  if (n <= static_cast<int64_t>(UINT32_MAX) - static_cast<int64_t>(grid) * kThreads)
    backward_input_kernel<T, uint32_t><<<grid, kThreads, 0, stream>>>(
        dy, act, static_cast<uint32_t>(n), static_cast<uint32_t>(s.inner),
        static_cast<uint32_t>(s.channels), center, a, b, d, dx);
  else
    backward_input_kernel<T, int64_t><<<grid, kThreads, 0, stream>>>(dy, act, n, s.inner, s.channels,
                                                                      center, a, b, d, dx);
  SM_CUDA_CHECK_LAUNCH();
}

void bn_accumulate_param_grads_cuda(const double* dgamma, const double* dbeta, int64_t C,
                                    float* gamma_grad, float* beta_grad, cudaStream_t stream) {
  SM_CHECK(C >= 1, "bn_accumulate_param_grads_cuda: C = " << C);
  accumulate_grads_kernel<<<detail::blocks_for(C), kThreads, 0, stream>>>(dgamma, dbeta, C,
                                                                           gamma_grad, beta_grad);
  SM_CUDA_CHECK_LAUNCH();
}

#define SM_BN_INSTANTIATE(T)                                                                   \
  template void bn_shifted_moments_cuda<T>(const T*, const cpu::BnShape&, const float*,        \
                                           double*, double*, cudaStream_t);                    \
  template void bn_normalize_cuda<T>(const T*, const cpu::BnShape&, const double*,             \
                                     const double*, const float*, T*, cudaStream_t);           \
  template void bn_backward_moments_cuda<T>(const T*, const T*, const cpu::BnShape&,           \
                                            const double*, double*, double*, cudaStream_t);    \
  template void bn_backward_input_cuda<T>(const T*, const T*, const cpu::BnShape&,             \
                                          const double*, const double*, const double*,         \
                                          const double*, T*, cudaStream_t);
SM_BN_INSTANTIATE(float)
SM_BN_INSTANTIATE(__nv_bfloat16)
SM_BN_INSTANTIATE(__half)
#undef SM_BN_INSTANTIATE

}  // namespace cuda
}  // namespace sm
