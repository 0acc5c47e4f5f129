// loss.h (kernels/cuda) — time-mean + cross-entropy and firing-rate + MSE losses on the GPU,
// matching kernels/cpu/loss.h and layers/loss.cpp: the mean over T in double, per-row losses
// and gradients in double, only the final [T, N, K] gradient in the output's storage type.
// Deterministic: row losses/correct counts are summed by one block in a fixed tree order.
// Include only when SPIKEMESH_HAVE_CUDA is defined. Device pointers; async on `stream`.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sm {
namespace cuda {

// mean[n·K + k] = (1/T) Σ_t out[t, n, k] (double, t ascending). out: [T, N, K]; mean: [N, K].
template <typename T>
void time_mean_cuda(const T* out, int64_t steps, int64_t n, int64_t k, double* mean,
                    cudaStream_t stream);

// "mean_ce": loss = (1/N) Σ_n [lse(mean_n) - mean_n[label_n]] (row max subtracted);
// grad = dL/dmean = (softmax(mean) - onehot(label)) / N.
// "rate_mse": loss = (1/(N·K)) Σ (mean - onehot)²; grad = 2·(mean - onehot)/(N·K).
// Both: correct = rows whose argmax (first maximum wins) equals the label.
// mean: [N, K] double; labels: [N] int64 in [0, K) (validated by the caller: out-of-range
// labels are clamped here, never read out of bounds); loss: double [1]; correct: int64 [1]
// (nullable); grad: [N, K] double (nullable). Uses a small stream-ordered scratch (N doubles).
void cross_entropy_cuda(const double* mean, const int64_t* labels, int64_t n, int64_t k,
                        double* loss, int64_t* correct, double* grad, cudaStream_t stream);
void rate_mse_cuda(const double* mean, const int64_t* labels, int64_t n, int64_t k,
                   double* loss, int64_t* correct, double* grad, cudaStream_t stream);

// dout[t, n, k] = T(g[n, k]·scale) for every t. g: [N, K] double; dout: [T, N, K].
template <typename T>
void broadcast_over_time_cuda(const double* g, int64_t steps, int64_t n, int64_t k,
                              double scale, T* dout, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
