// device_cuda.cu — CUDA device probing. With no driver, cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver and leaves the count unwritten: start from 0, clear the error.
#include <cuda_runtime.h>

#include <string>

#include "spikemesh/core/device.h"

namespace sm {

int cuda_device_count() {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return n;
}

bool built_with_cuda() { return true; }

std::string cuda_unavailable_reason() {
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess) {
    cudaGetLastError();
    return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
  }
  return n > 0 ? std::string() : std::string("no CUDA device is visible (CUDA_VISIBLE_DEVICES?)");
}

}  // namespace sm
