// staging.cpp — pinned staging buffers and device<->host copies for the MPI path of device
// tensors (comm_cuda.h). Without CUDA: plain host memory, and device copies are errors.
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "comm_cuda.h"

namespace sm::comm_detail {
namespace {

size_t size_class(size_t bytes) {
  size_t c = 4096;
  while (c < bytes) c <<= 1;
  return c;
}

// Cached blocks by size class; freed at process exit never (pinned memory lives as long as
// the process, like the CUDA context).
struct StageCache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free;
};
StageCache& cache() {
  static StageCache* c = new StageCache;  // leaked on purpose: no CUDA calls at static teardown
  return *c;
}

void* raw_alloc(size_t cap) {
#ifdef SPIKEMESH_HAVE_CUDA
  void* p = nullptr;
  if (cudaMallocHost(&p, cap) == cudaSuccess) return p;
  cudaGetLastError();  // no driver / no device: fall back to pageable memory
  p = std::aligned_alloc(64, cap);
  SM_CHECK(p, "out of host memory for a " << cap << "-byte staging buffer");
  return p;
#else
  void* p = std::aligned_alloc(64, cap);
  SM_CHECK(p, "out of host memory for a " << cap << "-byte staging buffer");
  return p;
#endif
}

}  // namespace

HostStage::HostStage(size_t bytes) : cap_(size_class(bytes)) {
  auto& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free.find(cap_);
    if (it != c.free.end() && !it->second.empty()) {
      ptr_ = it->second.back();
      it->second.pop_back();
      return;
    }
  }
  ptr_ = raw_alloc(cap_);
}

HostStage::~HostStage() {
  if (!ptr_) return;
  auto& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.free[cap_].push_back(ptr_);
}

HostStage& HostStage::operator=(HostStage&& o) noexcept {
  if (this != &o) {
    HostStage tmp(std::move(*this));
    ptr_ = o.ptr_;
    cap_ = o.cap_;
    o.ptr_ = nullptr;
    o.cap_ = 0;
  }
  return *this;
}

void copy_device_to_host(void* host, const void* device, size_t bytes) {
#ifdef SPIKEMESH_HAVE_CUDA
  if (bytes) SM_COMM_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
#else
  SM_CHECK(false, "device tensor in a build without CUDA");
#endif
}

void copy_host_to_device(void* device, const void* host, size_t bytes) {
#ifdef SPIKEMESH_HAVE_CUDA
  if (bytes) SM_COMM_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
#else
  SM_CHECK(false, "device tensor in a build without CUDA");
#endif
}

std::string current_gpu_identity(const std::string& host) {
#ifdef SPIKEMESH_HAVE_CUDA
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  char bus[64] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, dev) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return host + "|" + bus;
#else
  (void)host;
  return "";
#endif
}

}  // namespace sm::comm_detail
