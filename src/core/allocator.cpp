// allocator.cpp — host caching allocator: 64-byte aligned blocks cached by size class so a
// training step's steady state performs no malloc/free; allocator_for() picks the host or
// the device allocator (core/cuda_allocator.h).
#include "spikemesh/core/allocator.h"

#include <cstdlib>
#include <new>

#include "spikemesh/core/cuda_allocator.h"
#include "spikemesh/core/error.h"

namespace sm {

size_t CpuCachingAllocator::round_size(size_t bytes) {
  if (bytes <= 512) return 512;
  // Classes: multiples of 1/4 of the enclosing power of two (≤ 25% waste).
  size_t p = 1;
  while (p < bytes) p <<= 1;
  size_t q = p / 4;
  return (bytes + q - 1) / q * q;
}

void* CpuCachingAllocator::allocate(size_t bytes) {
  size_t sz = round_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (void* p = take_cached(free_, sz)) return p;
  }
  void* p = std::aligned_alloc(64, sz);
  if (!p) {
    release_cache();
    p = std::aligned_alloc(64, sz);
  }
  if (!p)
    SM_INPUT_ERROR("out of host memory (" << where_am_i() << "): asked for " << bytes << " bytes, "
                                          << current_ / (1 << 20) << " MiB in use");
  std::lock_guard<std::mutex> lock(mu_);
  on_alloc(sz);
  return p;
}

void CpuCachingAllocator::deallocate(void* p, size_t bytes) {
  if (!p) return;
  size_t sz = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  put_cached(free_, sz, p);
}

void CpuCachingAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : free_)
    for (void* p : kv.second) std::free(p);
  free_.clear();
  cached_ = 0;
}

CpuCachingAllocator::~CpuCachingAllocator() { release_cache(); }

Allocator& cpu_allocator() {
  static CpuCachingAllocator* a = new CpuCachingAllocator();  // never destroyed: tensors may outlive statics
  return *a;
}

Allocator& allocator_for(const Device& d) {
  if (d.is_cpu()) return cpu_allocator();
  SM_CHECK(built_with_cuda(), "no allocator for " << d.str() << " in this build (no CUDA support)");
  return cuda_allocator(d.ordinal);
}

}  // namespace sm
