// test_state_dict_io.cpp — state dicts in and out (io/safetensors.h, train/state_dict_io.h,
// train/nir_export.h): safetensors round trips in every dtype with metadata, and each kind of
// damaged file refused with a message naming it; a state dict checked against a model (every
// missing, unexpected, misshapen and wrongly typed tensor named in one message, NaN refused,
// wrapper prefixes dropped, dtypes converted); an import's step-0 checkpoint holding exactly the
// file's values (and nothing written when it fails); the NIR graph's batch-norm folding against
// a naive double computation, its neuron parameters, and the inexpressible layers named.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/io/safetensors.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/train/checkpoint_tools.h"
#include "spikemesh/train/nir_export.h"
#include "spikemesh/train/state_dict_io.h"

namespace sm {
namespace {

struct Dir {
  std::string path = ::testing::TempDir() + "sm_statedict_" + std::to_string(getpid());
  Dir() { std::filesystem::create_directories(path); }
  ~Dir() { std::filesystem::remove_all(path); }
};

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void put(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A safetensors image from a header text and a data section.
std::string image(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return s + header + data;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] {
    parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "f.safetensors");
  });
}

std::unique_ptr<Model> model_of(const std::string& name, DType dt, std::vector<std::string> vars = {"C=4"}) {
  ModelSelection sel;
  sel.model = name;
  sel.vars = std::move(vars);
  std::unique_ptr<Model> m = sel.build();
  m->finalize(dt, Device::cpu(), 7);
  return m;
}

// The model's own state dict, every float tensor given distinct values.
NamedTensors state_of(Model& m) {
  NamedTensors t;
  double v = 0.25;
  for (Param* p : m.params()) {
    Tensor x = p->value.clone();
    for (int64_t i = 0; i < x.numel(); ++i, v += 0.001) x.data<double>()[i] = std::sin(v);
    t.emplace_back(p->name, x);
  }
  for (Buffer* b : m.buffers()) {
    Tensor x = b->value.clone();
    if (!b->integer)
      for (int64_t i = 0; i < x.numel(); ++i, v += 0.001) x.data<double>()[i] = 1.5 + std::cos(v);
    else
      x.data<int64_t>()[0] = 9;
    t.emplace_back(b->name, x);
  }
  return t;
}

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  Dir d;
  NamedTensors t;
  t.emplace_back("f64", Tensor::full({2, 3}, 0.1, DType::F64));
  t.emplace_back("f32", Tensor::full({4}, -2.5, DType::F32));
  t.emplace_back("bf16", Tensor::full({3}, 1.0, DType::BF16));
  t.emplace_back("f16", Tensor::full({1, 1}, 0.5, DType::F16));
  t.emplace_back("i64.scalar", Tensor::full({}, 42, DType::I64));
  t.emplace_back("i32", Tensor::full({2}, -7, DType::I32));
  t.emplace_back("u8", Tensor::full({5}, 200, DType::U8));
  t.emplace_back("empty", Tensor::zeros({0, 3}, DType::F32));
  const std::string p = d.path + "/a.safetensors";
  write_safetensors(p, t, {{"format", "pt"}, {"model", "x"}});
  const std::string b = bytes_of(p);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  std::map<std::string, std::string> meta;
  const NamedTensors back = read_safetensors(p, &meta);
  EXPECT_EQ(meta.at("model"), "x");
  ASSERT_EQ(back.size(), t.size());
  for (size_t i = 0; i < t.size(); ++i) {  // in offset order = written order
    EXPECT_EQ(back[i].first, t[i].first);
    EXPECT_EQ(back[i].second.dtype(), t[i].second.dtype());
    EXPECT_EQ(back[i].second.shape(), t[i].second.shape());
    EXPECT_EQ(std::memcmp(back[i].second.raw(), t[i].second.raw(), t[i].second.nbytes()), 0) << t[i].first;
  }
  EXPECT_FALSE(std::filesystem::exists(p + ".tmp"));
}

TEST(Safetensors, DamagedFilesAreNamed) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(parse_error(image(ok, std::string(8, '\0'))), "");
  EXPECT_NE(parse_error("abc").find("shorter than its 8-byte header length"), std::string::npos);
  std::string past = image(ok, std::string(8, '\0'));
  past[0] = static_cast<char>(past[0] + 40);
  EXPECT_NE(parse_error(past).find("runs past the end of the file"), std::string::npos);
  EXPECT_NE(parse_error(image(ok, std::string(6, '\0'))).find("lie outside the data section"), std::string::npos);
  EXPECT_NE(parse_error(image(ok + std::string(8, '\0'), "")).find("NUL byte"), std::string::npos);
  EXPECT_NE(parse_error(image(ok, std::string(12, '\0'))).find("the tensors cover 8"), std::string::npos);
  const std::string overlap =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  EXPECT_NE(parse_error(image(overlap, std::string(12, '\0'))).find("'a' and 'b' overlap"), std::string::npos);
  const std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NE(parse_error(image(gap, std::string(8, '\0'))).find("belong to no tensor"), std::string::npos);
  const std::string size = R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NE(parse_error(image(size, std::string(8, '\0'))).find("needs 2 x 8 bytes"), std::string::npos);
  const std::string dtype = R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})";
  EXPECT_NE(parse_error(image(dtype, std::string(8, '\0'))).find("F8_E4M3"), std::string::npos);
  EXPECT_NE(parse_error(image("{\"a\":", "")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(parse_error(image("[1,2]   ", "")).find("not a JSON object"), std::string::npos);
  const std::string neg = R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})";
  EXPECT_NE(parse_error(image(neg, "")).find("non-negative integers"), std::string::npos);
  const std::string huge = R"({"a":{"dtype":"U8","shape":[4611686018427387904,2,0],"data_offsets":[0,0]}})";
  EXPECT_NE(parse_error(image(huge, "")).find("is too large"), std::string::npos);
  const std::string rank7 = R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1],"data_offsets":[0,1]}})";
  EXPECT_NE(parse_error(image(rank7, std::string(1, '\0'))).find("more than 6 dimensions"), std::string::npos);
  const std::string meta = R"({"__metadata__":{"k":1}})";
  EXPECT_NE(parse_error(image(meta, "")).find("__metadata__ value of 'k'"), std::string::npos);
}

TEST(StateDictImport, EveryMismatchIsNamedInOneMessage) {
  auto m = model_of("fmnist_csnn", DType::F64);
  NamedTensors good = state_of(*m);
  NamedTensors bad = good;
  bad.erase(bad.begin());                                              // conv_fc.0.weight missing
  bad.emplace_back("head.weight", Tensor::zeros({2}, DType::F32));    // not in the model
  bad[0].second = Tensor::zeros({3}, DType::F64);                      // misshapen (conv_fc.1.weight)
  for (auto& e : bad)
    if (e.first == "conv_fc.1.running_mean") e.second = Tensor::zeros({4}, DType::I32);  // wrong dtype
  std::vector<std::string> notes;
  const std::string msg = error_of([&] { load_state_dict(*m, bad, "x.safetensors", notes); });
  for (const char* s : {"x.safetensors: does not fit model fmnist_csnn", "missing conv_fc.0.weight",
                        "not in the model head.weight", "conv_fc.1.weight is [3] in the file, [4] in the model",
                        "conv_fc.1.running_mean is i32"})
    EXPECT_NE(msg.find(s), std::string::npos) << s << " in: " << msg;
  // nothing was copied: the model keeps its initial values
  EXPECT_NE(m->params()[1]->value.at(0), good[1].second.at(0));

  auto vgg = model_of("cifar10dvs_vgg", DType::F32, {});
  EXPECT_NE(error_of([&] { load_state_dict(*vgg, good, "csnn.safetensors", notes); }).find("no name matches"),
            std::string::npos);

  NamedTensors nan = good;
  nan[2].second.data<double>()[1] = std::nan("");
  EXPECT_NE(error_of([&] { load_state_dict(*m, nan, "n.safetensors", notes); }).find("holds nan at element 1"),
            std::string::npos);
}

TEST(StateDictImport, PrefixesDroppedDtypesConvertedValuesExact) {
  auto m = model_of("fmnist_csnn", DType::F32);
  auto ref = model_of("fmnist_csnn", DType::F64);
  NamedTensors file = state_of(*ref);  // f64 values into an f32 model: rounded, noted
  for (auto& e : file) e.first = "module." + e.first;
  std::vector<std::string> notes;
  load_state_dict(*m, file, "ddp.safetensors", notes);
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("'module.'"), std::string::npos);
  bool rounded = false;
  for (const std::string& n : notes) rounded = rounded || n.find("f64 rounded to f32") != std::string::npos;
  EXPECT_TRUE(rounded);
  const std::vector<Param*> ps = m->params();
  for (size_t i = 0; i < ps.size(); ++i)
    for (int64_t j = 0; j < ps[i]->value.numel(); ++j)
      ASSERT_EQ(ps[i]->value.data<float>()[j], static_cast<float>(file[i].second.data<double>()[j])) << ps[i]->name;
  for (Buffer* b : m->buffers())
    if (b->integer) EXPECT_EQ(b->value.data<int64_t>()[0], 9) << b->name;
}

TEST(StateDictImport, StepZeroCheckpointHoldsTheFileNothingWrittenOnError) {
  Dir d;
  auto ref = model_of("fmnist_csnn", DType::F64);
  NamedTensors file = state_of(*ref);
  const std::string in = d.path + "/sd.safetensors", out = d.path + "/init.h5";
  write_safetensors(in, file, {});
  TrainConfig cfg;
  cfg.model = "fmnist_csnn";
  cfg.vars = {"C=4"};
  cfg.precision = "fp64";
  const std::string toml = "model = \"fmnist_csnn\"\nvar = [\"C=4\"]\nprecision = \"fp64\"\n";
  const ImportSummary s = import_state_dict(in, out, cfg, toml);
  EXPECT_EQ(s.kind, "safetensors");
  EXPECT_EQ(s.tensors, static_cast<int64_t>(file.size()));
  CheckpointModel cm = load_checkpoint_model(out);
  EXPECT_EQ(cm.info.state.step, 0);
  const std::vector<Param*> ps = cm.model->params();
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(std::memcmp(ps[i]->value.raw(), file[i].second.raw(), file[i].second.nbytes()), 0) << ps[i]->name;
  EXPECT_FALSE(std::filesystem::exists(out + ".import.d"));

  // an import of the checkpoint itself (kind "checkpoint") gives the same values
  const std::string again = d.path + "/again.h5";
  EXPECT_EQ(import_state_dict(out, again, cfg, toml).kind, "checkpoint");

  const std::string bad_out = d.path + "/bad.h5";
  cfg.vars = {"C=8"};
  EXPECT_NE(error_of([&] { import_state_dict(in, bad_out, cfg, toml); }).find("is [4, 1, 3, 3] in the file"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(bad_out));
  EXPECT_NE(error_of([&] { import_state_dict(in, in, cfg, toml); }).find("is the input file itself"), std::string::npos);
  put(d.path + "/torch.pt", std::string("PK\x03\x04rest", 8));
  EXPECT_NE(error_of([&] { import_state_dict(d.path + "/torch.pt", bad_out, cfg, toml); })
                .find("scripts/torch_to_safetensors.py"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(bad_out));
}

TEST(NirExport, BatchNormFoldedNeuronsMappedAsSpikingJelly) {
  Dir d;
  auto m = model_of("fmnist_csnn_avgpool", DType::F64);
  NamedTensors sd = state_of(*m);
  std::vector<std::string> notes;
  load_state_dict(*m, sd, "sd", notes);
  const std::string out = d.path + "/m.nir";
  const NirExportInfo info = write_nir_graph(*m, out, 1e-3, "src.h5");
  EXPECT_EQ(info.folded_bn, 2);
  EXPECT_EQ(info.nodes, 13);  // input, conv, IF, pool ×2, flatten, linear, IF ×2, output
  H5File f = H5File::open(out);
  auto find = [&](const std::string& n) {
    for (auto& e : sd)
      if (e.first == n) return e.second;
    return Tensor();
  };
  const Tensor w = find("conv_fc.4.weight"), g = find("conv_fc.5.weight"), b = find("conv_fc.5.bias");
  const Tensor mu = find("conv_fc.5.running_mean"), var = find("conv_fc.5.running_var");
  H5Group node = f.open_group("/node/nodes/conv_fc_4");
  const Tensor fw = node.read("weight"), fb = node.read("bias");
  const int64_t per = w.numel() / w.dim(0);
  for (int64_t c = 0; c < w.dim(0); ++c) {  // naive double fold, eps 1e-5
    const double s = g.at(c) / std::sqrt(var.at(c) + 1e-5);
    EXPECT_NEAR(fb.at(c), (0.0 - mu.at(c)) * s + b.at(c), 1e-15);
    for (int64_t j = 0; j < per; ++j) EXPECT_NEAR(fw.at(c * per + j), w.at(c * per + j) * s, 1e-15);
  }
  H5Group neuron = f.open_group("/node/nodes/conv_fc_2");  // IF on [C, 28, 28]
  EXPECT_EQ(neuron.dataset_shape("r"), (Shape{4, 28, 28}));
  EXPECT_DOUBLE_EQ(neuron.read("r").at(0), 1000.0);
  EXPECT_DOUBLE_EQ(neuron.read("v_threshold").at(5), 1.0);
  EXPECT_TRUE(f.open_group("/node/nodes").has_group("conv_fc_9"));
  EXPECT_FALSE(f.open_group("/node/nodes").has_dataset("conv_fc_9/bias")) << "no bias, no BN: a NIR Linear";
  EXPECT_EQ(f.open_group("/node").dataset_shape("edges"), (Shape{12, 2}));
}

TEST(NirExport, InexpressibleLayersAreNamed) {
  Dir d;
  auto csnn = model_of("fmnist_csnn", DType::F32);
  const std::string msg = error_of([&] { write_nir_graph(*csnn, d.path + "/c.nir", 1e-4, "x"); });
  EXPECT_NE(msg.find("layer conv_fc.3 (maxpool2d)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("avgpool2d"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(d.path + "/c.nir"));
  EXPECT_FALSE(std::filesystem::exists(d.path + "/c.nir.tmp"));
  auto sf = model_of("spikformer_cifar", DType::F32, {});
  const std::string sfm = error_of([&] { write_nir_graph(*sf, d.path + "/s.nir", 1e-4, "x"); });
  EXPECT_NE(sfm.find("cannot be exported to NIR"), std::string::npos) << sfm;
  EXPECT_NE(error_of([&] { write_nir_graph(*csnn, d.path + "/z.nir", 0.0, "x"); }).find("--nir-dt"), std::string::npos);
}

}  // namespace
}  // namespace sm
