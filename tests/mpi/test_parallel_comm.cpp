// test_parallel_comm.cpp — what the data-parallel strategies move and keep, against the
// theory computed independently from the model's unit sizes: bus bytes per step (ring
// all-reduce 2(p-1)/p·|grads| for DP; reduce-scatter + all-gather (p-1)/p each for ZeRO and
// FSDP, FSDP gathering a resharded unit twice), ZeRO-1 optimizer state per rank = 1/dp of the
// single-rank state, FSDP peak parameter memory <= full/dp + the two largest units, and the
// DP bucket layout. Numbers are printed ([ measure ]) for the report; no time is asserted.
#include <gtest/gtest.h>

#include <algorithm>

#include "spikemesh/comm/comm.h"
#include "spikemesh/parallel/data_parallel.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/strategy.h"
#include "test_parallel_util.h"

namespace sm::test {
namespace {

struct Sizes {
  std::vector<int64_t> unit_numel;  // params per unit (units with parameters only)
  int64_t total = 0;
};

Sizes sizes_of(Model& m) {
  Sizes s;
  for (auto& u : m.units) {
    int64_t n = 0;
    for (Param* p : u->params()) n += shape_numel(p->shape);
    if (n) s.unit_numel.push_back(n);
    s.total += n;
  }
  return s;
}

int64_t pad(int64_t n, int p) { return (n + p - 1) / p * p; }

// Runs `steps` training steps and returns the dp comm's counters for the last one.
CommCounters one_step_counters(Comm& dp, Model& m, Layout& layout, Optimizer& opt, int steps = 2) {
  const int p = dp.size(), r = dp.rank();
  const int64_t b = 8 / p;
  for (int k = 0; k < steps; ++k) {
    dp.reset_counters();
    Ctx ctx;
    ctx.step = k;
    std::vector<MicroBatch> micro{synth_batch(m, k, r * b, b, m.dtype())};
    train_step(layout, opt, micro, ctx);
  }
  return dp.counters();
}

bool fits() { return 8 % world_size() == 0; }

}  // namespace

TEST(ParallelComm, DataParallelMovesTheRingAllReduceBytes) {
  if (!fits()) GTEST_SKIP();
  Comm dp(world(), "dp");
  const int p = dp.size();
  auto m = build_model("csnn", DType::F32);
  const Sizes sz = sizes_of(*m);
  LayoutOptions lo;
  lo.mode = "dp";
  lo.strategy.bucket_mb = 0.01;  // ~2600 f32 per bucket
  Layout layout(*m, dp, resolved_layout_plan(lo, MeshShape{dp.size(), 1, 1}, dp.size(), 0, *m));
  auto& s = dynamic_cast<DataParallel&>(layout.strategy());
  auto opt = make_optimizer(test_optimizer(), layout.optimizer_params());
  const std::vector<int64_t> buckets = s.bucket_sizes();
  int64_t sum = 0;
  for (int64_t n : buckets) {
    sum += n;
    EXPECT_LE(n, static_cast<int64_t>(0.01 * 1048576 / 4));
  }
  EXPECT_EQ(sum, sz.total) << "every gradient element in exactly one bucket";
  EXPECT_GE(buckets.size(), 3u);
  CommCounters c = one_step_counters(dp, *m, layout, *opt);
  uint64_t want = 0;
  for (int64_t n : buckets) want += comm_bus_bytes(CommOp::AllReduce, static_cast<uint64_t>(n) * 4, p);
  const double ideal = 2.0 * (p - 1) / p * sz.total * 4;
  EXPECT_EQ(c[CommOp::AllReduce].calls, buckets.size());
  EXPECT_EQ(c[CommOp::AllReduce].bus_bytes, want);
  EXPECT_EQ(c.total_calls(), buckets.size()) << "nothing but the gradient buckets";
  EXPECT_NEAR(static_cast<double>(c.total_bus_bytes()), ideal, static_cast<double>(buckets.size()));
  if (world_rank() == 0)
    std::printf("[ measure  ] dp p=%d: %llu bus bytes/step in %zu buckets, theory 2(p-1)/p*|grads| = %.0f (|grads| = %lld B)\n",
                p, static_cast<unsigned long long>(c.total_bus_bytes()), buckets.size(), ideal,
                static_cast<long long>(sz.total * 4));
}

TEST(ParallelComm, ZeroMovesReduceScatterPlusAllGatherAndShardsTheOptimizerState) {
  if (!fits()) GTEST_SKIP();
  Comm dp(world(), "dp");
  const int p = dp.size();
  // Single-rank optimizer state, for comparison.
  auto single = build_model("csnn", DType::F32);
  auto opt1 = make_optimizer(test_optimizer(), single->params());
  int64_t single_state = 0;
  for (auto& st : opt1->state()) single_state += st.value->numel();
  for (const char* sharding : {"zero", "zero2"}) {
    auto m = build_model("csnn", DType::F32);
    const Sizes sz = sizes_of(*m);
    LayoutOptions lo;
    lo.mode = "dp";
    lo.strategy.sharding = sharding;
    Layout layout(*m, dp, resolved_layout_plan(lo, MeshShape{dp.size(), 1, 1}, dp.size(), 0, *m));
    auto opt = make_optimizer(test_optimizer(), layout.optimizer_params());
    CommCounters c = one_step_counters(dp, *m, layout, *opt);
    uint64_t rs = 0, ag = 0;
    for (int64_t n : sz.unit_numel) {
      rs += comm_bus_bytes(CommOp::ReduceScatter, static_cast<uint64_t>(pad(n, p)) * 4, p);
      ag += comm_bus_bytes(CommOp::AllGather, static_cast<uint64_t>(pad(n, p)) * 4, p);
    }
    EXPECT_EQ(c[CommOp::ReduceScatter].calls, sz.unit_numel.size()) << sharding;
    EXPECT_EQ(c[CommOp::AllGather].calls, sz.unit_numel.size()) << sharding;
    EXPECT_EQ(c[CommOp::ReduceScatter].bus_bytes, rs) << sharding;
    EXPECT_EQ(c[CommOp::AllGather].bus_bytes, ag) << sharding;
    EXPECT_EQ(c[CommOp::AllReduce].calls, 0u) << sharding;
    // Optimizer state: this rank's share; the shares add up to the single-rank state exactly.
    int64_t mine = 0;
    for (auto& st : opt->state()) mine += st.value->numel();
    std::vector<double> v{static_cast<double>(mine)};
    all_reduce_doubles(dp, v, ReduceOp::Sum);
    EXPECT_EQ(static_cast<int64_t>(v[0]), single_state) << sharding;
    int64_t bound = 0;  // per unit, at most one padded chunk of each state
    for (int64_t n : sz.unit_numel) bound += pad(n, p) / p;
    EXPECT_LE(mine, bound * static_cast<int64_t>(opt1->state().size() / single->params().size())) << sharding;
    if (world_rank() == 0)
      std::printf("[ measure  ] %s p=%d: RS %llu + AG %llu bus bytes/step (theory 2(p-1)/p*|padded| = %llu); "
                  "optimizer state %lld of %lld elements on rank 0 (%.3f = 1/%.2f)\n",
                  sharding, p, static_cast<unsigned long long>(c[CommOp::ReduceScatter].bus_bytes),
                  static_cast<unsigned long long>(c[CommOp::AllGather].bus_bytes),
                  static_cast<unsigned long long>(rs + ag), static_cast<long long>(mine),
                  static_cast<long long>(single_state), double(mine) / single_state, double(single_state) / mine);
  }
}

TEST(ParallelComm, FsdpGathersTwiceReducesOnceAndBoundsParameterMemory) {
  if (!fits()) GTEST_SKIP();
  Comm dp(world(), "dp");
  const int p = dp.size();
  for (bool reshard : {true, false}) {
    auto m = build_model("dvs", DType::F32);
    const Sizes sz = sizes_of(*m);
    LayoutOptions lo;
    lo.mode = "fsdp";
    lo.strategy.reshard_after_forward = reshard;
    Layout layout(*m, dp, resolved_layout_plan(lo, MeshShape{dp.size(), 1, 1}, dp.size(), 0, *m));
    auto opt = make_optimizer(test_optimizer(), layout.optimizer_params());
    CommCounters c = one_step_counters(dp, *m, layout, *opt);
    const size_t U = sz.unit_numel.size();
    uint64_t ag = 0, rs = 0;
    for (size_t k = 0; k < U; ++k) {
      const uint64_t bytes = static_cast<uint64_t>(pad(sz.unit_numel[k], p)) * 4;
      // Forward gathers every unit; with resharding, backward gathers all but the last again.
      ag += comm_bus_bytes(CommOp::AllGather, bytes, p) * ((reshard && k + 1 < U) ? 2 : 1);
      rs += comm_bus_bytes(CommOp::ReduceScatter, bytes, p);
    }
    EXPECT_EQ(c[CommOp::AllGather].calls, reshard ? 2 * U - 1 : U);
    EXPECT_EQ(c[CommOp::ReduceScatter].calls, U);
    EXPECT_EQ(c[CommOp::AllGather].bus_bytes, ag);
    EXPECT_EQ(c[CommOp::ReduceScatter].bus_bytes, rs);
    // Parameter memory: shards (full/dp, padded) plus at most the two largest gathered units.
    StrategyStats st = layout.stats();
    std::vector<int64_t> units;
    double shard = 0;
    for (int64_t n : sz.unit_numel) {
      units.push_back(pad(n, p) * 4);
      shard += static_cast<double>(pad(n, p) / p * 4);
    }
    std::sort(units.rbegin(), units.rend());
    const double two = static_cast<double>(units[0] + (units.size() > 1 ? units[1] : 0));
    const double full = static_cast<double>(sz.total * 4);
    const double peak = st.param_peak_mb * 1048576.0;
    if (reshard) {
      EXPECT_LE(peak, shard + two + 0.5) << "reshard after forward";
    }
    EXPECT_LE(peak, shard + full + 4.0 * p * U + 0.5);
    EXPECT_GT(peak, shard);
    if (world_rank() == 0)
      std::printf("[ measure  ] fsdp p=%d reshard=%d: AG %llu + RS %llu bus bytes/step (theory %llu + %llu); param peak "
                  "%.0f B vs full %.0f B, full/dp + two largest units %.0f B\n",
                  p, reshard ? 1 : 0, static_cast<unsigned long long>(c[CommOp::AllGather].bus_bytes),
                  static_cast<unsigned long long>(c[CommOp::ReduceScatter].bus_bytes),
                  static_cast<unsigned long long>(ag), static_cast<unsigned long long>(rs), peak, full, shard + two);
  }
}

// The test models must actually spike (otherwise threshold effects are never exercised).
TEST(ParallelComm, TestModelsSpike) {
  for (const char* which : {"csnn", "dvs"}) {
    auto m = build_model(which, DType::F64);
    Ctx ctx;
    MicroBatch b = synth_batch(*m, 0, 0, 4, DType::F64);
    m->reset_state();
    m->forward(b.x, ctx);
    std::vector<LayerStat> stats = m->stats();
    ASSERT_GE(stats.size(), 2u);
    // The CSNN's output layer is silent at initialisation on these samples; it fires once
    // trained (its rate-MSE loss, 0.1 exactly when silent, moves in the trajectory tests).
    if (std::string(which) == "csnn") stats.pop_back();
    for (const LayerStat& s : stats) {
      EXPECT_GT(s.value, 0.0) << which << " " << s.layer;
      EXPECT_LT(s.value, 1.0) << which << " " << s.layer;
    }
  }
}

}  // namespace sm::test
