// allocator.h — caching allocators with current/peak byte accounting per device.
// Invariant: current_bytes() counts bytes handed out and not yet returned (not the cache);
// peak_bytes() is the maximum of current_bytes() since the last reset_peak().
#pragma once
#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/core/host_arena.h"

namespace sm {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual void release_cache() = 0;
  size_t current_bytes() const { return current_.load(std::memory_order_relaxed); }
  size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  size_t cached_bytes() const { return cached_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(current_bytes(), std::memory_order_relaxed); }
  // peak_bytes() at least `p` (a caller that measured a region with reset_peak puts back the
  // larger peak it had seen before).
  void raise_peak(size_t p) {
    size_t seen = peak_bytes();
    while (p > seen && !peak_.compare_exchange_weak(seen, p, std::memory_order_relaxed)) {
    }
  }

 protected:
  void on_alloc(size_t b) { raise_peak(current_.fetch_add(b, std::memory_order_relaxed) + b); }
  void on_free(size_t b) { current_.fetch_sub(b, std::memory_order_relaxed); }
  // Caches of size class -> blocks (the caller holds the lock guarding `cache`):
  // take_cached() hands out a cached block of class sz (nullptr when there is none);
  // put_cached() takes a returned block of class sz back into the cache.
  void* take_cached(std::map<size_t, std::vector<void*>>& cache, size_t sz) {
    auto it = cache.find(sz);
    if (it == cache.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= sz;
    on_alloc(sz);
    return p;
  }
  void put_cached(std::map<size_t, std::vector<void*>>& cache, size_t sz, void* p) {
    cache[sz].push_back(p);
    cached_ += sz;
    on_free(sz);
  }
  // Atomic: the allocating threads hold the allocator's lock, but the HDF5 thread allocates
  // while the main thread reads and resets the peak.
  std::atomic<size_t> current_{0}, peak_{0}, cached_{0};
};

// Host memory, 64-byte aligned, sizes rounded to classes (round_size): blocks below
// kLargeBytes cached per class, larger ones carved from a coalescing HostArena
// (allocator.cpp). cached_bytes() = cached small blocks + the arena's free ranges.
class CpuCachingAllocator final : public Allocator {
 public:
  static constexpr size_t kLargeBytes = size_t{1} << 20;
  CpuCachingAllocator();
  ~CpuCachingAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  void release_cache() override;
  static size_t round_size(size_t bytes);

 private:
  void* allocate_large(size_t sz);
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks (< kLargeBytes)
  HostArena arena_;                            // blocks >= kLargeBytes
};

// The allocator of a device: cpu_allocator() or the device's CudaCachingAllocator
// (core/allocator_cuda.h; page-locked host memory: pinned_host_allocator() there).
Allocator& allocator_for(const Device& d);
Allocator& cpu_allocator();

}  // namespace sm
