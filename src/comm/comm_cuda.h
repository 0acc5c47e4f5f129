// comm_cuda.h — CUDA side of the comm area: check macros for CUDA and NCCL calls, pinned
// host staging buffers, device<->host copies, and the identity of this rank's GPU.
// Internal to src/comm/. Compiles in a CPU-only build: there every function either works on
// host memory or reports that CUDA is missing (device tensors cannot exist there).
#pragma once
#include <cstddef>
#include <string>

#include "spikemesh/core/error.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_runtime.h>
namespace sm::comm_detail {
[[noreturn]] inline void throw_cuda_error(cudaError_t rc, const char* call, const char* file, int line) {
  throw_library_error("CUDA", call, cudaGetErrorString(rc), file, line);
}
}  // namespace sm::comm_detail
#define SM_COMM_CUDA_CHECK(call) \
  SM_STATUS_CHECK(cudaError_t, cudaSuccess, ::sm::comm_detail::throw_cuda_error, (call), #call)
#endif

#ifdef SPIKEMESH_HAVE_NCCL
#include <nccl.h>
namespace sm::comm_detail {
[[noreturn]] inline void throw_nccl_error(ncclResult_t rc, const char* call, const char* file, int line) {
  throw_library_error("NCCL", call, ncclGetErrorString(rc), file, line);
}
}  // namespace sm::comm_detail
#define SM_NCCL_CHECK(call) \
  SM_STATUS_CHECK(ncclResult_t, ncclSuccess, ::sm::comm_detail::throw_nccl_error, (call), #call)
#endif

namespace sm::comm_detail {

// A host buffer for staging device data through MPI: page-locked (cudaMallocHost) in a CUDA
// build, from a process-wide cache keyed by power-of-two size so steady state allocates
// nothing. Move-only.
class HostStage {
 public:
  HostStage() = default;
  explicit HostStage(size_t bytes);
  ~HostStage();
  HostStage(HostStage&& o) noexcept : ptr_(o.ptr_), cap_(o.cap_) { o.ptr_ = nullptr; o.cap_ = 0; }
  HostStage& operator=(HostStage&& o) noexcept;
  HostStage(const HostStage&) = delete;
  HostStage& operator=(const HostStage&) = delete;
  void* ptr() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t cap_ = 0;
};

// Synchronous copies (ordered after work already queued on the legacy default stream).
void copy_device_to_host(void* host, const void* device, size_t bytes);
void copy_host_to_device(void* device, const void* host, size_t bytes);

// "host|pci-bus-id" of the current CUDA device, or "" when this rank has no GPU.
std::string current_gpu_identity(const std::string& host);

}  // namespace sm::comm_detail
