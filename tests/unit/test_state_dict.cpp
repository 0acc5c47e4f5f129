// test_state_dict.cpp — the HDF5 wrapper (io/h5file.h) and state-dict save/load
// (models/state_dict.h): dtype/shape round trips, attributes, layout of the file, and errors
// that name the file and the entry (missing file, not HDF5, missing/wrong-shaped entries).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>

#include "spikemesh/io/h5file.h"
#include "spikemesh/models/state_dict.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {
namespace {

std::string tmp(const std::string& tag, const std::string& ext) {
  return ::testing::TempDir() + "sm_sd_" + std::to_string(getpid()) + "_" + tag + ext;
}

const char* kSpec = R"([model]
name = "tiny"
input = [2, 6, 6]
num_classes = 3
T = 2
loss = "mean_ce"
input_kind = "events"

[vars]
C = 4

[[unit]]
name = "features.0"
layers = [
  { type = "conv2d", in_channels = 2, out_channels = "C", kernel_size = 3, padding = 1 },
  { type = "batchnorm2d", num_features = "C" },
  { type = "lif", surrogate = "atan" },
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

std::unique_ptr<Model> tiny_model(DType dt, uint64_t seed, const ModelOverrides& ov = {},
                                  const std::string& text = kSpec) {
  std::string path = tmp("spec_" + std::to_string(seed), ".toml");
  std::ofstream(path) << text;
  auto m = load_model_spec(path, ov);
  std::remove(path.c_str());
  m->finalize(dt, Device::cpu(), seed);
  return m;
}

void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Input) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "no '" << n << "' in: " << msg;
  }
}

// ---- H5 wrapper ---------------------------------------------------------------------------

TEST(H5File, DatasetsOfEveryDtypeRoundTrip) {
  std::string path = tmp("dtypes", ".h5");
  {
    H5File f = H5File::create(path);
    Tensor a = Tensor::empty({2, 3}, DType::F32);
    for (int i = 0; i < 6; ++i) a.data<float>()[i] = 0.5f * i - 1;
    Tensor b = Tensor::empty({4}, DType::F64);
    for (int i = 0; i < 4; ++i) b.data<double>()[i] = 1.0 / (i + 3);
    Tensor c = Tensor::full({}, 123456789012LL, DType::I64);
    Tensor d = Tensor::empty({5}, DType::U8);
    for (int i = 0; i < 5; ++i) d.data<uint8_t>()[i] = static_cast<uint8_t>(250 + i);
    f.write("a", a);
    f.write("g/h/b", b);  // intermediate groups are created
    f.root().require_group("g").write("c", c);
    f.write("d", d);
    f.write("a", b);  // replacing changes shape and type
    f.write("a2", a);
    f.set_attr("name", "tiny model");
    f.set_attr("version", 3);
    f.set_attr("lr", 0.125);
    f.set_attr_on("d", "unit", std::string("counts"));
  }
  H5File f = H5File::open(path);
  EXPECT_EQ(f.list_datasets(), (std::vector<std::string>{"a", "a2", "d"}));
  EXPECT_EQ(f.list_groups(), (std::vector<std::string>{"g"}));
  EXPECT_TRUE(f.has_dataset("g/h/b"));
  EXPECT_TRUE(f.has_group("g/h"));
  EXPECT_FALSE(f.has_dataset("g/h"));
  EXPECT_FALSE(f.exists("g/x/y"));
  EXPECT_EQ(f.dataset_shape("a"), (Shape{4}));
  EXPECT_EQ(f.dataset_dtype("a"), DType::F64);
  Tensor a2 = f.read("a2");
  EXPECT_EQ(a2.dtype(), DType::F32);
  ASSERT_EQ(a2.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a2.at(i), 0.5 * i - 1);
  Tensor b = f.open_group("g").open_group("h").read("b");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.at(i), 1.0 / (i + 3));
  Tensor b32 = f.read("/g/h/b", DType::F32);  // converting read, absolute path
  EXPECT_EQ(b32.dtype(), DType::F32);
  EXPECT_FLOAT_EQ(static_cast<float>(b32.at(1)), 0.25f);
  Tensor c = f.open_group("g").read("c");
  EXPECT_EQ(c.dtype(), DType::I64);
  EXPECT_TRUE(c.shape().empty());
  EXPECT_EQ(c.data<int64_t>()[0], 123456789012LL);
  Tensor d = f.read("d");
  EXPECT_EQ(d.dtype(), DType::U8);
  EXPECT_EQ(d.data<uint8_t>()[4], 254);
  EXPECT_EQ(f.attr_string("name"), "tiny model");
  EXPECT_EQ(f.attr_int("version"), 3);
  EXPECT_EQ(f.attr_double("lr"), 0.125);
  EXPECT_EQ(f.attr_double("version"), 3.0);
  EXPECT_TRUE(f.has_attr("lr"));
  EXPECT_FALSE(f.has_attr("nope"));
  std::remove(path.c_str());
}

TEST(H5File, ErrorsNameTheFileAndObject) {
  expect_input_error([] { H5File::open("/nonexistent/x.h5"); }, {"/nonexistent/x.h5"});
  std::string text = tmp("text", ".h5");
  std::ofstream(text) << "not hdf5\n";
  expect_input_error([&] { H5File::open(text); }, {text, "not an HDF5 file"});
  std::remove(text.c_str());

  std::string path = tmp("errs", ".h5");
  H5File::create(path).write("x", Tensor::zeros({2, 2}, DType::F32));
  H5File f = H5File::open(path);
  expect_input_error([&] { f.read("params/y"); }, {path, "params/y", "no such dataset"});
  expect_input_error([&] { f.open_group("params"); }, {path, "params"});
  expect_input_error([&] {
    Tensor t = Tensor::zeros({3}, DType::F32);
    f.read_into("x", t);
  }, {path, "x", "[2, 2]", "[3]"});
  expect_input_error([&] { f.attr_string("missing"); }, {path, "missing"});
  try {  // writing to a read-only file is a library error that still names file and dataset
    f.write("z", Tensor::zeros({1}, DType::F32));
    ADD_FAILURE();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("z"), std::string::npos) << msg;
  }
  std::remove(path.c_str());
}

// ---- state dict ---------------------------------------------------------------------------

TEST(StateDict, SaveLayoutAndRoundTrip) {
  auto m = tiny_model(DType::F64, 5);
  // Give buffers non-default values so that the round trip covers them.
  for (Buffer* b : m->buffers()) b->value.fill(b->integer ? 7 : 0.375);
  std::string path = tmp("rt", ".h5");
  save_state_dict(path, *m);
  {
    H5File f = H5File::open(path);
    EXPECT_EQ(f.attr_string("model"), "tiny");
    EXPECT_EQ(f.attr_int("format_version"), kStateDictFormatVersion);
    EXPECT_EQ(f.attr_string("dtype"), "f64");
    EXPECT_EQ(f.open_group("params").list_datasets(),
              (std::vector<std::string>{"features.0.0.bias", "features.0.0.weight", "features.0.1.bias",
                                        "features.0.1.weight", "head.2.bias", "head.2.weight"}));
    EXPECT_EQ(f.dataset_shape("params/features.0.0.weight"), (Shape{4, 2, 3, 3}));
    EXPECT_EQ(f.dataset_dtype("params/head.2.weight"), DType::F64);
    EXPECT_EQ(f.dataset_dtype("buffers/features.0.1.num_batches_tracked"), DType::I64);
    EXPECT_TRUE(f.dataset_shape("buffers/features.0.1.num_batches_tracked").empty());
    EXPECT_EQ(f.dataset_dtype("buffers/features.0.1.running_var"), DType::F64);
  }
  std::vector<std::vector<double>> saved;
  for (Param* p : m->params()) {
    saved.emplace_back();
    for (int64_t i = 0; i < p->value.numel(); ++i) saved.back().push_back(p->value.at(i));
    p->value.fill(-9.0);
  }
  for (Buffer* b : m->buffers()) b->value.fill(0);
  load_state_dict(path, *m);
  auto ps = m->params();
  for (size_t k = 0; k < ps.size(); ++k)
    for (int64_t i = 0; i < ps[k]->value.numel(); ++i) ASSERT_EQ(ps[k]->value.at(i), saved[k][i]) << ps[k]->name;
  for (Buffer* b : m->buffers())
    for (int64_t i = 0; i < b->value.numel(); ++i) EXPECT_EQ(b->value.at(i), b->integer ? 7.0 : 0.375) << b->name;
  std::remove(path.c_str());
}

TEST(StateDict, F32FileLoadsIntoF64ModelAndSubgroups) {
  auto a = tiny_model(DType::F32, 1);
  auto b = tiny_model(DType::F64, 2);
  std::string path = tmp("conv", ".h5");
  {
    H5File f = H5File::create(path);
    save_state_dict(f.require_group("ckpt/model"), *a);
  }
  H5File f = H5File::open(path);
  load_state_dict(f.open_group("ckpt/model"), *b);
  auto pa = a->params(), pb = b->params();
  for (size_t k = 0; k < pa.size(); ++k)
    for (int64_t i = 0; i < pa[k]->value.numel(); ++i) ASSERT_EQ(pa[k]->value.at(i), pb[k]->value.at(i));
  std::remove(path.c_str());
}

TEST(StateDict, WrongShapeNamesFileAndEntryAndLeavesModelUntouched) {
  auto small = tiny_model(DType::F32, 1);
  ModelOverrides ov;
  ov.vars["C"] = 6;
  auto wide = tiny_model(DType::F32, 2, ov);
  std::string path = tmp("shape", ".h5");
  save_state_dict(path, *small);
  double before = wide->params()[0]->value.at(0);
  expect_input_error([&] { load_state_dict(path, *wide); },
                     {path, "features.0.0.weight", "[4, 2, 3, 3]", "[6, 2, 3, 3]"});
  EXPECT_EQ(wide->params()[0]->value.at(0), before);
  std::remove(path.c_str());
}

TEST(StateDict, MissingAndUnexpectedEntries) {
  ModelOverrides no_drop;
  no_drop.dropout = 0.0;
  auto without = tiny_model(DType::F32, 1, no_drop);  // linear is head.1
  auto with = tiny_model(DType::F32, 1);              // linear is head.2
  std::string path = tmp("missing", ".h5");
  save_state_dict(path, *without);
  expect_input_error([&] { load_state_dict(path, *with); }, {path, "head.2.weight", "missing"});

  // A model without the BN: the file's BN entries are unexpected (strict) or ignored.
  std::string spec(kSpec);
  std::string bn = "  { type = \"batchnorm2d\", num_features = \"C\" },\n";
  spec.erase(spec.find(bn), bn.size());
  auto no_bn = tiny_model(DType::F32, 3, {}, spec);  // conv features.0.0, lif features.0.1
  std::string path2 = tmp("extra", ".h5");
  save_state_dict(path2, *with);
  expect_input_error([&] { load_state_dict(path2, *no_bn); }, {path2, "features.0.1.weight"});
  load_state_dict(path2, *no_bn, /*strict=*/false);
  EXPECT_EQ(no_bn->params()[0]->value.at(0), with->params()[0]->value.at(0));
  std::remove(path.c_str());
  std::remove(path2.c_str());
}

}  // namespace
}  // namespace sm
