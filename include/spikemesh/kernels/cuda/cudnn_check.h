// cudnn_check.h (kernels/cuda) — checking every cuDNN and cuBLAS call. Include only from
// code compiled with SPIKEMESH_HAVE_CUDNN / SPIKEMESH_HAVE_CUBLAS respectively.
//
//   SM_CUDNN_CHECK(cudnnConvolutionForward(...));
//   SM_CUBLAS_CHECK(cublasGemmEx(...));
//
// Invariant: a failure throws sm::Error(Library) with one line naming the call, the rank
// and host, file:line and the library's own message (cuDNN: status string plus
// cudnnGetLastErrorString; cuBLAS: status name and string).
#pragma once
#include <string>

#include "spikemesh/core/error.h"

#ifdef SPIKEMESH_HAVE_CUDNN
#include <cudnn.h>

namespace sm {
[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t rc, const char* call, const char* file, int line) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string msg = cudnnGetErrorString(rc);
  if (detail[0]) msg += std::string(" (") + detail + ")";
  throw_library_error("cuDNN", call, msg, file, line);
}
}  // namespace sm

#define SM_CUDNN_CHECK(call) \
  SM_STATUS_CHECK(cudnnStatus_t, CUDNN_STATUS_SUCCESS, ::sm::throw_cudnn_error, (call), #call)
#endif  // SPIKEMESH_HAVE_CUDNN

#ifdef SPIKEMESH_HAVE_CUBLAS
#include <cublas_v2.h>

namespace sm {
[[noreturn]] inline void throw_cublas_error(cublasStatus_t rc, const char* call, const char* file, int line) {
  std::string msg = std::string(cublasGetStatusName(rc)) + ": " + cublasGetStatusString(rc);
  throw_library_error("cuBLAS", call, msg, file, line);
}
}  // namespace sm

#define SM_CUBLAS_CHECK(call) \
  SM_STATUS_CHECK(cublasStatus_t, CUBLAS_STATUS_SUCCESS, ::sm::throw_cublas_error, (call), #call)
#endif  // SPIKEMESH_HAVE_CUBLAS
