// allocator_cuda.h — device memory and page-locked host memory for the CUDA back end.
// This header needs no CUDA header (tests of a CPU-only build include it); in a CPU-only
// build the accessors throw an internal error and CudaAllocLabel does nothing useful.
//
// CudaCachingAllocator (one per device) — stream-ordered caching:
//  * blocks are cached by size class (CpuCachingAllocator::round_size: ≤ 25% waste) and
//    never returned to the driver in the steady state: a training step that repeats its
//    shapes performs no cudaMalloc/cudaFree after the first step (malloc_calls() says so);
//  * a block freed by the host may still be read or written by work already enqueued on
//    the device's compute stream (core/stream_cuda.h). Reuse is safe because every later
//    use of the block is enqueued on that same stream, i.e. runs after the earlier work.
//    Work on ANOTHER stream must be joined back into the compute stream (stream_wait)
//    before the host drops the last reference to a tensor it touched;
//  * current_bytes()/peak_bytes() count rounded blocks handed out (Allocator contract);
//    reserved_bytes() = handed out + cached (what the driver sees);
//  * when cudaMalloc fails the cache is released (after a device synchronisation) and the
//    allocation retried once; if it still fails the error is sm::Error(Library) with ONE
//    line naming the rank and host, the device, what was being allocated (the innermost
//    CudaAllocLabel, e.g. "conv2d 'features.0.proj_bn.0' forward"), how much was asked, and
//    free/total device memory and spikemesh's own usage.
//  * CUDA graphs (train/graph_step_cuda.h): a graph replays the device addresses it was
//    captured with, so no block it may touch is ever handed to other code while it lives.
//    begin_graph_capture() makes every block live at that moment, and every block
//    allocated until end_graph_capture(), the graph's; such a block, when freed, goes to
//    the graph's own free list, which only allocations during a capture take from.
//    release_graph_pool() (the graph was destroyed, after a device synchronisation) moves
//    the graph's free blocks to the general cache and forgets the ownership.
//
// PinnedHostAllocator — page-locked host memory (cudaHostAlloc, portable) for batches that
// are copied asynchronously. A freed block records an event on every compute stream that
// exists; it is handed out again only after those events completed, so a block is never
// overwritten by the host while an asynchronous copy may still read it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "spikemesh/core/allocator.h"

namespace sm {

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int ordinal) : ordinal_(ordinal) {}
  ~CudaCachingAllocator() override = default;  // process-lifetime object; never freed
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  // Synchronises the device, then cudaFree()s every cached block.
  void release_cache() override;

  int ordinal() const { return ordinal_; }
  size_t reserved_bytes() const { return reserved_; }
  int64_t malloc_calls() const { return malloc_calls_; }  // cudaMalloc calls so far
  int64_t free_calls() const { return free_calls_; }      // cudaFree calls so far
  // CUDA graph pool (see the top comment). Single capture at a time per device.
  void begin_graph_capture();
  void end_graph_capture();
  void release_graph_pool();
  size_t graph_owned_blocks() const { return graph_owned_.size(); }

 private:
  int ordinal_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks
  std::map<size_t, std::vector<void*>> graph_free_;  // the graph's free blocks
  std::unordered_set<void*> live_;         // blocks handed out
  std::unordered_set<void*> graph_owned_;  // blocks a graph may touch
  bool capturing_ = false;
  size_t reserved_ = 0;
  int64_t malloc_calls_ = 0, free_calls_ = 0;
  // Synchronises the device (current: the caller's guard) and cudaFree()s every cached
  // block; mu_ held.
  void free_cached();
};

// The allocator of CUDA device `ordinal` (created on first use, never destroyed).
CudaCachingAllocator& cuda_allocator(int ordinal);

class PinnedHostAllocator final : public Allocator {
 public:
  ~PinnedHostAllocator() override = default;  // process-lifetime object
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  void release_cache() override;
  int64_t host_alloc_calls() const { return alloc_calls_; }

 private:
  struct Block {
    void* ptr = nullptr;
    std::vector<void*> events;  // cudaEvent_t recorded on each compute stream at free time
  };
  std::mutex mu_;
  std::map<size_t, std::vector<Block>> free_;  // size class -> cached blocks
  std::map<void*, std::vector<void*>> events_of_;  // every live block's event objects
  int64_t alloc_calls_ = 0;
};

PinnedHostAllocator& pinned_host_allocator();

// Names what is being allocated for device out-of-memory messages, for the current thread,
// while in scope (innermost wins). Cheap: stores the pointer, builds no string.
class CudaAllocLabel {
 public:
  CudaAllocLabel(const char* what, const std::string* name = nullptr);
  ~CudaAllocLabel();
  CudaAllocLabel(const CudaAllocLabel&) = delete;
  CudaAllocLabel& operator=(const CudaAllocLabel&) = delete;
  // "conv2d 'features.0.proj_bn.0'" of the innermost label, or "" outside any label.
  static std::string current();

 private:
  const char* what_;
  const std::string* name_;
  CudaAllocLabel* outer_;
};

}  // namespace sm
