// test_stage.cpp — the one unit loop (models/stage.h) and the one-rank Layout
// (parallel/layout.h): two microbatches in flight on every layer type of a small model
// (conv with bias, BN, LIF/PLIF/IF, max/avg pool, flatten, dropout, linear) — F(A, slot 0),
// F(B, slot 1), B(B), B(A), W(B), W(A) with the loss kept per slot — give the same losses,
// input gradients and parameter gradients (f64, 1e-12) as the two microbatches run one after
// the other; and the Layout's step with the backward split into B and W follows the unsplit
// trajectory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "gradient_check.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/spec_loader.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/train/train_step.h"

namespace sm {
namespace {

const char* kSpec = R"([model]
name = "every_layer"
input = [2, 8, 8]
num_classes = 5
T = 3
loss = "mean_ce"
input_kind = "events"

[[unit]]
name = "a"
layers = [
  { type = "conv2d", in_channels = 2, out_channels = 4, kernel_size = 3, padding = 1, bias = true },
  { type = "batchnorm2d", num_features = 4 },
  { type = "lif", v_threshold = 0.3 },
  { type = "maxpool2d", kernel_size = 2 },
]

[[unit]]
name = "b"
layers = [
  { type = "conv2d", in_channels = 4, out_channels = 4, kernel_size = 3, padding = 1 },
  { type = "batchnorm2d", num_features = 4 },
  { type = "plif", v_threshold = 0.3 },
  { type = "avgpool2d", kernel_size = 2 },
]

[[unit]]
name = "c"
layers = [
  { type = "flatten" },
  { type = "dropout", p = 0.3 },
  { type = "linear", in_features = 16, out_features = 8 },
  { type = "if", v_threshold = 0.2 },
  { type = "linear", in_features = 8, out_features = 5 },
]
)";

std::unique_ptr<Model> build() {
  const std::string path = ::testing::TempDir() + "sm_stage_" + std::to_string(getpid()) + ".toml";
  std::ofstream(path) << kSpec;
  auto m = load_model_spec(path);
  m->finalize(DType::F64, Device::cpu(), 5);
  return m;
}

MicroBatch batch(int64_t first, int64_t n, uint64_t seed) {
  MicroBatch b;
  b.x = test::random_tensor({3, n, 2, 8, 8}, DType::F64, seed);  // [T, n, C, H, W]
  b.y = Tensor::empty({n}, DType::I64);
  for (int64_t i = 0; i < n; ++i) b.y.data<int64_t>()[i] = (first + i * 3) % 5;
  b.sample_offset = first;
  return b;
}

std::vector<double> grads(Model& m) {
  std::vector<double> g;
  for (Param* p : m.params())
    for (int64_t i = 0; i < p->grad.numel(); ++i) g.push_back(p->grad.at(i));
  return g;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst = 0, scale = 1e-300;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  EXPECT_LE(worst / scale, 1e-12) << what;
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.at(i));
  return v;
}

TEST(Stage, TwoMicrobatchesInFlightEqualOneAfterTheOther) {
  const MicroBatch A = batch(0, 3, 21), B = batch(3, 2, 22);
  // Reference: A then B, each forward + backward (B computes dx and dW at once).
  auto ref = build();
  Stage all_ref(*ref, 0, ref->units.size());
  ref->zero_grad();
  std::vector<double> ref_loss, ref_dx[2];
  int k = 0;
  for (const MicroBatch* mb : {&A, &B}) {
    Ctx ctx;
    ctx.seed = 3;
    ctx.sample_offset = mb->sample_offset;
    all_ref.reset_state();
    Tensor out = all_ref.forward(mb->x, ctx);
    ref_loss.push_back(ref->loss->forward(out, mb->y).loss);
    ref_dx[k++] = values(all_ref.backward_input(ref->loss->backward(0.5), ctx));
  }
  EXPECT_GT(ref_dx[0].size(), 0u);
  // Interleaved, split backward, one slot per microbatch.
  auto m = build();
  Stage st(*m, 0, m->units.size());
  m->zero_grad();
  Ctx ca, cb;
  for (Ctx* c : {&ca, &cb}) {
    c->seed = 3;
    c->split_wgrad = true;
  }
  ca.slot = 0, ca.sample_offset = A.sample_offset;
  cb.slot = 1, cb.sample_offset = B.sample_offset;
  st.reset_state();
  Tensor out_a = st.forward(A.x, ca);
  st.reset_state();
  Tensor out_b = st.forward(B.x, cb);
  const double la = m->loss->forward(out_a, A.y, 0).loss, lb = m->loss->forward(out_b, B.y, 1).loss;
  Tensor dx_b = st.backward_input(m->loss->backward(0.5, 1), cb);
  Tensor dx_a = st.backward_input(m->loss->backward(0.5, 0), ca);
  st.backward_weight(cb);
  st.backward_weight(ca);
  EXPECT_EQ(la, ref_loss[0]);
  EXPECT_EQ(lb, ref_loss[1]);
  expect_close(values(dx_a), ref_dx[0], "dx of microbatch A");
  expect_close(values(dx_b), ref_dx[1], "dx of microbatch B");
  expect_close(grads(*m), grads(*ref), "parameter gradients");
  double gsum = 0;
  for (double g : grads(*ref)) gsum += std::abs(g);
  EXPECT_GT(gsum, 0.0) << "no gradient reached the parameters";
}

TEST(Stage, LayoutStepWithSplitBackwardFollowsTheUnsplitTrajectory) {
  std::vector<double> losses[2], params[2];
  for (int split = 0; split < 2; ++split) {
    auto m = build();
    LayoutOptions lo;
    lo.split_wgrad = split == 1;
    Layout layout(*m, nullptr, resolved_layout_plan(lo, MeshShape{}, 1, 0, *m));
    OptimizerConfig oc;
    oc.name = "adam";
    oc.lr = 0.01;
    auto opt = make_optimizer(oc, layout.optimizer_params());
    for (int s = 0; s < 4; ++s) {
      Ctx ctx;
      ctx.seed = 3;
      ctx.step = s;
      StepResult r = train_step(layout, *opt, {batch(0, 2, 30 + s), batch(2, 2, 40 + s)}, ctx);
      losses[split].push_back(r.loss);
      EXPECT_EQ(r.count, 4);
    }
    for (Param* p : m->params())
      for (int64_t i = 0; i < p->value.numel(); ++i) params[split].push_back(p->value.at(i));
  }
  expect_close(losses[1], losses[0], "losses");
  expect_close(params[1], params[0], "parameters after 4 steps");
  EXPECT_NE(losses[0].front(), losses[0].back());
}

}  // namespace
}  // namespace sm
