// allocator.cpp — host caching allocator: a training step's steady state performs no
// malloc/free and touches no new page. Blocks below kLargeBytes are 64-byte aligned heap
// blocks cached by size class; larger ones are carved from a HostArena (core/host_arena.h),
// where freed blocks coalesce so that any later request of at most their combined size
// reuses their pages — peak RSS follows the peak of bytes in use instead of the sum over
// the sizes a step ever asks for. Blocks the arena cannot hold are mapped one by one.
// allocator_for() picks the host or the device allocator (core/allocator_cuda.h).
#include "spikemesh/core/allocator.h"

#include <algorithm>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/error.h"

namespace sm {

size_t CpuCachingAllocator::round_size(size_t bytes) {
  if (bytes <= 512) return 512;
  // Classes: multiples of 1/32 of the enclosing power of two: bytes > p/2, so the waste is
  // below 1/16 (activation sizes such as 3·2^k sit just above 3/4 of a power of two, where
  // quarter classes waste 30%). Classes from 4 KiB on are multiples of the page size.
  size_t p = 1;
  while (p < bytes) p <<= 1;
  // At least 64: std::aligned_alloc(64, sz) needs sz to be a multiple of the alignment.
  size_t q = std::max<size_t>(p / 32, 64);
  return (bytes + q - 1) / q * q;
}

CpuCachingAllocator::CpuCachingAllocator()
    : arena_(static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE))) {}

// Under mu_: a large block from the arena, else mapped on its own; nullptr when out of memory.
void* CpuCachingAllocator::allocate_large(size_t sz) {
  const size_t before = arena_.free_bytes();
  void* p = arena_.allocate(sz);
  cached_ = cached_ + arena_.free_bytes() - before;
  if (p) return p;
  p = mmap(nullptr, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* CpuCachingAllocator::allocate(size_t bytes) {
  size_t sz = round_size(bytes);
  void* p = nullptr;
  if (sz >= kLargeBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    p = allocate_large(sz);
    if (p) {
      on_alloc(sz);
      return p;
    }
  } else {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (void* c = take_cached(free_, sz)) return c;
    }
    p = std::aligned_alloc(64, sz);
  }
  if (!p) {
    release_cache();
    if (sz >= kLargeBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      p = allocate_large(sz);
    } else {
      p = std::aligned_alloc(64, sz);
    }
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
  if (sz < kLargeBytes) {
    put_cached(free_, sz, p);
    return;
  }
  on_free(sz);
  const size_t before = arena_.free_bytes();
  if (arena_.deallocate(p, sz))
    cached_ = cached_ + arena_.free_bytes() - before;
  else
    munmap(p, sz);  // mapped on its own (the arena was full)
}

void CpuCachingAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : free_)
    for (void* p : kv.second) std::free(p);
  free_.clear();
  arena_.release_free_pages();
  cached_ = arena_.free_bytes();  // address space only: its pages went back to the OS
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
