// test_gpu_layer_profile.cpp — the CUDA-event recorder of `bench --profile`
// (layers/gpu_layer_profile.h) on a small conv + LIF unit: every leaf pass is recorded once
// in call order with its layer name, type and pass (forward; backward, or backward-input and
// backward-weight when split; no weight pass for a layer without parameters), times are
// positive and fit in the step, composites are not rows, a disarmed pass leaves no trace,
// and profiling changes no result (bitwise). Skipped without a GPU.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/gpu_layer_profile.h"
#include "spikemesh/layers/neuron.h"

namespace sm {
namespace {

using gputest::gpu;

std::unique_ptr<Unit> conv_lif_unit() {
  auto u = std::make_unique<Unit>("blk");
  Conv2dConfig cc;
  cc.in_channels = 2;
  cc.out_channels = 8;
  cc.kernel = 3;
  cc.padding = 1;
  u->add(std::make_unique<Conv2d>(cc));
  NeuronConfig lif;
  lif.tau = 1.333;
  lif.decay_input = false;
  u->add(std::make_unique<Neuron>(lif));
  u->finalize(DType::F32, gpu(), 3);
  return u;
}

struct UnitRun {
  Tensor y, dx, grad;
};

// forward, then B (and W when split) of the unit on a fixed input.
UnitRun run_unit(Unit& u, bool split) {
  const Tensor x = gputest::random_input({4, 2, 2, 12, 12}, 7).to(gpu());
  Ctx ctx;
  ctx.training = true;
  u.reset_state();
  u.zero_grad();
  UnitRun r;
  r.y = u.forward(x, ctx);
  const Tensor dy = gputest::random_input(r.y.shape(), 8).to(gpu());
  ctx.split_wgrad = split;
  r.dx = u.backward_input(dy, ctx);
  if (split) u.backward_weight(ctx);
  synchronize(gpu());
  r.grad = u.flat_grad().clone();
  return r;
}

std::vector<PassTiming> profiled(Unit& u, bool split, double* step_ms, UnitRun* out = nullptr) {
  gpu_profile_begin_step(gpu());
  EXPECT_TRUE(gpu_profile_armed());
  UnitRun r = run_unit(u, split);
  std::vector<PassTiming> t = gpu_profile_end_step(step_ms);
  EXPECT_FALSE(gpu_profile_armed());
  if (out) *out = r;
  return t;
}

TEST(GpuLayerProfile, EveryLeafPassInCallOrder) {
  SKIP_WITHOUT_GPU();
  auto u = conv_lif_unit();
  run_unit(*u, false);  // warm: cuDNN choices, allocator
  double step_ms = 0.0;
  const std::vector<PassTiming> t = profiled(*u, false, &step_ms);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].type, "conv2d");
  EXPECT_EQ(t[0].pass, ProfilePass::Forward);
  EXPECT_EQ(t[1].type, "neuron");
  EXPECT_EQ(t[1].pass, ProfilePass::Forward);
  EXPECT_EQ(t[2].type, "neuron");
  EXPECT_EQ(t[2].pass, ProfilePass::Backward);
  EXPECT_EQ(t[3].type, "conv2d");
  EXPECT_EQ(t[3].pass, ProfilePass::Backward);
  EXPECT_FALSE(t[0].layer.empty());
  EXPECT_NE(t[0].layer, t[1].layer);
  EXPECT_EQ(t[0].layer, t[3].layer);
  double sum = 0.0;
  for (const PassTiming& p : t) {
    EXPECT_GE(p.ms, 0.0) << p.layer << " " << profile_pass_name(p.pass);
    sum += p.ms;
  }
  EXPECT_GT(t[0].ms, 0.0);  // a convolution's kernels take longer than the events' resolution
  EXPECT_GT(t[3].ms, 0.0);
  EXPECT_GT(step_ms, 0.0);
  EXPECT_LE(sum, step_ms * (1 + 1e-6) + 1e-3);  // event resolution ~0.5 µs
  const StepProfile p = build_step_profile(t, step_ms, "cuda-events");
  EXPECT_EQ(p.rows.size(), 4u);
  EXPECT_EQ(p.types.size(), 2u);
}

TEST(GpuLayerProfile, SplitPassesAndNoWeightPassWithoutParameters) {
  SKIP_WITHOUT_GPU();
  auto u = conv_lif_unit();
  run_unit(*u, true);
  double step_ms = 0.0;
  const std::vector<PassTiming> t = profiled(*u, true, &step_ms);
  ASSERT_EQ(t.size(), 5u);  // conv fwd, lif fwd, lif B, conv B, conv W (the neuron has no W row)
  EXPECT_EQ(t[2].pass, ProfilePass::BackwardInput);
  EXPECT_EQ(t[3].pass, ProfilePass::BackwardInput);
  EXPECT_EQ(t[4].type, "conv2d");
  EXPECT_EQ(t[4].pass, ProfilePass::BackwardWeight);
  int weight_rows = 0;
  for (const PassTiming& p : t) weight_rows += p.pass == ProfilePass::BackwardWeight;
  EXPECT_EQ(weight_rows, 1);
}

TEST(GpuLayerProfile, DisarmedLeavesNoTraceAndResultsAreUnchanged) {
  SKIP_WITHOUT_GPU();
  auto u = conv_lif_unit();
  const UnitRun plain = run_unit(*u, false);
  UnitRun timed;
  double step_ms = 0.0;
  std::vector<PassTiming> t = profiled(*u, false, &step_ms, &timed);
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(gputest::rel_err(timed.y, plain.y), 0.0);
  EXPECT_EQ(gputest::rel_err(timed.dx, plain.dx), 0.0);
  EXPECT_EQ(gputest::rel_err(timed.grad, plain.grad), 0.0);
  run_unit(*u, false);  // disarmed: nothing recorded
  t = profiled(*u, false, &step_ms);  // the pool's events are reused: again exactly this step's passes
  EXPECT_EQ(t.size(), 4u);
  EXPECT_THROW(gpu_profile_end_step(nullptr), Error);  // not armed
}

}  // namespace
}  // namespace sm
