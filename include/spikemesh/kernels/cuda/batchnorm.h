// batchnorm.h (kernels/cuda) — batch-norm building blocks on the GPU, matching
// kernels/cpu/batchnorm.h (same BnShape view [outer = T·N, C, inner = spatial]) and the
// per-channel arithmetic of layers/batchnorm.cpp. Include only from code compiled when
// SPIKEMESH_HAVE_CUDA is defined.
//
// How a layer composes them (same order as the CPU layer; synced BN all-reduces the [C]
// double sums between the steps marked *):
//   training forward:  bn_shifted_moments_cuda(x, shift = running_mean) → *sum, sumsq, count
//                      → bn_train_stats_cuda (batch mean/invstd/scale, running stats updated,
//                      num_batches_tracked += 1) → bn_normalize_cuda(x → y)
//                      → bn_output_recovery_cuda (may the layer keep y instead of x?)
//   eval forward:      bn_eval_stats_cuda → bn_normalize_cuda
//   backward:          bn_backward_moments_cuda(dy, act, center) → bn_backward_local_cuda
//                      (dγ, dβ of this rank) → *sums → bn_backward_coefficients_cuda
//                      → bn_backward_input_cuda → bn_accumulate_param_grads_cuda (at W)
//   where act/center/unscale are (y, y_offset, y_scale) when the forward kept its output,
//   (x, mean, nullptr) when it kept its input.
//
// Invariants: reductions accumulate in double in an order fixed by the shape alone
// (fixed-size row chunks, fixed block trees, chunk partials summed in chunk order): results
// do not depend on the GPU or on timing. Per-channel vectors named double are device
// double [C]; params/buffers (gamma, beta, running_mean, running_var) are device f32 [C].
// Element-wise passes compute in f32 and store T (float, __nv_bfloat16, __half).
// Reductions use a stream-ordered scratch allocation (cudaMallocAsync, C·chunks·2 doubles).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "spikemesh/kernels/cpu/batchnorm.h"

namespace sm {
namespace cuda {

// sum[c] = Σ (x - shift[c]), sumsq[c] = Σ (x - shift[c])² over outer and inner, in double
// (shift read as f32 and widened, exactly like the CPU layer's running-mean shift).
// shift may be nullptr (= 0). x: [outer, C, inner]; sum, sumsq: device double [C].
template <typename T>
void bn_shifted_moments_cuda(const T* x, const cpu::BnShape& s, const float* shift, double* sum,
                             double* sumsq, cudaStream_t stream);

// Training statistics per channel, from the (possibly all-reduced) shifted sums and the
// element count per channel (whole group when synced), as in BatchNorm::forward_cpu:
//   d = sum/count; mean = rm + d; var = max(0, sumsq/count - d²);
//   rm ← (1-m)·rm + m·mean; rv ← (1-m)·rv + m·var·bessel (bessel = count/(count-1), 1 if
//   count <= 1); invstd = 1/sqrt(var + eps); scale = γ·invstd.
// running_mean is the shift the sums were taken with (read before it is updated).
// num_batches_tracked: device int64 [1] incremented by one, or nullptr.
// mean, invstd, scale: device double [C] outputs.
void bn_train_stats_cuda(const double* sum, const double* sumsq, double count, int64_t C,
                         double eps, double momentum, float* running_mean, float* running_var,
                         int64_t* num_batches_tracked, const float* gamma, double* mean,
                         double* invstd, double* scale, cudaStream_t stream);

// Eval statistics: mean = rm, invstd = 1/sqrt(rv + eps), scale = γ·invstd (all double [C]).
void bn_eval_stats_cuda(const float* running_mean, const float* running_var, const float* gamma,
                        int64_t C, double eps, double* mean, double* invstd, double* scale,
                        cudaStream_t stream);

// y = (x - center[c])·scale[c] + offset[c], computed in f32 from float(center),
// float(scale), offset (the f32 bias). x, y: [outer, C, inner], y must not alias x.
template <typename T>
void bn_normalize_cuda(const T* x, const cpu::BnShape& s, const double* center,
                       const double* scale, const float* offset, T* y, cudaStream_t stream);

// The per-channel affine map the normalize pass applied, as doubles: y_scale[c] =
// float(scale[c]), y_offset[c] = beta[c]; and whether x - μ can be recovered accurately from
// y for EVERY channel (layers/batchnorm.cpp's output_recoverable: γ ≠ 0, finite, |β| ≤ 8|γ|,
// |y_scale| a normal f32). recoverable: device int [1] set to 1 or 0 (the layer copies it to
// the host to decide which tensor to keep).
void bn_output_recovery_cuda(const float* gamma, const float* beta, const double* scale,
                             int64_t C, double* y_scale, double* y_offset, int* recoverable,
                             cudaStream_t stream);

// sum_dy[c] = Σ dy, sum_dy_xc[c] = Σ dy·(act - center[c]) in double. dy, act: [outer, C, inner].
template <typename T>
void bn_backward_moments_cuda(const T* dy, const T* act, const cpu::BnShape& s,
                              const double* center, double* sum_dy, double* sum_dy_xc,
                              cudaStream_t stream);

// This rank's parameter gradients from the LOCAL sums, as in backward_input_cpu:
// if unscale != nullptr: sum_dy_xc[c] /= unscale[c] (in place; it becomes Σ dy·(x - μ));
// dgamma[c] = sum_dy_xc[c]·invstd[c]; dbeta[c] = sum_dy[c]. All double [C].
void bn_backward_local_cuda(const double* sum_dy, double* sum_dy_xc, const double* unscale,
                            const double* invstd, int64_t C, double* dgamma, double* dbeta,
                            cudaStream_t stream);

// Input-gradient coefficients from the (possibly all-reduced) sums, sum_dy_xc already
// divided by unscale: with a = scale (γ·istd),
//   batch_stats: b = -a·istd²·sum_dy_xc/count/unscale, d = -a·sum_dy/count
//   eval:        b = d = 0.
// unscale may be nullptr (= 1). b, d: double [C] outputs.
void bn_backward_coefficients_cuda(const double* sum_dy, const double* sum_dy_xc,
                                   const double* scale, const double* invstd,
                                   const double* unscale, double count, bool batch_stats,
                                   int64_t C, double* b, double* d, cudaStream_t stream);

// dx = a[c]·dy + b[c]·(act - center[c]) + d[c], in f32 (coefficients rounded to f32).
// act/center may be nullptr when every b[c] is zero (eval). dx must not alias dy or act.
template <typename T>
void bn_backward_input_cuda(const T* dy, const T* act, const cpu::BnShape& s,
                            const double* center, const double* a, const double* b,
                            const double* d, T* dx, cudaStream_t stream);

// gamma_grad[c] += float(dgamma[c]); beta_grad[c] += float(dbeta[c]) (f32 param grads).
void bn_accumulate_param_grads_cuda(const double* dgamma, const double* dbeta, int64_t C,
                                    float* gamma_grad, float* beta_grad, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
