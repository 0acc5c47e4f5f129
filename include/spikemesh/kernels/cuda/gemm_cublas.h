// gemm_cublas.h (kernels/cuda) — cuBLAS GEMMs for Linear and attention matmuls, in ROW-MAJOR
// terms, plus the bias epilogues shared with the cuDNN convolutions. Include only from code
// compiled when SPIKEMESH_HAVE_CUDA is defined (the GEMMs also need SPIKEMESH_HAVE_CUBLAS).
//
// Row-major to cuBLAS: a row-major matrix X [r, c] with leading dim ld is the column-major
// matrix Xᵀ [c, r] with the same ld. Hence C = op(A)·op(B) (row-major) is computed as the
// column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cublasGemmEx(op_b, op_a, n, m, k, B, ldb, A, lda, C, ldc).
//
// Precision (GemmOptions): compute is always f32 (CUBLAS_COMPUTE_32F) except f64
// (CUBLAS_COMPUTE_64F). A/B in f32: plain FMA (the handle's math mode is CUBLAS_DEFAULT_MATH,
// which never uses TF32) unless TF32 is allowed (CUBLAS_COMPUTE_32F_FAST_TF32): by
// GemmOptions::allow_tf32 when a caller sets it, else by the process's --matmul-fp32-precision
// (gpu_numerics().matmul_fp32, kernels/conv_policy.h; default ieee). A/B in bf16 or f16:
// tensor cores, f32 accumulation, C in the same dtype or f32 (weight gradients go straight
// into f32 master gradients with beta = 1). cuBLAS is deterministic here (atomics mode off).
//
// Handles: one per device, bound to that device's compute stream, with a 32 MiB workspace
// from the caching allocator (so cuBLAS makes no allocation of its own in the steady state).
// All work is enqueued on the compute stream of `device` (asynchronous).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "spikemesh/core/dtype.h"
#include "spikemesh/kernels/conv_policy.h"

namespace sm {
namespace cuda {

struct GemmOptions {
  // f32 inputs only: TF32 tensor cores. Unset (the default, what every layer passes): the
  // process's matmul fp32 precision, read at each call.
  std::optional<bool> allow_tf32;
};

// Whether an f32 GEMM under `opt` uses TF32: opt.allow_tf32 when set, else n.matmul_fp32 == tf32.
inline bool gemm_allows_tf32(const GemmOptions& opt, const GpuNumerics& n) {
  return opt.allow_tf32.value_or(n.matmul_fp32 == Fp32Precision::TF32);
}
// The process's GEMM options made explicit: allow_tf32 = gpu_numerics().matmul_fp32 == tf32.
GemmOptions default_gemm_options();

// C[m, n] = alpha·op(A)·op(B) + beta·C, all row-major: op(A) [m, k] (A stored [m, k] with
// lda >= k, or [k, m] with lda >= m when trans_a), op(B) [k, n] likewise, C [m, n] (ldc >= n).
// a_dt must equal b_dt; c_dt is a_dt or (for bf16/f16 inputs) f32.
void gemm(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const void* A, int64_t lda, const void* B, int64_t ldb, DType ab_dt, double beta, void* C,
          int64_t ldc, DType c_dt, const GemmOptions& opt = {});

// `batch` independent GEMMs as above; matrix i starts at A + i·stride_a elements (likewise
// B, C). For attention: scores = Q·Kᵀ per head, out = P·V per head.
void gemm_strided_batched(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                          double alpha, const void* A, int64_t lda, int64_t stride_a, const void* B,
                          int64_t ldb, int64_t stride_b, DType ab_dt, double beta, void* C, int64_t ldc,
                          int64_t stride_c, DType c_dt, int64_t batch, const GemmOptions& opt = {});

// Linear on rows, PyTorch layout: x [M, Fin], w [Fout, Fin], y [M, Fout] (dt: all three).
//  forward        y  = x·wᵀ                       (overwritten)
//  backward_data  dx = dy·w                       (overwritten)
//  backward_weight dw = dw_beta·dw + dyᵀ·x        dw [Fout, Fin] in dw_dt (dt, or f32 for
//                                                 bf16/f16 activations: master gradients)
void linear_forward(int device, int64_t M, int64_t fin, int64_t fout, const void* x, const void* w, void* y,
                    DType dt, const GemmOptions& opt = {});
void linear_backward_data(int device, int64_t M, int64_t fin, int64_t fout, const void* dy, const void* w,
                          void* dx, DType dt, const GemmOptions& opt = {});
void linear_backward_weight(int device, int64_t M, int64_t fin, int64_t fout, const void* x, const void* dy,
                            DType dt, void* dw, DType dw_dt, double dw_beta, const GemmOptions& opt = {});

// ---- bias epilogues and small helpers (own kernels; any build with CUDA) ------------------
// Layout [outer, C, inner] (conv: [batch, Cout, Ho·Wo]; linear: [M, Fout, 1]).
// y[o, c, i] += bias[c]; y in y_dt (f32, f64, bf16, f16), bias in bias_dt (f32 or f64).
// Computed in f32 (f64 when y is f64), rounded once to y_dt.
void add_channel_bias(void* y, DType y_dt, const void* bias, DType bias_dt, int64_t outer, int64_t C,
                      int64_t inner, cudaStream_t stream);
// db[c] += Σ_{o,i} dy[o, c, i], summed in double in a fixed order (one block per channel,
// fixed strided partial sums, fixed tree): deterministic. db in db_dt (f32 or f64).
void channel_bias_grad(const void* dy, DType dy_dt, int64_t outer, int64_t C, int64_t inner, void* db,
                       DType db_dt, cudaStream_t stream);
// dst[i] += D(factor·src[i]) (dst f32/f64, src any float dtype): the product is formed in
// double and rounded once to dst's type before the add (factor 1: a plain add of src).
void accumulate(void* dst, DType dst_dt, const void* src, DType src_dt, int64_t n, cudaStream_t stream,
                double factor = 1.0);

}  // namespace cuda
}  // namespace sm
