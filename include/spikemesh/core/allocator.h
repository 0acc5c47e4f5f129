// allocator.h — caching allocators with current/peak byte accounting per device.
// Invariant: current_bytes() counts bytes handed out and not yet returned (not the cache);
// peak_bytes() is the maximum of current_bytes() since the last reset_peak().
#pragma once
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
  size_t current_bytes() const { return current_; }
  size_t peak_bytes() const { return peak_; }
  size_t cached_bytes() const { return cached_; }
  void reset_peak() { peak_ = current_; }
  // peak_bytes() at least `p` (a caller that measured a region with reset_peak puts back the
  // larger peak it had seen before).
  void raise_peak(size_t p) { if (p > peak_) peak_ = p; }

 protected:
  void on_alloc(size_t b) { current_ += b; if (current_ > peak_) peak_ = current_; }
  void on_free(size_t b) { current_ -= b; }
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
  size_t current_ = 0, peak_ = 0, cached_ = 0;
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
