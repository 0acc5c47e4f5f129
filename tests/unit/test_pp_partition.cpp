// test_pp_partition.cpp — --pp-layout parsing (every bad form named) and the cost-balanced
// contiguous partition against a brute-force optimum over all splits of small random models.
#include <gtest/gtest.h>

#include "error_of.h"

#include <algorithm>
#include <functional>
#include <random>

#include "spikemesh/core/error.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"

namespace sm {
namespace {

TEST(PpLayout, ParsesUnitsPerStage) {
  EXPECT_EQ(parse_pp_layout("1|2|2|1", 4, 6), (std::vector<int>{1, 2, 2, 1}));
  EXPECT_EQ(parse_pp_layout(" 3 | 1 ", 2, 4), (std::vector<int>{3, 1}));
  EXPECT_EQ(layout_text({1, 2, 2, 1}), "1|2|2|1");
}

TEST(PpLayout, BadLayoutsNameTheFlagAndTheProblem) {
  struct Case {
    const char* text;
    int stages, units;
    const char* expect;
  };
  for (const Case& c : {Case{"1|2|2", 4, 6, "has 3 entries"}, Case{"1|-2|2|1", 4, 6, "'-2' is not a non-negative"},
                        Case{"1|0|4|1", 4, 6, "stage 1 has no units"}, Case{"1|2|2|2", 4, 6, "places 7 units"},
                        Case{"1||2|3", 4, 6, "entry 2 '' is not"}, Case{"1|2|x|1", 4, 6, "'x' is not"},
                        Case{"3|3|", 3, 6, "is empty"}}) {
    const std::string m = error_of([&] { parse_pp_layout(c.text, c.stages, c.units); });
    EXPECT_NE(m.find("--pp-layout"), std::string::npos) << c.text << ": " << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.text << ": " << m;
  }
}

// The smallest largest-stage cost over every contiguous split into `stages` non-empty parts.
double brute_force(const std::vector<double>& c, int stages, size_t from = 0) {
  if (stages == 1) {
    double s = 0;
    for (size_t i = from; i < c.size(); ++i) s += c[i];
    return s;
  }
  double best = 1e300, acc = 0;
  for (size_t end = from + 1; c.size() - end >= static_cast<size_t>(stages - 1); ++end) {
    acc += c[end - 1];
    best = std::min(best, std::max(acc, brute_force(c, stages - 1, end)));
  }
  return best;
}

TEST(PpPartition, BalancedEqualsTheBruteForceOptimum) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> cost(0.1, 10.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int units = 1 + static_cast<int>(rng() % 9);
    const int stages = 1 + static_cast<int>(rng() % units);
    std::vector<double> c(units);
    for (double& x : c) x = trial % 5 == 0 ? 1.0 : cost(rng);  // equal costs: ties
    const std::vector<int> l = balanced_partition(c, stages);
    ASSERT_EQ(l.size(), static_cast<size_t>(stages));
    int sum = 0;
    for (int n : l) {
      EXPECT_GE(n, 1);
      sum += n;
    }
    ASSERT_EQ(sum, units);
    const std::vector<double> sc = stage_costs(c, l);
    const double got = *std::max_element(sc.begin(), sc.end());
    EXPECT_NEAR(got, brute_force(c, stages), 1e-9 * got) << "units " << units << " stages " << stages << " -> "
                                                         << layout_text(l);
  }
}

// The smallest largest per-rank sum over every contiguous split into ranks·v non-empty stages
// (stage s on rank s mod ranks), by plain enumeration of all cut sets.
double brute_force_rank(const std::vector<double>& c, int ranks, int v) {
  const int units = static_cast<int>(c.size()), stages = ranks * v;
  double best = 1e300;
  std::vector<int> cuts;  // stage k starts at cuts[k]
  std::function<void(int)> rec = [&](int start) {
    if (static_cast<int>(cuts.size()) == stages) {
      std::vector<double> load(ranks, 0.0);
      for (int k = 0; k < stages; ++k) {
        const int e = k + 1 < stages ? cuts[k + 1] : units;
        for (int i = cuts[k]; i < e; ++i) load[k % ranks] += c[i];
      }
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      return;
    }
    const int left = stages - static_cast<int>(cuts.size());
    for (int p = start; p <= units - left; ++p) {
      if (cuts.empty() && p != 0) break;  // the first stage starts at unit 0
      cuts.push_back(p);
      rec(p + 1);
      cuts.pop_back();
    }
  };
  rec(0);
  return best;
}

TEST(PpPartition, BestPartitionFindsTheOptimumOfItsScore) {
  // Scored by the largest per-rank sum (stage s on rank s mod ranks): best_partition must
  // reach the enumeration's optimum.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> cost(0.1, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const int ranks = 2 + static_cast<int>(rng() % 2), v = 2;
    const int units = ranks * v + static_cast<int>(rng() % 6);
    std::vector<double> c(units);
    for (double& x : c) x = trial % 7 == 0 ? 1.0 : cost(rng);
    auto rank_max = [&](const std::vector<int>& l) {
      const std::vector<double> sc = stage_costs(c, l);
      std::vector<double> load(ranks, 0.0);
      for (size_t s = 0; s < sc.size(); ++s) load[s % ranks] += sc[s];
      return *std::max_element(load.begin(), load.end());
    };
    const std::vector<int> l = best_partition(c, ranks * v, rank_max);
    ASSERT_EQ(l.size(), static_cast<size_t>(ranks * v));
    int sum = 0;
    for (int n : l) {
      EXPECT_GE(n, 1);
      sum += n;
    }
    ASSERT_EQ(sum, units);
    EXPECT_NEAR(rank_max(l), brute_force_rank(c, ranks, v), 1e-9 * rank_max(l)) << layout_text(l);
  }
  // Over the candidate budget: the stage-balanced split.
  const std::vector<double> c{8, 1, 1, 1, 1, 8};
  EXPECT_EQ(best_partition(c, 3, [](const std::vector<int>& l) { return double(l[0]); }, 1), balanced_partition(c, 3));
  // Within it, the score decides (the first stage as short as possible here).
  EXPECT_EQ(best_partition(c, 3, [](const std::vector<int>& l) { return double(l[0]); })[0], 1);
}

// The VGG case of docs/parallelism.md (measured unit costs, ms): for interleaved pp 2 x 2 the split the
// simulator prefers runs faster than the largest-stage split.
TEST(PpPartition, SimulatedBestBeatsLargestStageForInterleaved) {
  const std::vector<double> vgg{2.9, 31.9, 28.3, 57.7, 28.5, 55.9, 17.8, 16.8, 0.05, 0.16};
  const PpSchedule sched = make_schedule("interleaved", 2, 2, 8);
  const std::vector<int> best = simulated_best_partition(vgg, sched), plain = balanced_partition(vgg, 4);
  const double t_best = simulate(sched, stage_costs_of(vgg, best)).makespan;
  const double t_plain = simulate(sched, stage_costs_of(vgg, plain)).makespan;
  EXPECT_LE(t_best, t_plain);
  EXPECT_LT(t_best, 0.97 * t_plain) << layout_text(best) << " vs " << layout_text(plain);
}

TEST(PpPartition, ExamplesAndErrors) {
  EXPECT_EQ(balanced_partition({1, 1, 1, 1}, 2), (std::vector<int>{2, 2}));
  EXPECT_EQ(balanced_partition({8, 1, 1, 1, 1, 8}, 3), (std::vector<int>{1, 4, 1}));
  EXPECT_EQ(balanced_partition({5, 5, 5}, 3), (std::vector<int>{1, 1, 1}));
  EXPECT_NE(error_of([] { balanced_partition({1, 1}, 3); }).find("more stages than units"), std::string::npos);
  EXPECT_NE(error_of([] { balanced_partition({1, -1}, 1); }).find("not a non-negative"), std::string::npos);
}

}  // namespace
}  // namespace sm
