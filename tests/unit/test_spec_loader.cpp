// test_spec_loader.cpp — the TOML model-spec loader (models/spec_loader.h): the two
// built-in models (units, parameter names, shapes and counts computed by hand from the
// PyTorch modules documented in their TOML), the naming rules, overrides, and every kind
// of spec mistake giving an Input error that names the file and the offending entry.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/dropout.h"
#include "spikemesh/layers/linear.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {
namespace {

// A small valid spec; error tests change one thing in it.
const char* kTinySpec = R"([model]
name = "tiny"
input = [2, 6, 6]
num_classes = 3
T = 2
loss = "mean_ce"
input_kind = "events"

[vars]
C = 4

[neurons.lif]
type = "lif"
tau = 2.0
surrogate = "atan"

[[unit]]
name = "features.0"
layers = [
  { type = "conv2d", in_channels = 2, out_channels = "C", kernel_size = 3, padding = 1 },
  { type = "batchnorm2d", num_features = "C" },
  { type = "neuron", neuron = "lif" },
]

[[unit]]
name = "head"
layers = [
  { type = "avgpool2d", kernel_size = 2 },
  { type = "flatten", name = "flatten" },
  { type = "dropout", p = 0.5 },
  { type = "linear", in_features = "C*3*3", out_features = 3 },
]
)";

std::string write_spec(const std::string& tag, const std::string& text) {
  std::string path = ::testing::TempDir() + "sm_spec_" + std::to_string(getpid()) + "_" + tag + ".toml";
  std::ofstream(path) << text;
  return path;
}

// `base` with the first occurrence of `from` replaced (the test fails if it is absent).
std::string with(const std::string& base, const std::string& from, const std::string& to) {
  size_t at = base.find(from);
  EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the spec";
  if (at == std::string::npos) return base;
  return base.substr(0, at) + to + base.substr(at + from.size());
}

// Loads `text` and expects an Input error mentioning the file and every one of `needles`.
void expect_spec_error(const std::string& tag, const std::string& text, const std::vector<std::string>& needles,
                       const ModelOverrides& ov = {}) {
  std::string path = write_spec(tag, text);
  try {
    load_model_spec(path, ov);
    ADD_FAILURE() << tag << ": no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Input) << tag << ": " << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << tag << ": message does not name the file: " << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << tag << ": no '" << n << "' in: " << msg;
  }
  std::remove(path.c_str());
}

std::map<std::string, Shape> param_shapes(Model& m) {
  std::map<std::string, Shape> out;
  for (Param* p : m.params()) out[p->name] = p->shape;
  return out;
}

// ---- valid specs ------------------------------------------------------------------------

TEST(SpecLoader, TinySpecNamesFollowTheSequentialIndexRule) {
  std::string path = write_spec("tiny_ok", kTinySpec);
  auto m = load_model_spec(path);
  EXPECT_EQ(m->info.name, "tiny");
  EXPECT_EQ(m->info.source, path);
  EXPECT_EQ(m->info.input_shape, (Shape{2, 6, 6}));
  EXPECT_EQ(m->info.num_classes, 3);
  EXPECT_EQ(m->info.T, 2);
  EXPECT_EQ(m->info.loss, "mean_ce");
  EXPECT_EQ(m->info.input_kind, "events");
  ASSERT_EQ(m->units.size(), 2u);
  ASSERT_TRUE(m->loss);
  m->finalize(DType::F32, Device::cpu(), 7);
  // pool = head.0, flatten named (takes no index), dropout = head.1, linear = head.2
  std::map<std::string, Shape> want = {
      {"features.0.0.weight", {4, 2, 3, 3}}, {"features.0.0.bias", {4}},
      {"features.0.1.weight", {4}},          {"features.0.1.bias", {4}},
      {"head.2.weight", {3, 36}},            {"head.2.bias", {3}}};
  EXPECT_EQ(param_shapes(*m), want);
  std::vector<std::string> bufs;
  for (Buffer* b : m->buffers()) bufs.push_back(b->name);
  EXPECT_EQ(bufs, (std::vector<std::string>{"features.0.1.running_mean", "features.0.1.running_var",
                                            "features.0.1.num_batches_tracked"}));
  EXPECT_EQ(m->num_parameters(), 4 * 2 * 9 + 4 + 4 + 4 + 3 * 36 + 3);
  std::remove(path.c_str());
}

TEST(SpecLoader, DropoutZeroIsOmittedAndTakesNoIndex) {
  std::string path = write_spec("tiny_nodrop", kTinySpec);
  ModelOverrides ov;
  ov.dropout = 0.0;
  auto m = load_model_spec(path, ov);
  EXPECT_EQ(m->units[1]->size(), 3u);  // pool, flatten, linear
  m->finalize(DType::F32, Device::cpu(), 7);
  auto shapes = param_shapes(*m);
  EXPECT_TRUE(shapes.count("head.1.weight"));
  EXPECT_FALSE(shapes.count("head.2.weight"));

  ModelOverrides ov2;
  ov2.dropout = 0.3;
  auto m2 = load_model_spec(path, ov2);
  auto* d = dynamic_cast<Dropout*>(&m2->units[1]->at(2));
  ASSERT_NE(d, nullptr);
  EXPECT_DOUBLE_EQ(d->p(), 0.3);
  std::remove(path.c_str());
}

TEST(SpecLoader, VarsAndTOverrides) {
  std::string path = write_spec("tiny_vars", kTinySpec);
  ModelOverrides ov;
  ov.vars["C"] = 6;
  ov.T = 5;
  auto m = load_model_spec(path, ov);
  EXPECT_EQ(m->info.T, 5);
  m->finalize(DType::F64, Device::cpu(), 1);
  auto shapes = param_shapes(*m);
  EXPECT_EQ(shapes["features.0.0.weight"], (Shape{6, 2, 3, 3}));
  EXPECT_EQ(shapes["head.2.weight"], (Shape{3, 54}));  // "C*3*3"
  std::remove(path.c_str());
}

TEST(SpecLoader, ExpressionsNestedLayersAndPresetOverrides) {
  std::string text = with(kTinySpec, R"(  { type = "neuron", neuron = "lif" },)",
                          R"(  { type = "neuron", neuron = "lif", v_threshold = 0.5, v_reset = "none" },
  { type = "residual", name = "res", layers = [ { type = "conv2d", in_channels = "(C + 4) / 2", out_channels = "2*C - C", kernel_size = 3, padding = 1, bias = false }, { type = "if" } ] },)");
  std::string path = write_spec("tiny_nested", text);
  auto m = load_model_spec(path);
  m->finalize(DType::F32, Device::cpu(), 7);
  auto shapes = param_shapes(*m);
  EXPECT_EQ(shapes["features.0.res.0.weight"], (Shape{4, 4, 3, 3}));
  EXPECT_FALSE(shapes.count("features.0.res.0.bias"));
  auto* n = dynamic_cast<Neuron*>(&m->units[0]->at(2));
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->config().kind, NeuronKind::LIF);
  EXPECT_DOUBLE_EQ(n->config().tau, 2.0);          // from the preset
  EXPECT_EQ(n->config().surrogate, SurrogateKind::ATan);
  EXPECT_DOUBLE_EQ(n->config().alpha, 2.0);        // ATan's default alpha
  EXPECT_DOUBLE_EQ(n->config().v_threshold, 0.5);  // overridden
  EXPECT_FALSE(n->config().hard_reset);
  auto* res = dynamic_cast<Residual*>(&m->units[0]->at(3));
  ASSERT_NE(res, nullptr);
  auto* iff = dynamic_cast<Neuron*>(&res->at(1));
  ASSERT_NE(iff, nullptr);
  EXPECT_EQ(iff->config().kind, NeuronKind::IF);
  EXPECT_EQ(iff->config().surrogate, SurrogateKind::Sigmoid);  // docs/semantics.md §5 defaults
  EXPECT_DOUBLE_EQ(iff->config().alpha, 4.0);
  std::remove(path.c_str());
}

// ---- built-in models --------------------------------------------------------------------

TEST(SpecLoader, BuiltinNamesAndPaths) {
  auto names = builtin_model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cifar10dvs_vgg"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "fmnist_csnn"), names.end());
  std::string p = builtin_model_path("fmnist_csnn");
  EXPECT_NE(p.find("fmnist_csnn.toml"), std::string::npos);
  try {
    builtin_model_path("no_such_model");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(msg.find("no_such_model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cifar10dvs_vgg"), std::string::npos) << msg;  // lists the available ones
    EXPECT_NE(msg.find("fmnist_csnn"), std::string::npos) << msg;
  }
}

TEST(SpecLoader, Cifar10DvsVggMatchesSpec) {
  auto m = load_builtin_model("cifar10dvs_vgg");
  EXPECT_EQ(m->info.name, "cifar10dvs_vgg");
  EXPECT_EQ(m->info.input_shape, (Shape{2, 48, 48}));
  EXPECT_EQ(m->info.num_classes, 10);
  EXPECT_EQ(m->info.T, 10);
  EXPECT_EQ(m->info.loss, "mean_ce");
  EXPECT_EQ(m->info.input_kind, "events");
  ASSERT_EQ(m->units.size(), 10u);
  std::vector<std::string> unit_names;
  for (auto& u : m->units) unit_names.push_back(u->name());
  EXPECT_EQ(unit_names, (std::vector<std::string>{"features.0", "features.1", "features.2", "features.3", "features.4",
                                                  "features.5", "features.6", "features.7", "features.8",
                                                  "classifier"}));
  // Per-sample outputs of the units (docs/semantics.md §2 table).
  std::vector<Shape> want_out = {{64, 48, 48},  {128, 48, 48}, {256, 24, 24}, {256, 24, 24}, {512, 12, 12},
                                 {512, 12, 12}, {512, 6, 6},   {512, 6, 6},   {512, 3, 3},   {10}};
  EXPECT_EQ(m->unit_output_shapes(), want_out);

  m->finalize(DType::F32, Device::cpu(), 1);
  const int chans[9] = {2, 64, 128, 256, 256, 512, 512, 512, 512};
  const bool pool_first[8] = {false, false, true, false, true, false, true, false};
  std::map<std::string, Shape> want;
  int64_t count = 0;
  for (int i = 0; i < 8; ++i) {
    int64_t ci = chans[i], co = chans[i + 1];
    std::string p = "features." + std::to_string(i) + ".proj_bn.";
    int conv = pool_first[i] ? 1 : 0;
    want[p + std::to_string(conv) + ".weight"] = {co, ci, 3, 3};
    want[p + std::to_string(conv) + ".bias"] = {co};
    want[p + std::to_string(conv + 1) + ".weight"] = {co};
    want[p + std::to_string(conv + 1) + ".bias"] = {co};
    count += co * ci * 9 + co + 2 * co;
  }
  want["classifier.1.weight"] = {10, 4608};
  want["classifier.1.bias"] = {10};
  count += 4608 * 10 + 10;
  EXPECT_EQ(param_shapes(*m), want);
  // By hand: convs 2·64·9 + 64·128·9 + 128·256·9 + 256·256·9 + 256·512·9 + 3·512·512·9
  // = 9,217,152 weights + 2,752 biases (64+128+2·256+4·512), BN 2·2,752, linear 46,090.
  EXPECT_EQ(count, 9217152 + 2752 + 5504 + 46090);
  EXPECT_EQ(m->num_parameters(), count);
  EXPECT_EQ(m->buffers().size(), 8u * 3u);

  // Layer configurations: conv 3x3 pad 1 with bias, Kaiming fan_out; BN eps/momentum; LIF.
  auto* conv = dynamic_cast<Conv2d*>(&m->units[2]->at(1));
  ASSERT_NE(conv, nullptr);
  EXPECT_EQ(conv->config().kernel, 3);
  EXPECT_EQ(conv->config().padding, 1);
  EXPECT_EQ(conv->config().stride, 1);
  EXPECT_TRUE(conv->config().bias);
  EXPECT_EQ(conv->config().init, WeightInit::KaimingNormalFanOut);
  EXPECT_EQ(m->units[2]->at(0).type(), "avgpool2d");
  auto* bn = dynamic_cast<BatchNorm*>(&m->units[2]->at(2));
  ASSERT_NE(bn, nullptr);
  EXPECT_DOUBLE_EQ(bn->config().eps, 1e-5);
  EXPECT_DOUBLE_EQ(bn->config().momentum, 0.1);
  auto* lif = dynamic_cast<Neuron*>(&m->units[2]->at(3));
  ASSERT_NE(lif, nullptr);
  EXPECT_EQ(lif->name(), "features.2.neuron");
  EXPECT_EQ(lif->config().kind, NeuronKind::LIF);
  EXPECT_DOUBLE_EQ(lif->config().tau, 1.333);
  EXPECT_FALSE(lif->config().decay_input);
  EXPECT_TRUE(lif->config().detach_reset);
  EXPECT_TRUE(lif->config().hard_reset);
  EXPECT_DOUBLE_EQ(lif->config().v_reset, 0.0);
  EXPECT_DOUBLE_EQ(lif->config().v_threshold, 1.0);
  EXPECT_EQ(lif->config().surrogate, SurrogateKind::ATan);
  EXPECT_DOUBLE_EQ(lif->config().alpha, 2.0);
  auto* fc = dynamic_cast<Linear*>(&m->units[9]->at(2));
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->config().init, WeightInit::TorchDefault);
  auto* drop = dynamic_cast<Dropout*>(&m->units[9]->at(1));
  ASSERT_NE(drop, nullptr);
  EXPECT_DOUBLE_EQ(drop->p(), 0.25);
  EXPECT_EQ(m->units[8]->at(0).name(), "features.8");  // the final pool is features.8 itself

  // Kaiming normal fan_out: std sqrt(2 / (Cout·9)); biases zero.
  Param* w = m->params()[0];  // features.0.proj_bn.0.weight [64, 2, 3, 3]
  double s2 = 0;
  for (int64_t i = 0; i < w->value.numel(); ++i) s2 += w->value.at(i) * w->value.at(i);
  double sd = std::sqrt(s2 / static_cast<double>(w->value.numel()));
  EXPECT_NEAR(sd, std::sqrt(2.0 / (64 * 9)), 0.1 * std::sqrt(2.0 / (64 * 9)));
  EXPECT_EQ(m->params()[1]->value.at(0), 0.0);
}

TEST(SpecLoader, Cifar10DvsVggWithoutDropoutRenumbersClassifier) {
  ModelOverrides ov;
  ov.dropout = 0.0;
  auto m = load_builtin_model("cifar10dvs_vgg", ov);
  EXPECT_EQ(m->units[9]->size(), 2u);  // flatten, linear
  m->finalize(DType::F32, Device::cpu(), 1);
  auto shapes = param_shapes(*m);
  EXPECT_EQ(shapes["classifier.0.weight"], (Shape{10, 4608}));
  EXPECT_FALSE(shapes.count("classifier.1.weight"));
}

TEST(SpecLoader, FmnistCsnnMatchesSpikingJelly) {
  auto m = load_builtin_model("fmnist_csnn");
  EXPECT_EQ(m->info.input_shape, (Shape{1, 28, 28}));
  EXPECT_EQ(m->info.T, 4);
  EXPECT_EQ(m->info.loss, "rate_mse");
  EXPECT_EQ(m->info.input_kind, "static");
  ASSERT_EQ(m->units.size(), 3u);
  EXPECT_EQ(m->unit_output_shapes(), (std::vector<Shape>{{128, 14, 14}, {128, 7, 7}, {10}}));
  m->finalize(DType::F32, Device::cpu(), 1);
  const int64_t C = 128;
  std::map<std::string, Shape> want = {
      {"conv_fc.0.weight", {C, 1, 3, 3}},        {"conv_fc.1.weight", {C}}, {"conv_fc.1.bias", {C}},
      {"conv_fc.4.weight", {C, C, 3, 3}},        {"conv_fc.5.weight", {C}}, {"conv_fc.5.bias", {C}},
      {"conv_fc.9.weight", {C * 4 * 4, C * 7 * 7}}, {"conv_fc.11.weight", {10, C * 4 * 4}}};
  EXPECT_EQ(param_shapes(*m), want);
  // 1152 + 256 + 147456 + 256 + 6272·2048 + 2048·10
  EXPECT_EQ(m->num_parameters(), 1152 + 256 + 147456 + 256 + 12845056 + 20480);
  std::vector<std::string> neurons;
  for (auto& u : m->units)
    for (Layer* l : u->children())
      if (auto* n = dynamic_cast<Neuron*>(l)) {
        neurons.push_back(n->name());
        EXPECT_EQ(n->config().kind, NeuronKind::IF);
        EXPECT_EQ(n->config().surrogate, SurrogateKind::ATan);
        EXPECT_DOUBLE_EQ(n->config().alpha, 2.0);
        EXPECT_FALSE(n->config().detach_reset);
        EXPECT_TRUE(n->config().hard_reset);
      }
  EXPECT_EQ(neurons, (std::vector<std::string>{"conv_fc.2", "conv_fc.6", "conv_fc.10", "conv_fc.12"}));
}

TEST(SpecLoader, FmnistCsnnWidthOverride) {
  ModelOverrides ov;
  ov.vars["C"] = 8;
  auto m = load_builtin_model("fmnist_csnn", ov);
  EXPECT_EQ(m->num_parameters(), 8 * 9 + 16 + 8 * 8 * 9 + 16 + (8 * 49) * (8 * 16) + 8 * 16 * 10);
}

// ---- mistakes ---------------------------------------------------------------------------

TEST(SpecLoaderErrors, TomlSyntaxErrorGivesLine) {
  expect_spec_error("syntax", with(kTinySpec, "T = 2", "T = = 2"), {":5:", "TOML syntax error"});
}

TEST(SpecLoaderErrors, MissingFile) {
  try {
    load_model_spec("/nonexistent/dir/spec.toml");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/spec.toml"), std::string::npos);
  }
}

TEST(SpecLoaderErrors, UnknownLayerTypeListsValidOnes) {
  expect_spec_error("type", with(kTinySpec, R"(type = "batchnorm2d")", R"(type = "batchnorm3d")"),
                    {"unit 0 'features.0'", "features.0.1", "batchnorm3d", "conv2d", "linear", ":21"});
}

TEST(SpecLoaderErrors, MissingRequiredField) {
  expect_spec_error("missing", with(kTinySpec, R"(, out_channels = "C")", ""),
                    {"features.0.0", "conv2d", "out_channels", "missing"});
  expect_spec_error("missing_model", with(kTinySpec, "num_classes = 3\n", ""), {"[model]", "num_classes"});
  expect_spec_error("missing_type", with(kTinySpec, R"(type = "flatten", )", ""), {"'type'", "head"});
}

TEST(SpecLoaderErrors, ShapesThatDoNotChain) {
  // Conv expects 3 input channels but the model input has 2.
  expect_spec_error("chain_conv", with(kTinySpec, "in_channels = 2", "in_channels = 3"),
                    {"features.0.0", "conv2d", "3 input channels", ":20"});
  // Linear in_features wrong.
  expect_spec_error("chain_linear", with(kTinySpec, R"("C*3*3")", R"("C*3*4")"), {"head.2", "linear", "48"});
  // Output is not [num_classes].
  expect_spec_error("chain_out", with(kTinySpec, "out_features = 3", "out_features = 5"),
                    {"unit 1 'head'", "[5]", "num_classes"});
  // A residual body must keep the shape.
  expect_spec_error("chain_res",
                    with(kTinySpec, R"(  { type = "neuron", neuron = "lif" },)",
                         R"(  { type = "residual", layers = [ { type = "conv2d", in_channels = "C", out_channels = 8, kernel_size = 1 } ] },)"),
                    {"features.0.2", "residual", "keep the shape"});
}

TEST(SpecLoaderErrors, NonPositiveSizes) {
  expect_spec_error("zero", with(kTinySpec, R"(out_channels = "C")", "out_channels = 0"),
                    {"features.0.0", "out_channels", "positive"});
  expect_spec_error("neg_kernel", with(kTinySpec, "kernel_size = 3", "kernel_size = -3"),
                    {"features.0.0", "kernel_size", "positive"});
  expect_spec_error("zero_var", kTinySpec, {"features.0.0", "out_channels", "positive"}, [] {
    ModelOverrides ov;
    ov.vars["C"] = 0;
    return ov;
  }());
  expect_spec_error("neg_input", with(kTinySpec, "input = [2, 6, 6]", "input = [2, -6, 6]"), {"[model]", "input"});
}

TEST(SpecLoaderErrors, UnknownSurrogate) {
  expect_spec_error("surrogate", with(kTinySpec, R"(surrogate = "atan")", R"(surrogate = "relu")"),
                    {"[neurons.lif]", "surrogate", "relu", "sigmoid", ":15"});
}

TEST(SpecLoaderErrors, NonPositiveTau) {
  expect_spec_error("tau", with(kTinySpec, "tau = 2.0", "tau = 0.0"), {"[neurons.lif]", "tau"});
  expect_spec_error("tau_inline", with(kTinySpec, R"({ type = "neuron", neuron = "lif" })", R"({ type = "lif", tau = -1 })"),
                    {"features.0.2", "lif", "tau"});
}

TEST(SpecLoaderErrors, UnknownNeuronPreset) {
  expect_spec_error("preset", with(kTinySpec, R"(neuron = "lif")", R"(neuron = "vgg_lif")"),
                    {"features.0.2", "vgg_lif", "defined: lif"});
}

TEST(SpecLoaderErrors, UnknownVarInExpression) {
  expect_spec_error("var", with(kTinySpec, R"("C*3*3")", R"("D*3*3")"), {"head.2", "in_features", "unknown var 'D'", "C"});
  expect_spec_error("expr", with(kTinySpec, R"("C*3*3")", R"("C*(3")"), {"head.2", "in_features", "')'"});
  expect_spec_error("inexact", with(kTinySpec, R"("C*3*3")", R"("C*3*3/5")"), {"head.2", "not an integer"});
  ModelOverrides ov;
  ov.vars["WIDTH"] = 3;
  expect_spec_error("override", kTinySpec, {"WIDTH", "C"}, ov);
}

TEST(SpecLoaderErrors, UnknownKeysCatchTypos) {
  // A typo of a required key: the message says which key was probably meant.
  expect_spec_error("typo", with(kTinySpec, "kernel_size = 3", "kernal_size = 3"),
                    {"features.0.0", "'kernel_size'", "'kernal_size'"});
  expect_spec_error("typo2", with(kTinySpec, "padding = 1", "padding = 1, stide = 2"),
                    {"features.0.0", "'stide'", "stride"});
  expect_spec_error("typo_model", with(kTinySpec, "T = 2", "T = 2\nepochs = 3"), {"[model]", "epochs"});
  expect_spec_error("typo_top", std::string(kTinySpec) + "\n[trainer]\nlr = 1\n", {"trainer"});
  expect_spec_error("typo_unit", with(kTinySpec, "name = \"head\"", "name = \"head\"\nlayer = []"), {"unit 1 'head'", "'layer'"});
  expect_spec_error("if_tau", with(kTinySpec, R"({ type = "neuron", neuron = "lif" })", R"({ type = "if", tau = 2.0 })"),
                    {"features.0.2", "'tau'"});
}

TEST(SpecLoaderErrors, BadEnumsAndDuplicates) {
  expect_spec_error("loss", with(kTinySpec, R"(loss = "mean_ce")", R"(loss = "ce")"), {"[model]", "loss", "ce"});
  expect_spec_error("kind", with(kTinySpec, R"(input_kind = "events")", R"(input_kind = "video")"), {"input_kind"});
  expect_spec_error("dropout", with(kTinySpec, "p = 0.5", "p = 1.5"), {"head.1", "dropout", "'p'"});
  expect_spec_error("init", with(kTinySpec, "padding = 1 }", R"(padding = 1, init = "xavier" })"), {"features.0.0", "xavier"});
  expect_spec_error("dup", with(kTinySpec, R"({ type = "batchnorm2d", num_features = "C" })", R"({ type = "batchnorm2d", name = "0", num_features = "C" })"),
                    {"features.0.0", "batchnorm2d", "already used"});
  expect_spec_error("no_units", std::string(kTinySpec).substr(0, std::string(kTinySpec).find("[[unit]]")), {"[[unit]]"});
}

}  // namespace
}  // namespace sm

namespace sm {
// Every number of a spec must be finite (NaN/Inf would train silently into NaN): the generic
// number reader and the neuron's reset value refuse them, naming the file and the key.
TEST(SpecLoaderErrors, NonFiniteNumbersNameTheKey) {
  expect_spec_error("tau_inf", with(kTinySpec, "tau = 2.0", "tau = inf"), {"tau"});
  expect_spec_error("reset_ninf", with(kTinySpec, "tau = 2.0", "tau = 2.0\nv_reset = -inf"), {"v_reset", "finite"});
  expect_spec_error("thr_nan", with(kTinySpec, "tau = 2.0", "tau = 2.0\nv_threshold = nan"), {"v_threshold"});
  expect_spec_error("dropout_nan", with(kTinySpec, "p = 0.5", "p = nan"), {"p"});
  expect_spec_error("bn_eps_inf", with(kTinySpec, R"(num_features = "C" })", R"(num_features = "C", eps = inf })"),
                    {"eps", "finite"});
}
}  // namespace sm
