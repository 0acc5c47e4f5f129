// test_checkpoint_validation.cpp — checkpoints that are well-formed HDF5 with valid checksums but
// must not be loaded: NaN/Inf in a parameter, a buffer or an optimizer state (crc32
// recomputed, so only the value check can catch it) refused naming the file, the tensor and the
// first non-finite element, or loaded with one warning under allow_nonfinite; a tensor without
// its crc32 attribute; every /meta field out of range (step -5, ...) refused naming the field,
// by read_checkpoint_info (what `ckpt info` calls) and by the load; a truncated file is an
// Input error (one message from the front end, not a Library error printed by every rank);
// and the one resume warning listing the settings that change the trajectory.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint_fixture.h"
#include "error_of.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/train/run_checkpoints.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/train/train_config.h"

namespace sm {
namespace {

std::string fresh_dir(const std::string& tag) {
  std::string d = ::testing::TempDir() + "sm_ckval_" + std::to_string(getpid()) + "_" + tag;
  EXPECT_EQ(std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str()), 0);
  return d;
}
void remove_dir(const std::string& d) { std::system(("rm -rf '" + d + "'").c_str()); }

void copy_file(const std::string& from, const std::string& to, long keep_bytes = -1) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (keep_bytes >= 0) bytes.resize(static_cast<size_t>(keep_bytes));
  std::ofstream(to, std::ios::binary) << bytes;
}

std::unique_ptr<Model> fmnist(uint64_t seed = 1) { return test::fmnist_model(seed); }
std::unique_ptr<Optimizer> adam(Model& m) { return test::adam_of(m, 0.25); }  // finite, non-zero state

TrainState state_at(int64_t step) {
  TrainState st;
  st.step = step;
  st.epoch = 0;
  st.batch_in_epoch = step;
  st.seed = 42;
  return st;
}

// A good one-process checkpoint of fmnist_csnn (C=4) + Adam at step 3 in `dir`.
std::string good_checkpoint(const std::string& dir, const std::string& config = "seed = 42\n") {
  auto m = fmnist(1);
  auto o = adam(*m);
  return save_model_checkpoint(dir, *m, *o, state_at(3), config, "fp32", 5);
}

// Writes `value` at flat element `at` of float dataset `ds` and recomputes its crc32 attribute,
// so that the checksum passes (as a diverged run's own save would).
void poison(const std::string& file, const std::string& ds, int64_t at, float value) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0) << ds;
  hid_t sp = H5Dget_space(d);
  std::vector<float> v(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
  H5Sclose(sp);
  ASSERT_LT(at, static_cast<int64_t>(v.size())) << ds;
  ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  v[static_cast<size_t>(at)] = value;
  ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  const int64_t crc = static_cast<int64_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(v.data()), static_cast<uInt>(v.size() * sizeof(float))));
  hid_t a = H5Aopen(d, "crc32", H5P_DEFAULT);
  ASSERT_GE(a, 0);
  ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &crc), 0);
  H5Aclose(a);
  H5Dclose(d);
  H5Fclose(f);
}

void delete_attr(const std::string& file, const std::string& object, const std::string& key) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Adelete_by_name(f, object.c_str(), key.c_str(), H5P_DEFAULT), 0) << object << "@" << key;
  H5Fclose(f);
}

// Replaces (or adds) /meta@key with a scalar of `type` holding `value`.
void set_meta(const std::string& file, const std::string& key, hid_t type, const void* value) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t g = H5Gopen2(f, "/meta", H5P_DEFAULT);
  if (H5Aexists(g, key.c_str()) > 0) H5Adelete(g, key.c_str());
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(g, key.c_str(), type, sp, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(a, 0);
  ASSERT_GE(H5Awrite(a, type, value), 0);
  H5Aclose(a);
  H5Sclose(sp);
  H5Gclose(g);
  H5Fclose(f);
}
void set_meta_int(const std::string& file, const std::string& key, int64_t v) {
  set_meta(file, key, H5T_NATIVE_INT64, &v);
}
void set_meta_double(const std::string& file, const std::string& key, double v) {
  set_meta(file, key, H5T_NATIVE_DOUBLE, &v);
}
void set_meta_string(const std::string& file, const std::string& key, const std::string& v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, v.empty() ? 1 : v.size());
  std::string padded = v.empty() ? std::string(1, '\0') : v;
  set_meta(file, key, t, padded.data());
  H5Tclose(t);
}

// Runs f; returns the kind and message of the sm::Error it throws ("" message: none).
std::pair<ErrorKind, std::string> error_and_kind(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  return {ErrorKind::Internal, ""};
}

}  // namespace

TEST(CheckpointValidation, NonFiniteParameterBufferOrOptimizerStateIsRefusedNamingTensorAndElement) {
  const std::string dir = fresh_dir("nonfinite");
  const std::string good = good_checkpoint(dir);
  struct Case {
    std::string ds;
    int64_t at;
    float value;
    const char* index;  // the element's N-d index
    const char* kind;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Case cases[] = {
      {"/params/conv_fc.0.weight", 13, nan, "[1, 0, 1, 1]", "NaN"},  // [4, 1, 3, 3]: 13 = 1*9 + 1*3 + 1
      {"/buffers/conv_fc.1.running_var", 2, inf, "[2]", "+Inf"},
      {"/optim/conv_fc.0.weight/exp_avg_sq", 0, -inf, "[0, 0, 0, 0]", "-Inf"},
  };
  for (const Case& c : cases) {
    const std::string bad = dir + "/bad.h5";
    copy_file(good, bad);
    poison(bad, c.ds, c.at, c.value);
    EXPECT_NO_THROW(verify_checkpoint_checksums(bad)) << "the checksum must pass: only the value check catches it";
    auto m = fmnist(7);
    auto o = adam(*m);
    const Tensor before = m->params()[0]->value.clone();
    const auto [kind, e] = error_and_kind([&] { load_model_checkpoint(bad, *m, *o); });
    EXPECT_EQ(kind, ErrorKind::Input) << e;
    EXPECT_NE(e.find(bad), std::string::npos) << e;
    EXPECT_NE(e.find(c.ds + " (first at element " + std::to_string(c.at) + ", index " + c.index), std::string::npos)
        << e;
    EXPECT_NE(e.find(c.kind), std::string::npos) << e;
    EXPECT_NE(e.find("--allow-nonfinite-checkpoint"), std::string::npos) << e;
    EXPECT_EQ(std::memcmp(before.raw(), m->params()[0]->value.raw(), before.nbytes()), 0)
        << "nothing may be written into the run's tensors";

    // Allowed (train --allow-nonfinite-checkpoint, through the CheckpointManager the trainer
    // uses): it loads, with exactly one warning naming the tensor.
    Layout layout(*m, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, *m));
    CheckpointManager mgr(layout, *o, "", "", "", 1);
    mgr.allow_nonfinite(true);
    LossScaler none = LossScaler::for_precision(Precision::FP32);
    const int warnings = log_warning_count();
    EXPECT_NO_THROW(mgr.load(bad, none));
    EXPECT_EQ(log_warning_count(), warnings + 1);
  }
  // Two poisoned tensors: the error names the first (file order) and counts the other.
  const std::string two = dir + "/two.h5";
  copy_file(good, two);
  poison(two, "/params/conv_fc.4.weight", 5, nan);
  poison(two, "/optim/conv_fc.9.weight/exp_avg", 1, inf);
  auto m = fmnist(7);
  auto o = adam(*m);
  const std::string e = error_of([&] { load_model_checkpoint(two, *m, *o); });
  EXPECT_NE(e.find("/params/conv_fc.4.weight (first at element 5"), std::string::npos) << e;
  EXPECT_NE(e.find("and 1 more tensors"), std::string::npos) << e;
  // The good file still loads without a warning.
  const int warnings = log_warning_count();
  EXPECT_NO_THROW(load_model_checkpoint(good, *m, *o));
  EXPECT_EQ(log_warning_count(), warnings);
  remove_dir(dir);
}

TEST(CheckpointValidation, MissingCrc32AttributeIsAnInputErrorNamingFileAndTensor) {
  const std::string dir = fresh_dir("nocrc");
  const std::string good = good_checkpoint(dir);
  for (const std::string ds : {"/params/conv_fc.0.weight", "/buffers/conv_fc.1.num_batches_tracked",
                               "/optim/conv_fc.9.weight/exp_avg"}) {
    const std::string bad = dir + "/nocrc.h5";
    copy_file(good, bad);
    delete_attr(bad, ds, "crc32");
    auto m = fmnist(7);
    auto o = adam(*m);
    for (auto f : std::vector<std::function<void()>>{[&] { load_model_checkpoint(bad, *m, *o); },
                                                     [&] { verify_checkpoint_checksums(bad); }}) {
      const auto [kind, e] = error_and_kind(f);
      EXPECT_EQ(kind, ErrorKind::Input) << e;
      EXPECT_NE(e.find(bad), std::string::npos) << e;
      EXPECT_NE(e.find(ds + " has no crc32 attribute: damaged or not written by spikemesh"), std::string::npos) << e;
    }
    // --resume auto does not pick it (it is not a verified checkpoint).
    const std::string sub = dir + "/latest";
    ASSERT_EQ(std::system(("mkdir -p '" + sub + "'").c_str()), 0);
    copy_file(bad, checkpoint_path(sub, 9));
    EXPECT_EQ(find_latest_checkpoint(nullptr, sub), "");
    remove_dir(sub);
  }
  remove_dir(dir);
}

TEST(CheckpointValidation, MetaFieldsOutOfRangeAreRefusedNamingTheField) {
  const std::string dir = fresh_dir("meta");
  const std::string good = good_checkpoint(dir);
  struct Case {
    std::string field;
    std::function<void(const std::string&)> edit;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto with_scale = [](double scale) {
    return [scale](const std::string& f) {
      set_meta_double(f, "loss_scale", scale);
      set_meta_int(f, "loss_scale_finite_in_row", 0);
      set_meta_int(f, "skipped_steps", 0);
    };
  };
  const std::vector<Case> cases = {
      {"step", [](const std::string& f) { set_meta_int(f, "step", -5); }},
      {"epoch", [](const std::string& f) { set_meta_int(f, "epoch", -1); }},
      {"batch_in_epoch", [](const std::string& f) { set_meta_int(f, "batch_in_epoch", -2); }},
      {"optimizer_step", [](const std::string& f) { set_meta_int(f, "optimizer_step", -1); }},
      {"seed", [](const std::string& f) { set_meta_int(f, "seed", -3); }},
      {"format_version", [](const std::string& f) { set_meta_int(f, "format_version", 0); }},
      {"format_version", [](const std::string& f) { set_meta_int(f, "format_version", -7); }},
      {"num_optim_states", [](const std::string& f) { set_meta_int(f, "num_optim_states", -1); }},
      {"num_optim_states", [](const std::string& f) { set_meta_int(f, "num_optim_states", 7); }},
      {"loss_scale", with_scale(nan)},
      {"loss_scale", with_scale(0.0)},
      {"loss_scale", with_scale(-8.0)},
      {"loss_scale", with_scale(std::numeric_limits<double>::infinity())},
      {"loss_scale_finite_in_row",
       [&](const std::string& f) {
         with_scale(1024.0)(f);
         set_meta_int(f, "loss_scale_finite_in_row", -1);
       }},
      {"skipped_steps",
       [&](const std::string& f) {
         with_scale(1024.0)(f);
         set_meta_int(f, "skipped_steps", -4);
       }},
      {"precision", [](const std::string& f) { set_meta_string(f, "precision", "fp8"); }},
      {"model", [](const std::string& f) { set_meta_string(f, "model", ""); }},
      {"config", [](const std::string& f) { set_meta_string(f, "config", "seed = [1,\n"); }},
      // a header toml++ 3.3.0 would abort on (an assert, not parse_error): refused before parsing
      {"config", [](const std::string& f) { set_meta_string(f, "config", "a = 1\n[[[ not toml\n"); }},
      {"config", [](const std::string& f) { set_meta_string(f, "config", "  [}\n"); }},
  };
  for (const Case& c : cases) {
    const std::string bad = dir + "/meta.h5";
    copy_file(good, bad);
    c.edit(bad);
    // read_checkpoint_info: what `spikemesh ckpt info` and every resume read first.
    const auto [kind, e] = error_and_kind([&] { read_checkpoint_info(bad); });
    EXPECT_EQ(kind, ErrorKind::Input) << c.field << ": " << e;
    EXPECT_NE(e.find(bad), std::string::npos) << e;
    EXPECT_NE(e.find("/meta attribute '" + c.field + "'"), std::string::npos) << c.field << ": " << e;
    auto m = fmnist(7);
    auto o = adam(*m);
    const Tensor before = m->params()[0]->value.clone();
    const std::string le = error_of([&] { load_model_checkpoint(bad, *m, *o); });
    EXPECT_NE(le.find("/meta attribute '" + c.field + "'"), std::string::npos) << le;
    EXPECT_EQ(std::memcmp(before.raw(), m->params()[0]->value.raw(), before.nbytes()), 0) << c.field;
  }
  // In range: a valid loss scale and a newer-but-known file pass.
  const std::string ok = dir + "/ok.h5";
  copy_file(good, ok);
  with_scale(65536.0)(ok);
  EXPECT_NO_THROW(read_checkpoint_info(ok));
  remove_dir(dir);
}

TEST(CheckpointValidation, TruncatedFileIsAnInputErrorNamingIt) {
  const std::string dir = fresh_dir("trunc");
  const std::string good = good_checkpoint(dir);
  std::ifstream in(good, std::ios::binary | std::ios::ate);
  const long size = static_cast<long>(in.tellg());
  for (long keep : {size * 6 / 10, size / 3, size - 1}) {
    const std::string bad = dir + "/trunc.h5";
    copy_file(good, bad, keep);
    auto m = fmnist(7);
    auto o = adam(*m);
    for (auto f : std::vector<std::function<void()>>{[&] { read_checkpoint_info(bad); },
                                                     [&] { load_model_checkpoint(bad, *m, *o); },
                                                     [&] { verify_checkpoint_checksums(bad); }}) {
      // Input: the front end prints it once for every rank (a Library error is printed by
      // every rank and aborts the job).
      const auto [kind, e] = error_and_kind(f);
      EXPECT_EQ(kind, ErrorKind::Input) << keep << ": " << e;
      EXPECT_NE(e.find(bad), std::string::npos) << e;
    }
  }
  remove_dir(dir);
}

TEST(CheckpointValidation, ResumeConfigDifferencesListTrajectorySettingsOnly) {
  TrainConfig c;
  c.data = "d.h5";
  TrainConfigResolver r(c);
  const std::string base = r.to_toml();
  const std::string mesh1 = "dp=1 tp=1 pp=1 replicated";
  EXPECT_TRUE(resume_config_differences(base, mesh1, base, mesh1).empty());
  // Legitimate on resume: how long, where, threads, device, the mesh; the per-rank batch when
  // the global batch stays (dp 1 x 16 -> dp 2 x 8).
  c.max_steps = 99;
  c.epochs = 7;
  c.output = "elsewhere";
  c.run_name = "x";
  c.threads = 3;
  c.device = "cpu";
  c.resume = "auto";
  c.keep = 9;
  c.parallel.comm_timeout = 5;
  c.parallel.mesh_shape = {2, 1, 1};
  c.parallel.distributed_mode = "dp";
  c.batch_size = 8;
  c.allow_nonfinite_checkpoint = true;
  const std::string moved = r.to_toml();
  EXPECT_TRUE(resume_config_differences(base, mesh1, moved, "dp=2 tp=1 pp=1 replicated").empty())
      << resume_config_differences(base, mesh1, moved, "dp=2 tp=1 pp=1 replicated")[0];
  // Trajectory settings: each named with both values, in key order; the global batch too.
  c.T = 2;
  c.dropout = 0.5;
  c.precision = "fp64";
  c.seed = 9;
  c.vars = {"C=8"};
  c.lr = 0.01;
  const std::vector<std::string> d = resume_config_differences(base, mesh1, r.to_toml(), "dp=1 tp=1 pp=1 replicated");
  const std::vector<std::string> want = {"T: checkpoint 0, now 2",          "dropout: checkpoint -1, now 0.5",
                                         "lr: checkpoint 0.001, now 0.01",   "precision: checkpoint \"fp32\", now \"fp64\"",
                                         "seed: checkpoint 1, now 9",        "var: checkpoint [], now [ \"C=8\" ]",
                                         "global batch: checkpoint 16, now 8"};
  EXPECT_EQ(d, want);
  // Unknown either side (a tool's save, a foreign file): nothing to compare.
  EXPECT_TRUE(resume_config_differences("", mesh1, base, mesh1).empty());
  EXPECT_TRUE(resume_config_differences("x = [1,", mesh1, base, mesh1).empty());
}

TEST(CheckpointValidation, ResumeWithOtherSettingsWarnsOnceThroughTheManager) {
  const std::string dir = fresh_dir("resume_warn");
  TrainConfig c;
  c.data = "d.h5";
  TrainConfigResolver r(c);
  const std::string was = r.to_toml();
  auto m = fmnist(1);
  auto o = adam(*m);
  Layout layout(*m, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, *m));
  CheckpointManager writer(layout, *o, dir, was, "fp32", 2);
  TrainState st = state_at(2);
  const std::string path = writer.save(st, LossScaler::for_precision(Precision::FP32));
  LossScaler none = LossScaler::for_precision(Precision::FP32);
  int before = log_warning_count();
  CheckpointManager same(layout, *o, dir, was, "fp32", 2);
  same.load(path, none);
  EXPECT_EQ(log_warning_count(), before) << "same settings: no warning";
  c.T = 3;
  c.seed = 5;
  c.batch_size = 4;
  CheckpointManager other(layout, *o, dir, r.to_toml(), "fp32", 2);
  before = log_warning_count();
  other.load(path, none);
  EXPECT_EQ(log_warning_count(), before + 1) << "one warning listing every differing setting";
  remove_dir(dir);
}

}  // namespace sm
