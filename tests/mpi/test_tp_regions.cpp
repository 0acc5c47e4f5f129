// test_tp_regions.cpp — tensor parallelism's sample-sharded regions (layers/sequence_parallel.h):
// the collectives of one training step over the tp group equal the plan's closed form exactly
// (TpPlan::traffic: all-reduce, reduce-scatter and all-gather calls and payload bytes), with
// samples that divide by tp (the regions shard) and without (they fall back to all-reduces);
// and sharding lowers the step's peak host memory against the same layout with whole regions.
// The trajectories themselves are test_parallel_tensor.cpp's (fp64, 1e-9 to one rank).
#include <gtest/gtest.h>

#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/tp_plan.h"
#include "test_parallel_util.h"

namespace sm::test {
namespace {

struct StepCount {
  CommCounters tp;      // this step's tp collectives
  size_t peak_bytes = 0;  // the host allocator's peak during the step
  TpPlan plan;
  bool any_sharded = false;
  std::unique_ptr<Model> model;  // keeps the plan's layers alive
};

// One fp64 training step of `which` at tp = world on `samples` samples.
StepCount one_step(const std::string& which, int64_t samples, bool shard_regions) {
  const MeshShape shape{1, world_size(), 1};
  auto mesh = Mesh::create(world(), shape);
  auto model = build_spec_model(which);
  TpOptions to;
  to.tp = shape.tp;
  to.shard_regions = shard_regions;
  StepCount out;
  out.plan = make_tp_plan(*model, to);
  apply_tp_plan(out.plan, mesh->tp().rank());
  Model& m = *model;
  m.finalize(DType::F64, Device::cpu(), 7);
  LayoutOptions lo;
  lo.mode = "tp";
  lo.strategy.param_dtype = lo.strategy.reduce_dtype = DType::F64;
  Layout layout(m, mesh.get(), resolved_layout_plan(lo, mesh->shape(), mesh->world_size(), 0, m));
  auto opt = make_optimizer(test_optimizer("sgd"), layout.optimizer_params());
  std::vector<MicroBatch> micro{synth_batch(m, 0, 0, samples, DType::F64)};
  Ctx ctx;
  ctx.seed = 11;
  Allocator& host = allocator_for(Device::cpu());
  host.reset_peak();
  const size_t before = host.current_bytes();
  const CommCounters at = layout.groups().tp_comm_counters();
  (void)train_step(layout, *opt, micro, ctx, StepOptions{});
  out.peak_bytes = host.peak_bytes() - before;
  out.tp = layout.groups().tp_comm_counters();
  for (int k = 0; k < kCommOpCount; ++k) {
    out.tp.ops[k].calls -= at.ops[k].calls;
    out.tp.ops[k].payload_bytes -= at.ops[k].payload_bytes;
  }
  for (const TpLayerPlan& l : out.plan.layers)
    if (l.layer->sp_link().role == SpRole::Start && l.layer->sp_link().region->any_sharded()) out.any_sharded = true;
  out.model = std::move(model);
  return out;
}

void expect_closed_form(const std::string& which, int64_t samples) {
  const StepCount s = one_step(which, samples, true);
  const std::string what = which + " at tp " + std::to_string(world_size()) + " on " + std::to_string(samples) + " samples";
  ASSERT_FALSE(s.plan.regions.empty()) << what << ": no region to shard";
  EXPECT_EQ(s.any_sharded, samples % world_size() == 0) << what;
  const TpPlan::Traffic t = s.plan.traffic(samples, s.model->info.T, 8, 8);  // fp64
  EXPECT_EQ(s.tp[CommOp::AllReduce].calls, static_cast<uint64_t>(t.all_reduce_calls)) << what;
  EXPECT_EQ(s.tp[CommOp::AllReduce].payload_bytes, static_cast<uint64_t>(t.all_reduce_bytes)) << what;
  EXPECT_EQ(s.tp[CommOp::ReduceScatter].calls, static_cast<uint64_t>(t.reduce_scatter_calls)) << what;
  EXPECT_EQ(s.tp[CommOp::ReduceScatter].payload_bytes, static_cast<uint64_t>(t.reduce_scatter_bytes)) << what;
  EXPECT_EQ(s.tp[CommOp::AllGather].calls, static_cast<uint64_t>(t.all_gather_calls)) << what;
  EXPECT_EQ(s.tp[CommOp::AllGather].payload_bytes, static_cast<uint64_t>(t.all_gather_bytes)) << what;
  if (samples % world_size() == 0) {
    EXPECT_GT(t.reduce_scatter_calls, 0) << what;
    EXPECT_GT(t.all_gather_calls, 0) << what;
  }
}

TEST(TpRegions, CollectivesEqualThePlansClosedForm) {
  if (world_size() < 2 || 8 % world_size() != 0) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const char* which : {"dvs", "sformer"}) {
    expect_closed_form(which, 8);                   // the regions shard
    expect_closed_form(which, world_size() + 1);    // they cannot: all-reduces as before
  }
}

TEST(TpRegions, ShardingLowersThePeakMemory) {
  if (world_size() < 2 || 8 % world_size() != 0) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const char* which : {"dvs", "sformer"}) {
    const StepCount whole = one_step(which, 8, false), sharded = one_step(which, 8, true);
    EXPECT_FALSE(whole.any_sharded);
    EXPECT_TRUE(sharded.any_sharded);
    EXPECT_LT(sharded.peak_bytes, whole.peak_bytes) << which << ": sharded " << sharded.peak_bytes << " B vs whole "
                                                    << whole.peak_bytes << " B";
    std::printf("[tp regions] %s tp %d: step peak %zu B sharded vs %zu B whole (%.2fx)\n", which, world_size(),
                sharded.peak_bytes, whole.peak_bytes, double(sharded.peak_bytes) / double(whole.peak_bytes));
  }
}

}  // namespace
}  // namespace sm::test
