// host_arena.cpp — best-fit, coalescing large-block arena over one reserved address range
// (see host_arena.h for why and the invariants).
#include "spikemesh/core/host_arena.h"

#include <sys/mman.h>

#include <cstdint>
#include <iterator>

namespace sm {

namespace {
constexpr size_t kHuge = size_t{2} << 20;  // transparent huge page size: the base is aligned to it
// Blocks from kBigBytes on are placed at the high end of their best-fit range, smaller ones at
// the low end, so that large activations freed together lie next to each other and coalesce
// instead of being separated by long-lived small blocks. Measured (spikemesh bench, CPU, the
// arena's high-water mark over the peak of bytes in use): spikformer_ti b4 T8 224 px +3 % with
// 8 MiB (+16 % all low end, +27 % with 2-4 MiB, +32 % with 64 MiB); cifar10dvs_vgg b4 T10
// lowest with 2-8 MiB.
constexpr size_t kBigBytes = size_t{8} << 20;
}

HostArena::HostArena(size_t reserve_bytes) {
  const size_t want = (reserve_bytes + kHuge - 1) / kHuge * kHuge;
  if (want == 0) return;
  void* p = mmap(nullptr, want + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (raw + kHuge - 1) / kHuge * kHuge;
  if (aligned > raw) munmap(p, aligned - raw);  // trim to a 2 MiB-aligned range of `want`
  const size_t tail = (raw + want + kHuge) - (aligned + want);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + want), tail);
  base_ = reinterpret_cast<char*>(aligned);
  reserved_ = want;
}

HostArena::~HostArena() {
  if (base_) munmap(base_, reserved_);
}

void HostArena::erase_free(std::map<size_t, size_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

void HostArena::insert_free(size_t off, size_t len) {
  auto next = by_offset_.lower_bound(off);
  if (next != by_offset_.end() && next->first == off + len) {  // merge the range after
    len += next->second;
    erase_free(next);
  }
  auto after = by_offset_.lower_bound(off);
  if (after != by_offset_.begin()) {
    auto prev = std::prev(after);
    if (prev->first + prev->second == off) {  // merge the range before
      off = prev->first;
      len += prev->second;
      erase_free(prev);
    }
  }
  by_offset_.emplace(off, len);
  by_size_.insert({len, off});
  free_bytes_ += len;
}

void* HostArena::allocate(size_t bytes) {
  if (!base_ || bytes == 0 || bytes % kAlign != 0) return nullptr;
  const bool big = bytes >= kBigBytes;
  auto fit = by_size_.lower_bound({bytes, 0});
  if (fit != by_size_.end()) {  // best fit: the smallest free range that holds the block
    const size_t off = fit->second, len = fit->first;
    erase_free(by_offset_.find(off));
    if (!big || len == bytes) {  // small blocks at the low end of the range
      if (len > bytes) insert_free(off + bytes, len - bytes);
      return base_ + off;
    }
    insert_free(off, len - bytes);  // big blocks at the high end
    return base_ + off + len - bytes;
  }
  // Grow at the top, starting inside the free range that ends there (if any).
  size_t start = top_;
  if (!by_offset_.empty()) {
    auto last = std::prev(by_offset_.end());
    if (last->first + last->second == top_) {
      start = last->first;
      erase_free(last);
    }
  }
  const size_t end = start + bytes;
  if (end > reserved_) {
    if (start < top_) insert_free(start, top_ - start);  // put the top range back
    return nullptr;
  }
  if (end > top_) {
    const size_t grow_to = std::min(reserved_, (end + kHuge - 1) / kHuge * kHuge);
    if (mprotect(base_ + top_, grow_to - top_, PROT_READ | PROT_WRITE) != 0) {
      if (start < top_) insert_free(start, top_ - start);
      return nullptr;
    }
    madvise(base_ + top_, grow_to - top_, MADV_HUGEPAGE);  // fewer faults and TLB misses; advice only
    if (grow_to > end) insert_free(end, grow_to - end);
    top_ = grow_to;
  }
  return base_ + start;
}

bool HostArena::deallocate(void* p, size_t bytes) {
  char* c = static_cast<char*>(p);
  if (!base_ || c < base_ || c >= base_ + reserved_) return false;
  insert_free(static_cast<size_t>(c - base_), bytes);
  return true;
}

void HostArena::release_free_pages() {
  for (auto& [off, len] : by_offset_) madvise(base_ + off, len, MADV_DONTNEED);
}

}  // namespace sm
