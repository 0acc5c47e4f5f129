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

size_t device_memory_bytes(const Device& d) {
  if (!d.is_cuda()) return 0;
  int before = 0;
  if (cudaGetDevice(&before) != cudaSuccess || cudaSetDevice(d.ordinal) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError(), total_b = 0;
  cudaSetDevice(before);
  return total_b;
}

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
