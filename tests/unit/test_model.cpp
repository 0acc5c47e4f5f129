// test_model.cpp — Model (models/model.h): forward/backward chain the units in order
// (checked against a hand-computed two-layer linear model), the built-in models run a tiny
// batch end to end, statistics, summary, deterministic init, and misuse errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <set>

#include "gradient_check.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {
namespace {

const char* kLinearSpec = R"([model]
name = "lin2"
input = [3]
num_classes = 2
T = 2
loss = "mean_ce"
input_kind = "events"

[[unit]]
name = "a"
layers = [ { type = "linear", in_features = 3, out_features = 4 } ]

[[unit]]
name = "b"
layers = [ { type = "linear", in_features = 4, out_features = 2 } ]
)";

std::string write_spec(const std::string& tag, const std::string& text) {
  std::string path = ::testing::TempDir() + "sm_model_" + std::to_string(getpid()) + "_" + tag + ".toml";
  std::ofstream(path) << text;
  return path;
}

bool all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.at(i))) return false;
  return true;
}

TEST(Model, ForwardAndBackwardChainUnitsInOrder) {
  std::string path = write_spec("lin", kLinearSpec);
  auto m = load_model_spec(path);
  m->finalize(DType::F64, Device::cpu(), 3);
  auto ps = m->params();  // a.0.weight [4,3], a.0.bias [4], b.0.weight [2,4], b.0.bias [2]
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_EQ(ps[0]->name, "a.0.weight");
  EXPECT_EQ(ps[3]->name, "b.0.bias");
  const Tensor &W1 = ps[0]->value, &b1 = ps[1]->value, &W2 = ps[2]->value, &b2 = ps[3]->value;
  const int T = 2, N = 3;
  Tensor x = test::random_tensor({T, N, 3}, DType::F64, 11);
  Ctx ctx;
  Tensor y = m->forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{T, N, 2}));
  Tensor dy = test::random_tensor({T, N, 2}, DType::F64, 12);
  m->zero_grad();
  Tensor dx = m->backward(dy, ctx);
  ASSERT_EQ(dx.shape(), x.shape());
  // By hand: h = W1 x + b1, y = W2 h + b2; dx = W1ᵀ W2ᵀ dy; dW2 = Σ dy hᵀ; dW1 = Σ (W2ᵀ dy) xᵀ.
  std::vector<double> dW1(12, 0.0), dW2(8, 0.0);
  for (int s = 0; s < T * N; ++s) {
    double h[4], g[4];
    for (int j = 0; j < 4; ++j) {
      h[j] = b1.at(j);
      for (int i = 0; i < 3; ++i) h[j] += W1.at(j * 3 + i) * x.at(s * 3 + i);
    }
    for (int k = 0; k < 2; ++k) {
      double want = b2.at(k);
      for (int j = 0; j < 4; ++j) want += W2.at(k * 4 + j) * h[j];
      EXPECT_NEAR(y.at(s * 2 + k), want, 1e-12);
    }
    for (int j = 0; j < 4; ++j) {
      g[j] = 0;
      for (int k = 0; k < 2; ++k) {
        g[j] += W2.at(k * 4 + j) * dy.at(s * 2 + k);
        dW2[k * 4 + j] += dy.at(s * 2 + k) * h[j];
      }
      for (int i = 0; i < 3; ++i) dW1[j * 3 + i] += g[j] * x.at(s * 3 + i);
    }
    for (int i = 0; i < 3; ++i) {
      double want = 0;
      for (int j = 0; j < 4; ++j) want += W1.at(j * 3 + i) * g[j];
      EXPECT_NEAR(dx.at(s * 3 + i), want, 1e-12);
    }
  }
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(ps[0]->grad.at(i), dW1[i], 1e-12);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(ps[2]->grad.at(i), dW2[i], 1e-12);
  m->zero_grad();
  for (Param* p : m->params())
    for (int64_t i = 0; i < p->grad.numel(); ++i) ASSERT_EQ(p->grad.at(i), 0.0);
  std::remove(path.c_str());
}

TEST(Model, FmnistCsnnTinyBatch) {
  for (DType dt : {DType::F32, DType::F64}) {
    ModelOverrides ov;
    ov.vars["C"] = 4;
    auto m = load_builtin_model("fmnist_csnn", ov);
    m->finalize(dt, Device::cpu(), 5);
    EXPECT_EQ(m->dtype(), dt);
    EXPECT_EQ(m->loss->name(), "rate_mse");
    const int T = 2, N = 2;
    Tensor x = test::random_tensor({T, N, 1, 28, 28}, dt, 21, 0.0, 3.0);
    Ctx ctx;
    m->reset_state();
    Tensor y = m->forward(x, ctx);
    ASSERT_EQ(y.shape(), (Shape{T, N, 10}));
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_TRUE(y.at(i) == 0.0 || y.at(i) == 1.0) << "IF outputs spikes";
    std::set<std::string> neurons;
    for (const LayerStat& s : m->stats()) {
      if (s.key != "firing_rate") continue;
      neurons.insert(s.layer);
      EXPECT_GE(s.value, 0.0);
      EXPECT_LE(s.value, 1.0);
    }
    EXPECT_EQ(neurons, (std::set<std::string>{"conv_fc.2", "conv_fc.6", "conv_fc.10", "conv_fc.12"}));
    Tensor dy = test::random_tensor({T, N, 10}, dt, 22);
    m->zero_grad();
    Tensor dx = m->backward(dy, ctx);
    ASSERT_EQ(dx.shape(), x.shape());
    EXPECT_TRUE(all_finite(dx));
    EXPECT_GT(test::detail::max_abs(dx), 0.0);  // ATan surrogate: gradients reach the input
    for (Param* p : m->params()) EXPECT_TRUE(all_finite(p->grad)) << p->name;
  }
}

TEST(Model, Cifar10DvsVggTinyBatch) {
  auto m = load_builtin_model("cifar10dvs_vgg");
  m->finalize(DType::F32, Device::cpu(), 9);
  const int T = 1, N = 2;
  Tensor x = test::random_tensor({T, N, 2, 48, 48}, DType::F32, 31, 0.0, 2.0);
  Ctx ctx;
  m->reset_state();
  Tensor y = m->forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{T, N, 10}));
  EXPECT_TRUE(all_finite(y));
  EXPECT_EQ(m->stats().size() >= 8u, true);
  Tensor dy = test::random_tensor({T, N, 10}, DType::F32, 32);
  m->zero_grad();
  Tensor dx = m->backward(dy, ctx);
  ASSERT_EQ(dx.shape(), x.shape());
  EXPECT_TRUE(all_finite(dx));
}

TEST(Model, InputShapeMismatchIsInputError) {
  std::string path = write_spec("lin_bad", kLinearSpec);
  auto m = load_model_spec(path);
  m->finalize(DType::F64, Device::cpu(), 3);
  Ctx ctx;
  try {
    m->forward(Tensor::zeros({2, 3, 4}, DType::F64), ctx);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    std::string msg = e.what();
    EXPECT_NE(msg.find("lin2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3, 4]"), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

TEST(Model, FinalizeTwiceIsAnError) {
  std::string path = write_spec("lin_twice", kLinearSpec);
  auto m = load_model_spec(path);
  m->finalize(DType::F64, Device::cpu(), 3);
  EXPECT_THROW(m->finalize(DType::F64, Device::cpu(), 3), Error);
  std::remove(path.c_str());
}

TEST(Model, InitDependsOnSeedAndNameOnly) {
  ModelOverrides ov;
  ov.vars["C"] = 4;
  auto a = load_builtin_model("fmnist_csnn", ov);
  auto b = load_builtin_model("fmnist_csnn", ov);
  auto c = load_builtin_model("fmnist_csnn", ov);
  a->finalize(DType::F64, Device::cpu(), 42);
  b->finalize(DType::F64, Device::cpu(), 42);
  c->finalize(DType::F64, Device::cpu(), 43);
  auto pa = a->params(), pb = b->params(), pc = c->params();
  ASSERT_EQ(pa.size(), pb.size());
  bool any_diff = false;
  for (size_t i = 0; i < pa.size(); ++i)
    for (int64_t k = 0; k < pa[i]->value.numel(); ++k) {
      ASSERT_EQ(pa[i]->value.at(k), pb[i]->value.at(k));
      any_diff = any_diff || pa[i]->value.at(k) != pc[i]->value.at(k);
    }
  EXPECT_TRUE(any_diff);
}

TEST(Model, SummaryTable) {
  auto m = load_builtin_model("cifar10dvs_vgg");
  std::string before = m->summary();  // works before finalize (paths computed)
  m->finalize(DType::F32, Device::cpu(), 1);
  std::string s = m->summary();
  EXPECT_EQ(before, s);
  for (const char* want : {"cifar10dvs_vgg", "features.2.proj_bn.1", "conv2d", "[256, 24, 24]", "features.7.neuron",
                           "lif", "classifier.1", "[4608]", "linear", "46,090", "total parameters: 9,271,498"})
    EXPECT_NE(s.find(want), std::string::npos) << "no '" << want << "' in\n" << s;
}

}  // namespace
}  // namespace sm
