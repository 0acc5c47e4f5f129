// test_spikformer.cpp — the pieces Spikformer adds around the attention core:
// Mean over a per-sample dim (naive double reference, finite differences), Flatten with
// start_dim (tokens), [[unit]] repeat = K with "{i}" names, and the built-in specs
// spikformer_ti / _s / _cifar (parameter counts = SpikingJelly 2.0's Spikformer builders,
// state-dict names, a small variant running forward and backward).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "error_of.h"
#include "gradient_check.h"
#include "spikemesh/layers/flatten.h"
#include "spikemesh/layers/mean.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {
namespace {

bool finite_all(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.at(i))) return false;
  return true;
}

// ---------------------------------------------------------------------------- Mean
TEST(Mean, ForwardIsTheNaiveMeanOverTheDim) {
  for (int dim : {0, 1, -1, -2}) {
    Mean m(dim);
    const Tensor x = test::random_tensor({2, 3, 4, 5}, DType::F64, 11);  // [T, N, E, L]
    Ctx ctx;
    const Tensor y = m.forward(x, ctx);
    const int d = dim < 0 ? dim + 2 : dim;  // per-sample [4, 5]
    ASSERT_EQ(y.shape(), (d == 0 ? Shape{2, 3, 5} : Shape{2, 3, 4}));
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t n = 0; n < 3; ++n)
        for (int64_t k = 0; k < (d == 0 ? 5 : 4); ++k) {
          double s = 0;
          for (int64_t j = 0; j < (d == 0 ? 4 : 5); ++j)
            s += d == 0 ? x.at(((t * 3 + n) * 4 + j) * 5 + k) : x.at(((t * 3 + n) * 4 + k) * 5 + j);
          EXPECT_NEAR(y.at((t * 3 + n) * (d == 0 ? 5 : 4) + k), s / (d == 0 ? 4 : 5), 1e-15);
        }
    m.backward_input(test::random_tensor(y.shape(), DType::F64, 12), ctx);  // releases the slot
  }
}

TEST(Mean, BackwardMatchesFiniteDifferences) {
  Mean m(-1);
  EXPECT_TRUE(test::check_layer_gradients(m, test::random_tensor({2, 2, 3, 7}, DType::F64, 21)));
  Mean first(0);
  EXPECT_TRUE(test::check_layer_gradients(first, test::random_tensor({1, 2, 4, 3, 2}, DType::F64, 22)));
}

TEST(Mean, F32AgreesWithF64) {
  Mean m(-1);
  const Tensor x64 = test::random_tensor({2, 2, 8, 196}, DType::F64, 31);
  Ctx ctx;
  const Tensor y64 = m.forward(x64, ctx);
  m.backward_input(Tensor::zeros(y64.shape(), DType::F64), ctx);
  const Tensor y32 = m.forward(x64.to_dtype(DType::F32), ctx);
  for (int64_t i = 0; i < y64.numel(); ++i) EXPECT_NEAR(y32.at(i), y64.at(i), 1e-5 * (1 + std::fabs(y64.at(i))));
}

TEST(Mean, ShapeErrors) {
  EXPECT_THROW(Mean(2).output_shape({4, 5}), Error);
  EXPECT_THROW(Mean(-3).output_shape({4, 5}), Error);
  EXPECT_EQ(Mean(-1).output_shape({4, 5}), (Shape{4}));
}

// ---------------------------------------------------------------------------- Flatten(start_dim)
TEST(Flatten, StartDimKeepsTheLeadingDims) {
  Flatten tokens(1);
  EXPECT_EQ(tokens.output_shape({8, 3, 4}), (Shape{8, 12}));
  EXPECT_EQ(Flatten(0).output_shape({8, 3, 4}), (Shape{96}));
  EXPECT_THROW(Flatten(3).output_shape({8, 3, 4}), Error);
  const Tensor x = test::random_tensor({2, 1, 8, 3, 4}, DType::F32, 41);  // [T, N, E, H, W]
  Ctx ctx;
  const Tensor y = tokens.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{2, 1, 8, 12}));
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y.at(i), x.at(i));  // a view, same order
  const Tensor dx = tokens.backward_input(y, ctx);
  EXPECT_EQ(dx.shape(), x.shape());
}

// ---------------------------------------------------------------------------- [[unit]] repeat
std::string write_spec(const std::string& tag, const std::string& text) {
  const std::string path = ::testing::TempDir() + "sm_sf_" + std::to_string(getpid()) + "_" + tag + ".toml";
  std::ofstream(path) << text;
  return path;
}

std::string repeat_spec(const std::string& name, const std::string& repeat) {
  return R"([model]
name = "rep"
input = [4, 6]
num_classes = 2
T = 1
loss = "mean_ce"
input_kind = "events"
[vars]
depth = 3
[[unit]]
name = ")" + name + R"("
repeat = )" + repeat + R"(
layers = [ { type = "residual", name = "mlp", layers = [ { type = "conv1d", name = "fc", in_channels = 4, out_channels = 4 } ] } ]
[[unit]]
name = ""
layers = [ { type = "mean", name = "m" }, { type = "linear", name = "head", in_features = 4, out_features = 2 } ]
)";
}

TEST(SpecRepeat, CopiesTheUnitWithIndexedNames) {
  const std::string path = write_spec("rep", repeat_spec("blocks.{i}", "\"depth\""));
  auto m = load_model_spec(path);
  ASSERT_EQ(m->units.size(), 4u);
  m->finalize(DType::F32, Device::cpu(), 1);
  std::set<std::string> names;
  for (Param* p : m->params()) names.insert(p->name);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(names.count("blocks." + std::to_string(i) + ".mlp.fc.weight")) << i;
  // each copy initialises its own weights (init is keyed by the parameter's name)
  EXPECT_NE(m->params()[0]->value.at(0), m->params()[2]->value.at(0));
  ModelOverrides ov;
  ov.vars["depth"] = 1;
  EXPECT_EQ(load_model_spec(path, ov)->units.size(), 2u);
  std::remove(path.c_str());
}

TEST(SpecRepeat, Errors) {
  const std::string no_index = write_spec("noidx", repeat_spec("blocks", "2"));
  try {
    load_model_spec(no_index);
    ADD_FAILURE() << "repeat without {i} accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("{i}"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(no_index), std::string::npos) << e.what();
  }
  const std::string zero = write_spec("zero", repeat_spec("blocks.{i}", "0"));
  EXPECT_THROW(load_model_spec(zero), Error);
  std::remove(no_index.c_str());
  std::remove(zero.c_str());
}

// ---------------------------------------------------------------------------- [[require]]
std::string load_error(const std::string& model, const ModelOverrides& ov) {
  return error_of([&] { load_builtin_model(model, ov); });
}

TEST(SpecRequire, RefusesVarsTheModelCannotUseWithTheReason) {
  const std::string path = write_spec("req", std::string("[[require]]\nvalue = \"depth / 2\"\nwhy = \"pairs\"\n") +
                                                 repeat_spec("blocks.{i}", "\"depth\""));
  ModelOverrides ov;
  ov.vars["depth"] = 2;
  EXPECT_NO_THROW(load_model_spec(path, ov));
  ov.vars["depth"] = 3;
  try {
    load_model_spec(path, ov);
    ADD_FAILURE() << "depth 3 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* part : {"depth = 3", "3 / 2 is not an integer", "(pairs)", "[[require]] 0"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " missing in: " << m;
    EXPECT_NE(m.find(path + ":1:"), std::string::npos) << m;  // file and line
  }
  ov.vars["depth"] = 0;  // min defaults to 1: 0 / 2 = 0 is refused
  EXPECT_THROW(load_model_spec(path, ov), Error);
  std::remove(path.c_str());
}

TEST(SpecRequire, SpikformerSpecsRefuseBadHeadsWidthsAndImageSizes) {
  struct Case {
    const char* model;
    const char* var;
    int64_t value;
    const char* expect;
  };
  for (const Case& c : {Case{"spikformer_ti", "heads", 0, "heads = 0"}, Case{"spikformer_ti", "heads", -4, "heads = -4"},
                        Case{"spikformer_ti", "heads", 12, "256 / 12 is not an integer"},
                        Case{"spikformer_s", "E", 388, "E = 388"},
                        Case{"spikformer_ti", "image_size", 100, "100 / 16 is not an integer"},
                        Case{"spikformer_cifar", "image_size", 30, "30 / 4 is not an integer"}}) {
    ModelOverrides ov;
    ov.vars[c.var] = c.value;
    const std::string m = load_error(c.model, ov);
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.model << " " << c.var << "=" << c.value << ": " << m;
    EXPECT_NE(m.find(std::string(c.model) + ".toml:"), std::string::npos) << m;
  }
  ModelOverrides ok;
  ok.vars["image_size"] = 28;
  EXPECT_EQ(load_error("spikformer_cifar", ok), "");
  ok.vars["image_size"] = 32;
  EXPECT_EQ(load_error("spikformer_ti", ok), "");
}

// ---------------------------------------------------------------------------- built-in specs
int64_t count_params(Model& m) {
  int64_t n = 0;
  for (Param* p : m.params()) n += shape_numel(p->shape);
  return n;
}

TEST(SpikformerSpec, ParameterCountsEqualSpikingJelly) {
  // SpikingJelly 2.0: sum(p.numel() for p in spikformer_ti().parameters()) = 4,400,392;
  // spikformer_s(): 13,244,824 (224 px, 1000 classes, patch 16).
  auto ti = load_builtin_model("spikformer_ti");
  ti->finalize(DType::F32, Device::cpu(), 1);
  EXPECT_EQ(count_params(*ti), 4400392);
  EXPECT_EQ(ti->units.size(), 6u);  // stem, 4 blocks, head
  auto s = load_builtin_model("spikformer_s");
  s->finalize(DType::F32, Device::cpu(), 1);
  EXPECT_EQ(count_params(*s), 13244824);
  EXPECT_EQ(s->units.size(), 8u);
  // spikformer_cifar10() (patch 4, E 384, 12 heads, depth 4, 32 px, 10 classes): 9,310,906
  auto c = load_builtin_model("spikformer_cifar");
  c->finalize(DType::F32, Device::cpu(), 1);
  EXPECT_EQ(count_params(*c), 9310906);
}

TEST(SpikformerSpec, StateDictNamesAreSpikingJellys) {
  auto m = load_builtin_model("spikformer_ti");
  m->finalize(DType::F32, Device::cpu(), 1);
  std::set<std::string> names;
  for (Param* p : m->params()) names.insert(p->name);
  for (const char* n : {"patch_embed.stages.0.conv_bn.block.0.weight", "patch_embed.stages.3.conv_bn.block.1.bias",
                        "patch_embed.positional_encoding.conv_bn.block.0.weight", "blocks.0.attn.qkv_conv_bn.0.weight",
                        "blocks.3.attn.proj_conv_bn.1.weight", "blocks.2.mlp.fc1.0.weight", "blocks.1.mlp.fc2.1.bias",
                        "head.weight", "head.bias"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("patch_embed.stages.0.conv_bn.block.0.bias"));  // convs have no bias
}

TEST(SpikformerSpec, SmallVariantRunsForwardAndBackward) {
  ModelOverrides ov;
  ov.vars = {{"image_size", 32}, {"num_classes", 10}, {"depth", 2}, {"heads", 4}, {"E", 64}};
  ov.T = 2;
  auto m = load_builtin_model("spikformer_ti", ov);
  m->finalize(DType::F32, Device::cpu(), 5);
  const int T = 2, N = 2;
  Tensor img = test::random_tensor({N, 3, 32, 32}, DType::F32, 51, 0.0, 2.0);
  Tensor x = Tensor::empty({T, N, 3, 32, 32}, DType::F32);  // a static image repeated over T
  for (int t = 0; t < T; ++t)
    for (int64_t i = 0; i < img.numel(); ++i) x.data<float>()[t * img.numel() + i] = img.data<float>()[i];
  Ctx ctx;
  m->reset_state();
  const Tensor y = m->forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{T, N, 10}));
  EXPECT_TRUE(finite_all(y));
  m->zero_grad();
  const Tensor dx = m->backward(test::random_tensor(y.shape(), DType::F32, 52), ctx);
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_TRUE(finite_all(dx));
  double head_grad = 0;
  for (Param* p : m->params()) {
    EXPECT_TRUE(finite_all(p->grad)) << p->name;
    if (p->name == "head.weight") head_grad = test::detail::max_abs(p->grad);
  }
  EXPECT_GT(head_grad, 0.0);
}

// Every unit of a tiny Spikformer — the stem (4 conv/BN/[pool]/LIF stages and the positional
// branch added to its input), an encoder block (SSA with the attention LIF at v_threshold 0.5,
// the MLP, both residual adds) and the head (mean over tokens, Linear) — against central finite
// differences in double. Neurons fire their surrogate's primitive (ctx.smooth_spikes) so the
// loss is differentiable, and without detach_reset (a detached reset is, on purpose, not the
// derivative of the forward); everything else is the built-in spec and the real layer code.
TEST(SpikformerSpec, EveryUnitMatchesFiniteDifferences) {
  std::ifstream in(builtin_model_path("spikformer_cifar"));
  std::stringstream text;
  text << in.rdbuf();
  std::string spec = text.str();
  const std::string detached = "detach_reset = true";
  ASSERT_NE(spec.find(detached), std::string::npos);
  spec.replace(spec.find(detached), detached.size(), "detach_reset = false");
  const std::string path = write_spec("fd", spec);
  ModelOverrides ov;
  ov.vars = {{"E", 16}, {"heads", 2}, {"depth", 1}, {"image_size", 8}, {"num_classes", 3}, {"in_channels", 1}};
  ov.T = 2;
  auto m = load_model_spec(path, ov);
  std::remove(path.c_str());
  m->finalize(DType::F64, Device::cpu(), 3);
  ASSERT_EQ(m->units.size(), 3u);  // stem, blocks.0, head
  test::GradCheckOptions o;
  o.smooth_spikes = true;
  o.max_checks = 40;
  const int T = 2, N = 2, E = 16, L = 4;  // 8x8 -> two stride-2 pools -> 2x2 tokens
  EXPECT_TRUE(test::check_layer_gradients(*m->units[0], test::random_tensor({T, N, 1, 8, 8}, DType::F64, 61, 0, 2), o))
      << "stem";
  EXPECT_TRUE(test::check_layer_gradients(*m->units[1], test::random_tensor({T, N, E, L}, DType::F64, 62, 0, 1), o))
      << "block";
  EXPECT_TRUE(test::check_layer_gradients(*m->units[2], test::random_tensor({T, N, E, L}, DType::F64, 63), o))
      << "head";
}

}  // namespace
}  // namespace sm
