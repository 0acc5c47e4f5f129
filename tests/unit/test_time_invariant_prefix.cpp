// test_time_invariant_prefix.cpp — the model's first unit running its children before the
// first neuron on one time step when the input repeats one step over T
// (layers/time_invariant_prefix.h): 20 fp64 training steps of the CSNN (conv → BN → IF) and of
// a small Spikformer-Ti (conv → BN → max pool → LIF stem) with merging on against off — losses,
// parameters, batch-norm buffers (the running variance's Bessel factor counts the T steps) and
// firing rates; the merge really ran (and did not for an input whose steps differ); evaluation
// merges too and gives the same logits; two microbatches in flight; memopt segments (no merge,
// the same trajectory); SPIKEMESH_MERGE_STEPS's check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "error_of.h"
#include "gradient_check.h"
#include "spikemesh/layers/time_invariant_prefix.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/train_step.h"

namespace sm {
namespace {

struct Case {
  std::string model;
  std::vector<std::string> vars;
  int T = 4;
  int64_t batch = 3;
};

const Case kCsnn{"fmnist_csnn", {"C=4"}, 4, 3};
const Case kSformerTi{"spikformer_ti", {"E=16", "heads=2", "depth=1", "num_classes=10", "image_size=32"}, 3, 2};

struct TrainRun {
  std::vector<double> losses, params, buffers, firing, logits;
  int64_t merged = 0;  // forwards that merged
};

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.at(i));
  return v;
}

// [T, n, ...]: one random step repeated over T (repeat), or T different steps.
Tensor input_of(const Model& m, int64_t n, uint64_t seed, DType dt, bool repeat) {
  Shape one{1, n}, all{m.info.T, n};
  one.insert(one.end(), m.info.input_shape.begin(), m.info.input_shape.end());
  all.insert(all.end(), m.info.input_shape.begin(), m.info.input_shape.end());
  if (!repeat) return test::random_tensor(all, dt, seed, -0.5, 2.0);
  return repeat_time_steps(test::random_tensor(one, dt, seed, -0.5, 2.0), m.info.T);
}

// steps training steps (accum microbatches each, memopt `level`), then one evaluation forward.
TrainRun train(const Case& c, bool merge, bool repeat, DType dt, int steps, int level = 0, int accum = 1) {
  const bool before = merge_repeated_steps_enabled();
  set_merge_repeated_steps(merge);
  ModelSelection sel;
  sel.model = c.model;
  sel.vars = c.vars;
  sel.T = c.T;
  sel.dropout = 0.0;
  auto m = sel.build();
  m->finalize(dt, Device::cpu(), 7);
  LayoutOptions lo;
  lo.memopt.level = level;
  Layout layout(*m, nullptr, resolved_layout_plan(lo, MeshShape{}, 1, 0, *m));
  OptimizerConfig oc;
  auto opt = make_optimizer(oc, layout.optimizer_params());
  TrainRun r;
  const int64_t merged_before = merged_prefix_runs();
  for (int s = 0; s < steps; ++s) {
    Ctx ctx;
    ctx.seed = 11;
    ctx.step = s;
    std::vector<MicroBatch> micro(static_cast<size_t>(accum));
    for (int k = 0; k < accum; ++k) {
      MicroBatch& b = micro[k];
      b.x = input_of(*m, c.batch, 500 + static_cast<uint64_t>(s * accum + k), dt, repeat);
      b.y = Tensor::empty({c.batch}, DType::I64);
      for (int64_t i = 0; i < c.batch; ++i) b.y.data<int64_t>()[i] = (s * 7 + k + i * 3) % m->info.num_classes;
      b.sample_offset = k * c.batch;
    }
    r.losses.push_back(train_step(layout, *opt, micro, ctx, StepOptions{}).loss);
  }
  for (Param* p : m->params())
    for (double v : values_of(p->value)) r.params.push_back(v);
  for (Buffer* b : m->buffers())
    for (double v : values_of(b->value)) r.buffers.push_back(v);
  for (const LayerStat& st : m->stats()) r.firing.push_back(st.value);
  Ctx eval;
  eval.training = false;
  layout.stage().reset_state();
  r.logits = values_of(layout.stage().forward(input_of(*m, c.batch, 900, dt, repeat), eval));
  r.merged = merged_prefix_runs() - merged_before;
  set_merge_repeated_steps(before);
  return r;
}


void expect_merge_keeps_trajectory(const Case& c) {
  const int steps = 20;
  const TrainRun off = train(c, false, true, DType::F64, steps), on = train(c, true, true, DType::F64, steps);
  EXPECT_EQ(off.merged, 0) << c.model << ": merging off, yet a prefix was merged";
  EXPECT_EQ(on.merged, steps + 1) << c.model << ": every training forward and the evaluation merge";
  ASSERT_EQ(on.losses.size(), off.losses.size());
  EXPECT_NE(off.losses.front(), off.losses.back()) << c.model << ": the reference did not train";
  EXPECT_LE(test::max_rel(on.losses, off.losses), 1e-10) << c.model << ": losses";
  EXPECT_LE(test::max_rel(on.params, off.params), 1e-10) << c.model << ": parameters";
  EXPECT_LE(test::max_rel(on.buffers, off.buffers), 1e-10) << c.model << ": batch-norm buffers";
  EXPECT_LE(test::max_rel(on.firing, off.firing), 1e-12) << c.model << ": firing rates";
  EXPECT_LE(test::max_rel(on.logits, off.logits), 1e-10) << c.model << ": evaluation logits";
  std::printf("[ info     ] %s: merged = unmerged over %d fp64 steps (losses %.2g, params %.2g, buffers %.2g)\n",
              c.model.c_str(), steps, test::max_rel(on.losses, off.losses), test::max_rel(on.params, off.params),
              test::max_rel(on.buffers, off.buffers));
}

TEST(TimeInvariantPrefix, MergedStepsKeepTheCsnnTrajectory) { expect_merge_keeps_trajectory(kCsnn); }
TEST(TimeInvariantPrefix, MergedStepsKeepTheSpikformerTrajectory) { expect_merge_keeps_trajectory(kSformerTi); }

// Two microbatches per step (their slots in flight): each forward merges, the trajectory is the
// unmerged one.
TEST(TimeInvariantPrefix, MicrobatchesMergeEachAndKeepTheTrajectory) {
  const TrainRun off = train(kSformerTi, false, true, DType::F64, 10, 0, 2);
  const TrainRun on = train(kSformerTi, true, true, DType::F64, 10, 0, 2);
  EXPECT_EQ(on.merged, 2 * 10 + 1);
  EXPECT_LE(test::max_rel(on.losses, off.losses), 1e-10);
  EXPECT_LE(test::max_rel(on.params, off.params), 1e-10);
  EXPECT_LE(test::max_rel(on.buffers, off.buffers), 1e-10);
}

// Under memopt the first unit runs in segments and does not merge; nothing nested in it takes
// the stage's permission (a residual body's repeated spikes must not merge there), and the
// trajectory is the merged level-0 one.
TEST(TimeInvariantPrefix, MemoptSegmentsDoNotMerge) {
  for (int level : {1, 2}) {
    SCOPED_TRACE("memopt level " + std::to_string(level));
    const TrainRun ref = train(kSformerTi, true, true, DType::F64, 10);
    const TrainRun got = train(kSformerTi, true, true, DType::F64, 10, level);
    EXPECT_EQ(got.merged, 0) << "the unit runs in segments, in training and in evaluation";
    EXPECT_LE(test::max_rel(got.losses, ref.losses), 1e-9);
    EXPECT_LE(test::max_rel(got.params, ref.params), 1e-9);
  }
}

TEST(TimeInvariantPrefix, StepsThatDifferAreNotMerged) {
  const TrainRun r = train(kCsnn, true, false, DType::F64, 2);
  EXPECT_EQ(r.merged, 0);
}

TEST(TimeInvariantPrefix, Float32StaysWithinRounding) {
  const TrainRun off = train(kSformerTi, false, true, DType::F32, 2), on = train(kSformerTi, true, true, DType::F32, 2);
  EXPECT_EQ(on.merged, 3);
  EXPECT_LE(test::max_rel(on.losses, off.losses), 1e-5);
  EXPECT_LE(test::max_rel(on.buffers, off.buffers), 1e-4);
}

TEST(TimeInvariantPrefix, RepeatAndSumOverSteps) {
  Tensor one = test::random_tensor({1, 2, 3}, DType::F64, 3, -1.0, 1.0);
  Tensor rep = repeat_time_steps(one, 4);
  ASSERT_EQ(rep.shape(), (Shape{4, 2, 3}));
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(rep.at(t * 6 + i), one.at(i));
  Tensor g = test::random_tensor({4, 2, 3}, DType::F64, 4, -1.0, 1.0);
  Tensor s = sum_time_steps(g);
  ASSERT_EQ(s.shape(), (Shape{1, 2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(s.at(i), ((g.at(i) + g.at(6 + i)) + g.at(12 + i)) + g.at(18 + i));
}

TEST(TimeInvariantPrefix, EnvironmentValueIsChecked) {
  const char* old = std::getenv("SPIKEMESH_MERGE_STEPS");
  const std::string saved = old ? old : "";
  const bool before = merge_repeated_steps_enabled();
  setenv("SPIKEMESH_MERGE_STEPS", "off", 1);
  const std::string e = error_of([] { apply_merge_steps_env(); });
  EXPECT_NE(e.find("SPIKEMESH_MERGE_STEPS=off: expected 1 (on, the default) or 0 (off)"), std::string::npos) << e;
  setenv("SPIKEMESH_MERGE_STEPS", "0", 1);
  apply_merge_steps_env();
  EXPECT_FALSE(merge_repeated_steps_enabled());
  if (old) setenv("SPIKEMESH_MERGE_STEPS", saved.c_str(), 1);
  else unsetenv("SPIKEMESH_MERGE_STEPS");
  set_merge_repeated_steps(before);
}

}  // namespace
}  // namespace sm
