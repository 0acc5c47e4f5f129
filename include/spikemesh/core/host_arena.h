// host_arena.h — one contiguous reserved range of host address space from which large
// blocks are carved best-fit (large blocks at the high end of their range, small ones at the low end) and into which freed blocks coalesce with their free neighbours.
// It backs the host caching allocator's large blocks (core/allocator.h): a training step
// frees activations of one size and asks for another (forward vs backward, stem stage k vs
// k+1), which a per-size cache can only satisfy with fresh memory, and fresh pages cost a
// page fault each (~1 s per GB here). Here two freed neighbours of 100 MiB serve a 200 MiB
// request, so after the first step a step touches no new page and RSS stays at the
// high-water mark of the arena, close to the peak of bytes in use.
// Invariants: the range is reserved PROT_NONE (no commit charge) and made read/write up to
// top(); free ranges never touch each other (they are merged on free); every byte below
// top() is in exactly one block in use or one free range. Not thread-safe: the owner locks.
#pragma once
#include <cstddef>
#include <map>
#include <set>
#include <utility>

namespace sm {

class HostArena {
 public:
  explicit HostArena(size_t reserve_bytes);  // reserves nothing when the reservation fails
  ~HostArena();
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;

  // A block of exactly `bytes` (a multiple of kAlign), or nullptr when the reservation is
  // exhausted (the caller then maps the block on its own).
  void* allocate(size_t bytes);
  // Returns false when p is not from this arena; otherwise frees [p, p + bytes).
  bool deallocate(void* p, size_t bytes);
  // Hands the pages of every free range back to the OS (they read as zero when touched again).
  void release_free_pages();

  size_t free_bytes() const { return free_bytes_; }  // free ranges below top()
  size_t top() const { return top_; }                // bytes ever made read/write
  static constexpr size_t kAlign = 4096;

 private:
  void insert_free(size_t off, size_t len);  // merges with the free neighbours
  void erase_free(std::map<size_t, size_t>::iterator it);

  char* base_ = nullptr;
  size_t reserved_ = 0, top_ = 0, free_bytes_ = 0;
  std::map<size_t, size_t> by_offset_;          // free ranges: offset -> length
  std::set<std::pair<size_t, size_t>> by_size_;  // free ranges: (length, offset), best fit
};

}  // namespace sm
