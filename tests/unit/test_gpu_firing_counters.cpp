// test_gpu_firing_counters.cpp — the CUDA neurons' pooled firing counters
// (layers/firing_counters_cuda.h): the firing rate each layer reports equals the mean of the
// spikes its last forward produced (what a per-layer read gave), read after forwards of
// several layers, read twice without a forward in between, and read after only some layers ran
// again (no stale value, no value from another layer).
#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_util.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/unit.h"

namespace sm {
namespace {

double rate_of(Unit& u) {
  std::vector<LayerStat> st;
  u.collect_stats(st);
  EXPECT_EQ(st.size(), 1u);
  return st.empty() ? -1.0 : st[0].value;
}

double mean_of(const Tensor& y) {
  const Tensor h = gputest::host_f64(y);
  double s = 0.0;
  for (int64_t i = 0; i < h.numel(); ++i) s += h.data<double>()[i];
  return s / static_cast<double>(h.numel());
}

std::unique_ptr<Unit> lif_unit(double threshold) {
  auto u = std::make_unique<Unit>("");
  NeuronConfig c;
  c.tau = 2.0;
  c.v_threshold = threshold;
  u->add(std::make_unique<Neuron>(c));
  u->finalize(DType::F32, gputest::gpu(), 3);
  return u;
}

TEST(GpuFiringCounters, PooledReadsEqualEachLayersSpikes) {
  SKIP_WITHOUT_GPU();
  auto a = lif_unit(0.6), b = lif_unit(1.1);
  Ctx ctx;
  ctx.training = false;
  auto input = [](uint64_t seed) {
    return gputest::random_input({5, 3, 37}, seed, false, -1.0, 3.0).to(gputest::gpu());
  };
  a->reset_state();
  b->reset_state();
  const double ya1 = mean_of(a->forward(input(1), ctx));
  const double yb1 = mean_of(b->forward(input(2), ctx));
  ASSERT_GT(ya1, 0.0);
  ASSERT_GT(yb1, 0.0);
  ASSERT_NE(ya1, yb1);
  EXPECT_DOUBLE_EQ(rate_of(*a), ya1);
  EXPECT_DOUBLE_EQ(rate_of(*b), yb1);
  EXPECT_DOUBLE_EQ(rate_of(*a), ya1) << "a second report, no forward in between";
  EXPECT_DOUBLE_EQ(rate_of(*b), yb1);
  a->reset_state();
  const double ya2 = mean_of(a->forward(input(3), ctx));
  ASSERT_NE(ya2, ya1);
  EXPECT_DOUBLE_EQ(rate_of(*b), yb1) << "b did not run again";
  EXPECT_DOUBLE_EQ(rate_of(*a), ya2) << "a's new forward";
  ctx.training = true;
  b->reset_state();
  const double yb2 = mean_of(b->forward(input(4), ctx));
  EXPECT_DOUBLE_EQ(rate_of(*b), yb2);
  EXPECT_DOUBLE_EQ(rate_of(*a), ya2);
}

}  // namespace
}  // namespace sm
