// error_cuda.h (core) — checking every CUDA runtime call and kernel launch.
// Include only from code compiled when SPIKEMESH_HAVE_CUDA is defined.
//
//   SM_CUDA_CHECK(cudaMemcpyAsync(...));   // any call returning cudaError_t
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   SM_CUDA_CHECK_LAUNCH();                // launch-configuration / sticky errors
//
// Invariant: a failure throws sm::Error(Library) whose message names the call, the rank and
// host (where_am_i), file:line and cudaGetErrorString — one line, like every library error.
// The (non-sticky) error state is cleared before throwing so a caller that catches can go on.
#pragma once
#include <cuda_runtime_api.h>

#include "spikemesh/core/error.h"

namespace sm {

[[noreturn]] inline void throw_cuda_error(cudaError_t rc, const char* call, const char* file,
                                          int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  std::string msg = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
  throw_library_error("CUDA", call, msg, file, line);
}

}  // namespace sm

#define SM_CUDA_CHECK(call) \
  SM_STATUS_CHECK(cudaError_t, cudaSuccess, ::sm::throw_cuda_error, (call), #call)

// After every <<<...>>> launch: reports a bad configuration (grid/block/shared memory) or an
// earlier asynchronous fault that is already known.
#define SM_CUDA_CHECK_LAUNCH() \
  SM_STATUS_CHECK(cudaError_t, cudaSuccess, ::sm::throw_cuda_error, cudaGetLastError(), "kernel launch")
