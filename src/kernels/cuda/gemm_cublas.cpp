// gemm_cublas.cpp — row-major GEMMs over cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx)
// and the Linear layer's three products (contracts in kernels/cuda/gemm_cublas.h).
#if defined(SPIKEMESH_HAVE_CUDA)
#include "spikemesh/kernels/cuda/gemm_cublas.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <mutex>

#include "spikemesh/core/error.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/core/tensor.h"

#ifdef SPIKEMESH_HAVE_CUBLAS
#include <cublas_v2.h>

#include "spikemesh/kernels/cuda/cudnn_check.h"
#endif

namespace sm {
namespace cuda {

#ifdef SPIKEMESH_HAVE_CUBLAS
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // NVIDIA's recommendation for sm_90

struct CublasDevice {
  cublasHandle_t handle = nullptr;
  Tensor workspace;  // [kCublasWorkspaceBytes] u8, held for the process lifetime
};

// One handle per device, bound to the compute stream; created on first use.
cublasHandle_t handle_for(int device) {
  static std::array<std::atomic<CublasDevice*>, kMaxDevices> devices{};
  static std::mutex mu;
  SM_CHECK(device >= 0 && device < kMaxDevices, "CUDA device ordinal " << device);
  return per_device_once(devices, mu, device, [&] {
    DeviceGuard guard(device);
    CublasDevice* d = new CublasDevice();  // never destroyed (handles outlive static destruction order)
    SM_CUBLAS_CHECK(cublasCreate(&d->handle));
    SM_CUBLAS_CHECK(cublasSetStream(d->handle, stream_for(device)));
    // After SetStream (which resets the workspace to cuBLAS's own pool).
    d->workspace = Tensor::empty({static_cast<int64_t>(kCublasWorkspaceBytes)}, DType::U8, Device::cuda(device));
    SM_CUBLAS_CHECK(cublasSetWorkspace(d->handle, d->workspace.raw(), kCublasWorkspaceBytes));
    SM_CUBLAS_CHECK(cublasSetMathMode(d->handle, CUBLAS_DEFAULT_MATH));  // never TF32 for f32
    SM_CUBLAS_CHECK(cublasSetPointerMode(d->handle, CUBLAS_POINTER_MODE_HOST));
    SM_CUBLAS_CHECK(cublasSetAtomicsMode(d->handle, CUBLAS_ATOMICS_NOT_ALLOWED));  // deterministic
    return d;
  })->handle;
}

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::F32: return CUDA_R_32F;
    case DType::F64: return CUDA_R_64F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: SM_CHECK(false, "cuBLAS GEMM on " << dtype_name(dt) << " (f32, f64, bf16, f16 only)");
  }
  return CUDA_R_32F;
}

// Compute type and whether alpha/beta are double.
cublasComputeType_t compute_type(DType ab, DType c, const GemmOptions& opt, bool* scalars_double) {
  *scalars_double = false;
  if (ab == DType::F64) {
    SM_CHECK(c == DType::F64, "f64 GEMM with " << dtype_name(c) << " output");
    *scalars_double = true;
    return CUBLAS_COMPUTE_64F;
  }
  if (ab == DType::F32) {
    SM_CHECK(c == DType::F32, "f32 GEMM with " << dtype_name(c) << " output");
    // TF32 only through the compute type: the handle's math mode stays CUBLAS_DEFAULT_MATH.
    return gemm_allows_tf32(opt, gpu_numerics()) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }
  SM_CHECK(ab == DType::BF16 || ab == DType::F16, "GEMM inputs in " << dtype_name(ab));
  SM_CHECK(c == ab || c == DType::F32, dtype_name(ab) << " GEMM with " << dtype_name(c) << " output");
  return CUBLAS_COMPUTE_32F;  // f32 accumulation on tensor cores
}

int as_int(int64_t v, const char* what) {
  SM_CHECK(v >= 0 && v <= INT_MAX, "GEMM " << what << " = " << v << " does not fit cuBLAS's 32-bit int");
  return static_cast<int>(v);
}

void check_layout(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                  int64_t ldc) {
  SM_CHECK(lda >= std::max<int64_t>(1, trans_a ? m : k), "GEMM lda " << lda << " for op(A) [" << m << ", " << k << "]"
                                                                     << (trans_a ? " transposed" : ""));
  SM_CHECK(ldb >= std::max<int64_t>(1, trans_b ? k : n), "GEMM ldb " << ldb << " for op(B) [" << k << ", " << n << "]"
                                                                     << (trans_b ? " transposed" : ""));
  SM_CHECK(ldc >= std::max<int64_t>(1, n), "GEMM ldc " << ldc << " for C [" << m << ", " << n << "]");
}

// What both GEMMs do around their cuBLAS call: checks the layout, takes the compute type and
// alpha/beta in its scaling type (double for f64 inputs, float otherwise), makes `device`
// current and runs call(handle, compute type, &alpha, &beta).
template <typename Call>
void with_setup(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                int64_t ldc, DType ab_dt, DType c_dt, const GemmOptions& opt, double alpha, double beta, Call call) {
  check_layout(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  bool dbl = false;
  const cublasComputeType_t ct = compute_type(ab_dt, c_dt, opt, &dbl);
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* pa = dbl ? static_cast<const void*>(&alpha) : static_cast<const void*>(&alpha_f);
  const void* pb = dbl ? static_cast<const void*>(&beta) : static_cast<const void*>(&beta_f);
  DeviceGuard guard(device);
  call(handle_for(device), ct, pa, pb);
}

}  // namespace

void gemm(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* A,
          int64_t lda, const void* B, int64_t ldb, DType ab_dt, double beta, void* C, int64_t ldc, DType c_dt,
          const GemmOptions& opt) {
  if (m == 0 || n == 0) return;
  with_setup(device, trans_a, trans_b, m, n, k, lda, ldb, ldc, ab_dt, c_dt, opt, alpha, beta,
             [&](cublasHandle_t h, cublasComputeType_t ct, const void* pa, const void* pb) {
               // Row-major C = op(A)·op(B)  <=>  column-major Cᵀ = op(B)ᵀ·op(A)ᵀ.
               SM_CUBLAS_CHECK(cublasGemmEx(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), pa, B, cuda_type(ab_dt),
                                            as_int(ldb, "ldb"), A, cuda_type(ab_dt), as_int(lda, "lda"), pb, C,
                                            cuda_type(c_dt), as_int(ldc, "ldc"), ct, CUBLAS_GEMM_DEFAULT));
             });
}

void gemm_strided_batched(int device, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                          const void* A, int64_t lda, int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b,
                          DType ab_dt, double beta, void* C, int64_t ldc, int64_t stride_c, DType c_dt, int64_t batch,
                          const GemmOptions& opt) {
  if (m == 0 || n == 0 || batch == 0) return;
  with_setup(device, trans_a, trans_b, m, n, k, lda, ldb, ldc, ab_dt, c_dt, opt, alpha, beta,
             [&](cublasHandle_t h, cublasComputeType_t ct, const void* pa, const void* pb) {
               SM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
                   h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, as_int(n, "n"),
                   as_int(m, "m"), as_int(k, "k"), pa, B, cuda_type(ab_dt), as_int(ldb, "ldb"), stride_b, A,
                   cuda_type(ab_dt), as_int(lda, "lda"), stride_a, pb, C, cuda_type(c_dt), as_int(ldc, "ldc"),
                   stride_c, as_int(batch, "batch"), ct, CUBLAS_GEMM_DEFAULT));
             });
}

#else  // no cuBLAS headers: the GEMMs are unavailable

void gemm(int, bool, bool, int64_t, int64_t, int64_t, double, const void*, int64_t, const void*, int64_t, DType,
          double, void*, int64_t, DType, const GemmOptions&) {
  SM_CHECK(false, "this build has no cuBLAS (Linear on CUDA needs it)");
}
void gemm_strided_batched(int, bool, bool, int64_t, int64_t, int64_t, double, const void*, int64_t, int64_t,
                          const void*, int64_t, int64_t, DType, double, void*, int64_t, int64_t, DType, int64_t,
                          const GemmOptions&) {
  SM_CHECK(false, "this build has no cuBLAS (attention on CUDA needs it)");
}

#endif  // SPIKEMESH_HAVE_CUBLAS

GemmOptions default_gemm_options() {
  GemmOptions o;
  o.allow_tf32 = gemm_allows_tf32(GemmOptions{}, gpu_numerics());
  return o;
}

// y [M, Fout] = x [M, Fin] · w [Fout, Fin]ᵀ
void linear_forward(int device, int64_t M, int64_t fin, int64_t fout, const void* x, const void* w, void* y,
                    DType dt, const GemmOptions& opt) {
  gemm(device, false, true, M, fout, fin, 1.0, x, fin, w, fin, dt, 0.0, y, fout, dt, opt);
}

// dx [M, Fin] = dy [M, Fout] · w [Fout, Fin]
void linear_backward_data(int device, int64_t M, int64_t fin, int64_t fout, const void* dy, const void* w,
                          void* dx, DType dt, const GemmOptions& opt) {
  gemm(device, false, false, M, fin, fout, 1.0, dy, fout, w, fin, dt, 0.0, dx, fin, dt, opt);
}

// dw [Fout, Fin] = dw_beta·dw + dy [M, Fout]ᵀ · x [M, Fin]
void linear_backward_weight(int device, int64_t M, int64_t fin, int64_t fout, const void* x, const void* dy,
                            DType dt, void* dw, DType dw_dt, double dw_beta, const GemmOptions& opt) {
  gemm(device, true, false, fout, fin, M, 1.0, dy, fout, x, fin, dt, dw_beta, dw, fin, dw_dt, opt);
}

}  // namespace cuda
}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
