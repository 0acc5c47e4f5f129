// test_memory_model.cpp — the cost model's memory half on its own (planner/memory_model.h): the
// dp all-reduce's buckets (packed buffers kept, buckets in flight at each unit's backward)
// against a hand computation of the gradient stream, where the whole-layout tests
// (test_cost_model.cpp) only see one bucket.
#include <gtest/gtest.h>

#include <vector>

#include "spikemesh/planner/memory_model.h"

namespace sm {
namespace {

MachineCosts scratch_machine() {
  MachineCosts m;
  m.links[{static_cast<int>(CollectiveKind::AllReduce), 2}] = LinkCost{0.1, 1.0, 0.5};
  m.links[{static_cast<int>(CollectiveKind::AllReduce), 3}] = LinkCost{0.1, 1.0, 2.0};
  return m;
}

// Units of 4, 30, 10 and 20 MiB; backward runs u3, u2, u1, u0, so the gradient stream is
// 20 | 10 | 30 | 4 (64 MiB) cut into 25-MiB buckets:
//   [0, 25)   u3's 20 + u2's 5    two segments: packed, launched when u2 is done
//   [25, 50)  u2's 5 + u1's 20    two segments: packed, launched when u1 is done
//   [50, 64)  u1's 10 + u0's 4    two segments: packed, launched at the end of backward
// While unit i runs its backward, the last dp - 1 buckets launched are in flight, each holding
// the all-reduce's scratch per byte.
TEST(PlannerMemoryModel, AllReduceBucketsPackSegmentsAndKeepTheLastOnesInFlight) {
  const std::vector<double> units{4, 30, 10, 20};
  const MachineCosts m = scratch_machine();
  const double P = 64, adam = 2;
  const double packed = 25 + 25 + 14;

  const StrategyMemory two = strategy_memory(units, GradientReduction::AllReduce, 2, 2, m);
  EXPECT_DOUBLE_EQ(two.state, (2 + adam) * P + packed);
  // dp 2: one bucket in flight — none at u3 and u2 (nothing launched yet), the first at u1, the
  // second at u0
  const std::vector<double> two_flight{0.5 * 25, 0.5 * 25, 0, 0};
  ASSERT_EQ(two.in_flight.size(), units.size());
  for (size_t i = 0; i < units.size(); ++i) EXPECT_DOUBLE_EQ(two.in_flight[i], two_flight[i]) << "unit " << i;

  // dp 3: two in flight — both buckets at u0
  const StrategyMemory three = strategy_memory(units, GradientReduction::AllReduce, 3, 2, m);
  EXPECT_DOUBLE_EQ(three.state, (2 + adam) * P + packed);
  const std::vector<double> three_flight{2.0 * 50, 2.0 * 25, 0, 0};
  for (size_t i = 0; i < units.size(); ++i) EXPECT_DOUBLE_EQ(three.in_flight[i], three_flight[i]) << "unit " << i;

  // one rank: values, gradients and the optimizer's states, nothing packed, nothing in flight
  const StrategyMemory one = strategy_memory(units, GradientReduction::AllReduce, 1, 1, m);
  EXPECT_DOUBLE_EQ(one.state, 3 * P);
  for (double x : one.in_flight) EXPECT_EQ(x, 0);
}

// A bucket cut from one unit's gradient is a view of it, not packed: 30 MiB are a bucket of 25
// and one of 5, each a single segment.
TEST(PlannerMemoryModel, ABucketOfOneUnitIsNotPacked) {
  const MachineCosts m = scratch_machine();
  const StrategyMemory s = strategy_memory({30}, GradientReduction::AllReduce, 2, 2, m);
  EXPECT_DOUBLE_EQ(s.state, 4 * 30.0);
  EXPECT_DOUBLE_EQ(s.in_flight[0], 0);  // both buckets launch when the only unit is done
}

}  // namespace
}  // namespace sm
