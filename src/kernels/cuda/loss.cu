// loss.cu (kernels/cuda) — time-mean + cross-entropy / rate MSE (see kernels/cuda/loss.h;
// kernels/cpu/loss.cpp and layers/loss.cpp are the reference). Per-row work runs one thread
// per sample row (rows are short: K classes); the batch sums run in one block with a fixed
// tree, so the loss is deterministic.
#include <cmath>

#include "common.cuh"
#include "spikemesh/kernels/cuda/loss.h"

namespace sm {
namespace cuda {
namespace {

template <typename T>
__global__ void time_mean_kernel(const T* __restrict__ out, int64_t steps, int64_t nk,
                                 double* __restrict__ mean) {
  const double inv = 1.0 / static_cast<double>(steps);
  for (int64_t i = detail::global_thread(); i < nk; i += detail::grid_stride()) {
    double s = 0.0;
    for (int64_t t = 0; t < steps; ++t) s += static_cast<double>(to_f32(out[t * nk + i]));
    mean[i] = s * inv;
  }
}

__device__ __forceinline__ int64_t clamp_label(int64_t l, int64_t k) {
  return l < 0 ? 0 : (l >= k ? k - 1 : l);
}

// First maximum wins (as cpu::count_correct).
__device__ __forceinline__ int64_t row_argmax(const double* s, int64_t k) {
  int64_t best = 0;
  for (int64_t j = 1; j < k; ++j)
    if (s[j] > s[best]) best = j;
  return best;
}

// kind 0: cross-entropy (grad scaled by 1/N); kind 1: squared error vs one-hot (grad 2/(N·K)).
__global__ void row_loss_kernel(int kind, const double* __restrict__ mean,
                                const int64_t* __restrict__ labels, int64_t n, int64_t k,
                                double grad_scale, double* __restrict__ row_loss,
                                int* __restrict__ row_correct, double* __restrict__ grad) {
  for (int64_t r = detail::global_thread(); r < n; r += detail::grid_stride()) {
    const double* z = mean + r * k;
    const int64_t label = clamp_label(labels[r], k);
    double loss = 0.0;
    if (kind == 0) {
      double zmax = z[0];
      for (int64_t j = 1; j < k; ++j) zmax = fmax(zmax, z[j]);
      double denom = 0.0;
      for (int64_t j = 0; j < k; ++j) denom += exp(z[j] - zmax);
      const double lse = zmax + log(denom);
      loss = lse - z[label];
      if (grad) {
        for (int64_t j = 0; j < k; ++j) {
          const double prob = exp(z[j] - lse);
          grad[r * k + j] = (j == label ? prob - 1.0 : prob) * grad_scale;
        }
      }
    } else {
      for (int64_t j = 0; j < k; ++j) {
        const double e = z[j] - (j == label ? 1.0 : 0.0);
        loss += e * e;
        if (grad) grad[r * k + j] = e * grad_scale;
      }
    }
    row_loss[r] = loss;
    row_correct[r] = row_argmax(z, k) == label ? 1 : 0;
  }
}

// One block: loss = (Σ row_loss)·loss_scale, correct = Σ row_correct.
__global__ void __launch_bounds__(kThreads)
    batch_sum_kernel(const double* __restrict__ row_loss, const int* __restrict__ row_correct,
                     int64_t n, double loss_scale, double* __restrict__ loss,
                     int64_t* __restrict__ correct) {
  __shared__ double smem[kThreads];
  double acc = 0.0, hits = 0.0;  // hits: exact in double (< 2^53 rows)
  for (int64_t r = threadIdx.x; r < n; r += kThreads) {
    acc += row_loss[r];
    hits += static_cast<double>(row_correct[r]);
  }
  const double total = detail::block_sum(acc, smem);
  const double total_hits = detail::block_sum(hits, smem);
  if (threadIdx.x == 0) {
    *loss = total * loss_scale;
    if (correct) *correct = static_cast<int64_t>(total_hits);
  }
}

template <typename T>
__global__ void broadcast_kernel(const double* __restrict__ g, int64_t total, int64_t nk,
                                 double scale, T* __restrict__ dout) {
  for (int64_t e = detail::global_thread(); e < total; e += detail::grid_stride())
    dout[e] = from_f32<T>(static_cast<float>(g[e % nk] * scale));
}

void row_losses(int kind, const double* mean, const int64_t* labels, int64_t n, int64_t k,
                double* loss, int64_t* correct, double* grad, cudaStream_t stream) {
  SM_CHECK(n >= 0 && k >= 1, "loss kernel: bad size N=" << n << " K=" << k);
  if (n == 0) {
    SM_CUDA_CHECK(cudaMemsetAsync(loss, 0, sizeof(double), stream));
    if (correct) SM_CUDA_CHECK(cudaMemsetAsync(correct, 0, sizeof(int64_t), stream));
    return;
  }
  const double inv_rows = kind == 0 ? 1.0 / static_cast<double>(n) : 1.0 / static_cast<double>(n * k);
  const double grad_scale = kind == 0 ? inv_rows : 2.0 * inv_rows;
  detail::Scratch scratch(static_cast<size_t>(n) * (sizeof(double) + sizeof(int)), stream);
  double* row_loss = scratch.as<double>();
  int* row_correct = reinterpret_cast<int*>(row_loss + n);
  row_loss_kernel<<<detail::blocks_for(n), kThreads, 0, stream>>>(kind, mean, labels, n, k, grad_scale,
                                                                  row_loss, row_correct, grad);
  SM_CUDA_CHECK_LAUNCH();
  batch_sum_kernel<<<1, kThreads, 0, stream>>>(row_loss, row_correct, n, inv_rows, loss, correct);
  SM_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void time_mean_cuda(const T* out, int64_t steps, int64_t n, int64_t k, double* mean,
                    cudaStream_t stream) {
  SM_CHECK(steps >= 1 && n >= 0 && k >= 0, "time_mean_cuda: bad size T=" << steps);
  const int64_t nk = n * k;
  if (nk == 0) return;
  time_mean_kernel<T><<<detail::blocks_for(nk), kThreads, 0, stream>>>(out, steps, nk, mean);
  SM_CUDA_CHECK_LAUNCH();
}

void cross_entropy_cuda(const double* mean, const int64_t* labels, int64_t n, int64_t k,
                        double* loss, int64_t* correct, double* grad, cudaStream_t stream) {
  row_losses(0, mean, labels, n, k, loss, correct, grad, stream);
}

void rate_mse_cuda(const double* mean, const int64_t* labels, int64_t n, int64_t k, double* loss,
                   int64_t* correct, double* grad, cudaStream_t stream) {
  row_losses(1, mean, labels, n, k, loss, correct, grad, stream);
}

template <typename T>
void broadcast_over_time_cuda(const double* g, int64_t steps, int64_t n, int64_t k,
                              double scale, T* dout, cudaStream_t stream) {
  SM_CHECK(steps >= 0 && n >= 0 && k >= 0, "broadcast_over_time_cuda: bad size");
  const int64_t nk = n * k, total = steps * nk;
  if (total == 0) return;
  broadcast_kernel<T><<<detail::blocks_for(total), kThreads, 0, stream>>>(g, total, nk, scale, dout);
  SM_CUDA_CHECK_LAUNCH();
}

#define SM_LOSS_INSTANTIATE(T)                                                                 \
  template void time_mean_cuda<T>(const T*, int64_t, int64_t, int64_t, double*, cudaStream_t); \
  template void broadcast_over_time_cuda<T>(const double*, int64_t, int64_t, int64_t, double,  \
                                            T*, cudaStream_t);
SM_LOSS_INSTANTIATE(float)
SM_LOSS_INSTANTIATE(__nv_bfloat16)
SM_LOSS_INSTANTIATE(__half)
#undef SM_LOSS_INSTANTIATE

}  // namespace cuda
}  // namespace sm
