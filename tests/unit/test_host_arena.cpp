// test_host_arena.cpp — the coalescing large-block arena behind the host allocator
// (core/host_arena.h): best fit, placement ends, merging of freed neighbours, growth at the
// top, exhaustion, and that the memory is usable; plus the allocator reusing coalesced pages.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "spikemesh/core/allocator.h"
#include "spikemesh/core/host_arena.h"
#include "spikemesh/core/tensor.h"

namespace sm {
namespace {

constexpr size_t MiB = size_t{1} << 20;

TEST(HostArena, FreedNeighboursCoalesceAndServeALargerBlock) {
  HostArena a(256 * MiB);
  char* x = static_cast<char*>(a.allocate(2 * MiB));  // small: low end
  char* y = static_cast<char*>(a.allocate(2 * MiB));
  char* z = static_cast<char*>(a.allocate(2 * MiB));
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(y, x + 2 * MiB);
  EXPECT_EQ(z, y + 2 * MiB);
  std::memset(x, 1, 6 * MiB);  // the pages are read/write
  const size_t top = a.top();
  ASSERT_TRUE(a.deallocate(x, 2 * MiB));
  ASSERT_TRUE(a.deallocate(y, 2 * MiB));  // merges with x's range
  EXPECT_EQ(a.free_bytes(), 4 * MiB + (top - 6 * MiB));
  char* w = static_cast<char*>(a.allocate(4 * MiB));  // fits exactly where x and y were
  EXPECT_EQ(w, x);
  EXPECT_EQ(a.top(), top);  // no growth
  ASSERT_TRUE(a.deallocate(w, 4 * MiB));
  ASSERT_TRUE(a.deallocate(z, 2 * MiB));  // everything free: one range
  EXPECT_EQ(a.free_bytes(), a.top());
  char* all = static_cast<char*>(a.allocate(a.top()));
  EXPECT_EQ(all, x);
}

TEST(HostArena, BestFitAndLargeBlocksAtTheHighEnd) {
  HostArena a(512 * MiB);
  std::vector<char*> p;
  for (size_t mb : {4, 16, 4, 32, 4}) p.push_back(static_cast<char*>(a.allocate(mb * MiB)));
  for (char* q : p) ASSERT_NE(q, nullptr);
  a.deallocate(p[1], 16 * MiB);  // holes of 16 and 32 MiB
  a.deallocate(p[3], 32 * MiB);
  // 12 MiB (large: >= 8 MiB) goes into the 16 MiB hole, the best fit, at its high end.
  char* b = static_cast<char*>(a.allocate(12 * MiB));
  EXPECT_EQ(b, p[1] + 4 * MiB);
  // 2 MiB (small) goes into the 4 MiB left of that hole, at its low end.
  char* s = static_cast<char*>(a.allocate(2 * MiB));
  EXPECT_EQ(s, p[1]);
  // 20 MiB fits only the 32 MiB hole.
  char* c = static_cast<char*>(a.allocate(20 * MiB));
  EXPECT_EQ(c, p[3] + 12 * MiB);
}

TEST(HostArena, GrowsFromTheTopRangeAndRefusesBeyondTheReservation) {
  HostArena a(64 * MiB);
  char* x = static_cast<char*>(a.allocate(30 * MiB));
  char* y = static_cast<char*>(a.allocate(2 * MiB));
  ASSERT_TRUE(x && y);
  a.deallocate(y, 2 * MiB);  // the free range at the top starts at y
  char* z = static_cast<char*>(a.allocate(20 * MiB));
  EXPECT_EQ(z, y);  // grows from inside the top range instead of leaving it behind
  EXPECT_EQ(a.allocate(40 * MiB), nullptr);  // 30 + 20 + 40 > 64: the caller maps it itself
  a.deallocate(z, 20 * MiB);
  EXPECT_NE(a.allocate(34 * MiB), nullptr);  // 30 + 34 = 64: exactly the reservation
  int outside = 0;
  EXPECT_FALSE(a.deallocate(&outside, sizeof outside));
}

TEST(HostArena, AllocatorReusesCoalescedPagesAcrossSizes) {
  // A step that frees two 24 MiB activations and then asks for one 48 MiB gradient reuses
  // their pages: the bytes held (in use + cached) do not grow.
  Allocator& al = cpu_allocator();
  {
    Tensor a = Tensor::empty({6 << 20}, DType::F32);  // 24 MiB each
    Tensor b = Tensor::empty({6 << 20}, DType::F32);
    std::memset(a.raw(), 0, a.nbytes());
    std::memset(b.raw(), 0, b.nbytes());
  }
  const size_t held = al.current_bytes() + al.cached_bytes();
  {
    Tensor g = Tensor::empty({12 << 20}, DType::F32);  // 48 MiB
    std::memset(g.raw(), 0, g.nbytes());
    EXPECT_EQ(al.current_bytes() + al.cached_bytes(), held);
  }
}

}  // namespace
}  // namespace sm
