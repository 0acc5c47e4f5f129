// test_multi_tensor.cpp — the host side of the multi-tensor optimizer launches
// (kernels/multi_tensor.h): chunk tables (order, edges, empty tensors, refusals), the first
// chunk of each tensor, and the per-step scalars against the CPU Adam / AdamW optimizers
// (optim/optimizer.h): one element updated by hand from the scalars follows the optimizer's
// own steps (to double rounding) over several steps with a changing learning rate.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/multi_tensor.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {
namespace {

TEST(MultiTensorChunks, CoverEveryElementOnceInTensorOrder) {
  const std::vector<int64_t> sizes = {3, 0, 8, 9, 0, 16, 1};
  const std::vector<TensorChunk> t = build_chunk_table(sizes, 8);
  // 3 -> 1 chunk, 0 -> none, 8 -> 1, 9 -> 2, 0 -> none, 16 -> 2, 1 -> 1.
  const std::vector<std::pair<int32_t, int64_t>> want = {{0, 0}, {2, 0}, {3, 0}, {3, 8}, {5, 0}, {5, 8}, {6, 0}};
  ASSERT_EQ(t.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(t[j].tensor, want[j].first) << j;
    EXPECT_EQ(t[j].begin, want[j].second) << j;
    EXPECT_EQ(t[j].reserved, 0) << j;
  }
  // Every element exactly once: walk the chunks as the kernels do.
  std::vector<std::vector<int>> seen(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) seen[k].assign(static_cast<size_t>(sizes[k]), 0);
  for (const TensorChunk& c : t)
    for (int64_t i = c.begin; i < std::min(sizes[c.tensor], c.begin + 8); ++i) ++seen[c.tensor][i];
  for (size_t k = 0; k < sizes.size(); ++k)
    for (int v : seen[k]) EXPECT_EQ(v, 1) << "tensor " << k;
  EXPECT_TRUE(build_chunk_table({}, 8).empty());
  EXPECT_TRUE(build_chunk_table({0, 0}, 8).empty());
  EXPECT_EQ(build_chunk_table({kMultiTensorChunk + 1}, kMultiTensorChunk).size(), 2u);
}

TEST(MultiTensorChunks, StartsNameEachTensorsFirstChunk) {
  const std::vector<int64_t> sizes = {3, 0, 8, 9, 0, 16, 1, 0};
  const std::vector<TensorChunk> t = build_chunk_table(sizes, 8);
  const std::vector<int64_t> s = chunk_starts(t, static_cast<int64_t>(sizes.size()));
  EXPECT_EQ(s, (std::vector<int64_t>{0, 1, 1, 2, 4, 4, 6, 7, 7}));
  EXPECT_EQ(chunk_starts({}, 2), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(chunk_starts({}, 0), (std::vector<int64_t>{0}));
}

TEST(MultiTensorChunks, RefusesBadInput) {
  EXPECT_THROW(build_chunk_table({4}, 0), Error);
  EXPECT_THROW(build_chunk_table({-1}, 8), Error);
  EXPECT_THROW(build_chunk_table({int64_t{1} << 40}, 1), Error);  // more blocks than one launch has
  std::vector<TensorChunk> bad = build_chunk_table({3, 3}, 8);
  EXPECT_THROW(chunk_starts(bad, 1), Error);  // names tensor 1 of 1
  std::swap(bad[0], bad[1]);
  EXPECT_THROW(chunk_starts(bad, 2), Error);  // out of order
}

TEST(MultiTensorScalars, LayoutIsFixed) {
  EXPECT_EQ(sizeof(TensorChunk), 16u);
  EXPECT_EQ(sizeof(OptimStepScalars), 64u);
  EXPECT_EQ(kMultiTensorChunk % 256, 0);
}

// One element updated from the scalars (adam.cpp's element expression) vs the optimizer.
double adam_element(double p, double g, double& m, double& v, double l2, double decay_factor, double beta1,
                    double beta2, double eps, const OptimStepScalars& s) {
  if (l2 != 0.0) g = g + l2 * p;
  if (decay_factor != 1.0) p = p * decay_factor;
  const double w = 1.0 - beta1;
  m = std::abs(w) < 0.5 ? m + w * (g - m) : g - (g - m) * (1.0 - w);
  v = v * beta2 + (1.0 - beta2) * g * g;
  const double denom = std::sqrt(v) / s.bias_corr2_sqrt + eps;
  return p + (-s.step_size) * m / denom;
}

void check_adam_scalars(bool decoupled) {
  SCOPED_TRACE(decoupled ? "adamw" : "adam");
  OptimizerConfig cfg;
  cfg.name = decoupled ? "adamw" : "adam";
  cfg.weight_decay = 0.03;
  cfg.beta1 = 0.8;
  cfg.beta2 = 0.95;
  Param p;
  p.name = p.local_name = "w";
  p.shape = p.local_shape = {1};
  p.weight_decay = true;
  p.value = Tensor::full({1}, 0.7, DType::F64);
  p.grad = Tensor::zeros({1}, DType::F64);
  auto opt = make_optimizer(cfg, {&p});
  double mine = 0.7, m = 0.0, v = 0.0;
  for (int64_t t = 1; t <= 6; ++t) {
    const double lr = 0.1 / static_cast<double>(t);
    opt->set_lr(lr);
    const double g = 0.25 * std::sin(static_cast<double>(t));
    p.grad.data<double>()[0] = g;
    opt->step();
    const OptimStepScalars s = adam_step_scalars(lr, cfg.beta1, cfg.beta2, cfg.weight_decay, decoupled, t);
    EXPECT_EQ(s.lr, lr);
    mine = adam_element(mine, g, m, v, decoupled ? 0.0 : cfg.weight_decay, s.decay_factor, cfg.beta1, cfg.beta2,
                        cfg.eps, s);
    // Within rounding (the compiler may fuse multiply-adds differently in the two places).
    const double theirs = p.value.data<double>()[0];
    EXPECT_NEAR(mine, theirs, 1e-13 * std::abs(theirs)) << "step " << t;
  }
  if (!decoupled) {
    EXPECT_EQ(adam_step_scalars(0.1, 0.9, 0.999, 0.5, false, 3).decay_factor, 1.0);
  }
}

TEST(MultiTensorScalars, AdamAndAdamWScalarsGiveTheCpuOptimizersStep) {
  check_adam_scalars(false);
  check_adam_scalars(true);
}

TEST(MultiTensorScalars, FirstStepValuesAndRefusal) {
  const OptimStepScalars s = adam_step_scalars(0.01, 0.9, 0.999, 0.1, true, 1);
  EXPECT_EQ(s.step_size, 0.01 / (1.0 - 0.9));
  EXPECT_EQ(s.bias_corr2_sqrt, std::sqrt(1.0 - 0.999));
  EXPECT_EQ(s.decay_factor, 1.0 - 0.01 * 0.1);
  EXPECT_EQ(sgd_step_scalars(0.25).lr, 0.25);
  EXPECT_THROW(adam_step_scalars(0.01, 0.9, 0.999, 0.0, false, 0), Error);
}

}  // namespace
}  // namespace sm
