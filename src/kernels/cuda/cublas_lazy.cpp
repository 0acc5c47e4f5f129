// cublas_lazy.cpp — cuBLAS loaded on first use instead of at program start.
// Linking libcublas makes the dynamic loader map libcublasLt at start-up, which costs about
// 150 MB of resident memory in EVERY run (measured: dlopen of libcublasLt.so.13 = +148 MB
// RSS), CPU runs included. So the binary does not link cuBLAS: this file defines the few
// cuBLAS entry points spikemesh calls (same names and signatures as cublas_api.h) and
// forwards each to the real library, dlopen'ed (RTLD_LOCAL) the first time one is called.
// Invariants: only gemm_cublas.cpp calls cuBLAS, through exactly these functions (a new one
// fails to link until it is added here); a missing library is one Library error naming it.
#if defined(SPIKEMESH_HAVE_CUDA) && defined(SPIKEMESH_HAVE_CUBLAS)
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "spikemesh/core/error.h"

namespace {

void* cublas_library() {
  static void* handle = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string so = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      SM_CHECK(false, "cannot load " << so << " (cuBLAS, needed for Linear/attention on the GPU): "
                                     << (why ? why : "unknown error"));
    }
  });
  SM_CHECK(handle != nullptr, "cuBLAS could not be loaded (see the first error)");
  return handle;
}

template <typename Fn>
Fn cublas_symbol(const char* name) {
  void* p = dlsym(cublas_library(), name);
  SM_CHECK(p != nullptr, "cuBLAS has no symbol " << name);
  return reinterpret_cast<Fn>(p);
}

}  // namespace

#define SM_CUBLAS_FORWARD(ret, name, params, args)                 \
  extern "C" ret CUBLASWINAPI name params {                        \
    using Fn = ret (*) params;                                     \
    static const Fn real = cublas_symbol<Fn>(#name);               \
    return real args;                                              \
  }

SM_CUBLAS_FORWARD(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * h), (h))
SM_CUBLAS_FORWARD(cublasStatus_t, cublasSetWorkspace_v2, (cublasHandle_t h, void* w, size_t bytes), (h, w, bytes))
SM_CUBLAS_FORWARD(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))
SM_CUBLAS_FORWARD(cublasStatus_t, cublasSetPointerMode_v2, (cublasHandle_t h, cublasPointerMode_t m), (h, m))
SM_CUBLAS_FORWARD(cublasStatus_t, cublasSetAtomicsMode, (cublasHandle_t h, cublasAtomicsMode_t m), (h, m))
SM_CUBLAS_FORWARD(cublasStatus_t, cublasSetMathMode, (cublasHandle_t h, cublasMath_t m), (h, m))
SM_CUBLAS_FORWARD(const char*, cublasGetStatusName, (cublasStatus_t s), (s))
SM_CUBLAS_FORWARD(const char*, cublasGetStatusString, (cublasStatus_t s), (s))
SM_CUBLAS_FORWARD(cublasStatus_t, cublasGemmEx,
                  (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   const void* alpha, const void* A, cudaDataType at, int lda, const void* B, cudaDataType bt,
                   int ldb, const void* beta, void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                   cublasGemmAlgo_t algo),
                  (h, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, compute, algo))
SM_CUBLAS_FORWARD(cublasStatus_t, cublasGemmStridedBatchedEx,
                  (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   const void* alpha, const void* A, cudaDataType at, int lda, long long sa, const void* B,
                   cudaDataType bt, int ldb, long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                   long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo),
                  (h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute,
                   algo))

#endif  // SPIKEMESH_HAVE_CUDA && SPIKEMESH_HAVE_CUBLAS
