// test_trainer.cpp — the single-rank training run (train/trainer.h) on tiny hand-written
// Fashion-MNIST-shaped datasets with fmnist_csnn at C=4: the run directory (log.txt,
// config.toml that reads back into the same configuration, metrics.h5 with one row per step
// and per evaluation), evaluation aggregated over uneven batches, and exact resume — per-step
// losses, evaluations and final weights bitwise identical to an uninterrupted run — after
// --max-steps, from --resume auto and --resume PATH, and after a stop request (SIGTERM/SIGUSR1
// path) before and during training.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "spikemesh/models/model_selection.h"
#include "spikemesh/core/error.h"
#include "spikemesh/data/encoder.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/models/model.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/train_step.h"
#include "spikemesh/train/train_plan.h"
#include "spikemesh/train/trainer.h"

namespace sm {
namespace {

// A real stop signal, as Slurm's --signal would send it (train/stop_signal.h).
void signal_stop() {
  install_stop_signal_handlers();
  std::raise(SIGUSR1);
}

bool g_root_made = false;
std::string root_dir() {
  static std::string d = [] {
    std::string p = ::testing::TempDir() + "sm_trainer_" + std::to_string(getpid());
    std::system(("rm -rf '" + p + "' && mkdir -p '" + p + "'").c_str());
    g_root_made = true;
    return p;
  }();
  return d;
}

// Removes the scratch directory after the last test.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_root_made) std::system(("rm -rf '" + root_dir() + "'").c_str());
  }
};
::testing::Environment* const g_cleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

// Fashion-MNIST-shaped u8 NCHW dataset: class c brightens row band c, plus noise.
std::string make_dataset(const std::string& name, int64_t train, int64_t test) {
  std::string path = root_dir() + "/" + name;
  DatasetInfo info;
  info.num_classes = 10;
  info.T = 0;
  info.layout = "NCHW";
  info.encoding = "image";
  info.source = "test_trainer";
  info.x_scale = 1.0 / 255.0;
  info.sample_shape = {1, 28, 28};
  info.stored = DType::U8;
  info.train_size = train;
  info.test_size = test;
  H5DatasetWriter w(path, info);
  uint32_t state = 12345;
  auto rnd = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 24;
  };
  for (Split s : {Split::Train, Split::Test}) {
    int64_t n = s == Split::Train ? train : test;
    Tensor x = Tensor::zeros({n, 1, 28, 28}, DType::U8);
    Tensor y = Tensor::zeros({n}, DType::I64);
    for (int64_t i = 0; i < n; ++i) {
      int64_t c = static_cast<int64_t>(rnd() % 10);
      y.data<int64_t>()[i] = c;
      uint8_t* px = x.data<uint8_t>() + i * 784;
      for (int k = 0; k < 784; ++k) px[k] = static_cast<uint8_t>(rnd() / 2);
      for (int r = 2 * static_cast<int>(c) + 4; r < 2 * static_cast<int>(c) + 7; ++r)
        for (int col = 0; col < 28; ++col) px[r * 28 + col] = 250;
    }
    w.write(s, 0, x, y);
  }
  w.commit();
  return path;
}

const std::string& dataset() {
  static std::string p = make_dataset("fm32.h5", 32, 16);  // 4 steps per epoch at batch 8
  return p;
}

// A configuration resolved the way `spikemesh train` resolves it (flags as key/value pairs).
struct TrainRun {
  TrainConfig cfg;
  TrainConfigResolver resolver{cfg};
  explicit TrainRun(const std::vector<std::pair<std::string, std::string>>& kv) {
    for (auto& [k, v] : base()) resolver.set(k, v, "test");
    for (auto& [k, v] : kv) resolver.set(k, v, "test");
    validate_train_config(cfg);
  }
  static std::vector<std::pair<std::string, std::string>> base() {
    return {{"model", "fmnist_csnn"}, {"var", "C=4"},        {"data", dataset()},
            {"batch-size", "8"},       {"lr", "0.01"},       {"output", root_dir()},
            {"log-every", "1"},        {"keep", "10"},       {"device", "cpu"}};
  }
  TrainSummary go() { return run_training(cfg, resolver.to_toml(), nullptr, training_layout_plan(cfg, MeshShape{}, 1)); }
  std::string dir() const { return cfg.output + "/" + cfg.run_name; }
};

// Removes run directories of earlier runs (e.g. with --gtest_repeat) so each test starts fresh.
void clear_runs(const std::vector<std::string>& names) {
  for (auto& n : names) std::system(("rm -rf '" + root_dir() + "/" + n + "'").c_str());
}

std::vector<double> column(const std::string& file, const std::string& name) {
  H5File f = H5File::open(file);
  Tensor t = f.read(name, DType::F64);
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

std::vector<double> metric(const TrainRun& r, const std::string& name) { return column(r.dir() + "/metrics.h5", name); }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string dataset_string_attr(const std::string& file, const std::string& ds, const std::string& key) {
  std::string out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  if (d >= 0 && H5Aexists(d, key.c_str()) > 0) {
    hid_t a = H5Aopen(d, key.c_str(), H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    if (H5Tis_variable_str(t) > 0) {
      char* s = nullptr;
      H5Aread(a, t, &s);
      if (s) out = s;
      H5free_memory(s);
    } else {
      std::vector<char> buf(H5Tget_size(t) + 1, 0);
      H5Aread(a, t, buf.data());
      out = buf.data();
    }
    H5Tclose(t);
    H5Aclose(a);
  }
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return out;
}

// Every dataset under /params, /buffers and /optim of two checkpoints, byte for byte.
::testing::AssertionResult same_checkpoint_tensors(const std::string& a, const std::string& b) {
  H5File fa = H5File::open(a), fb = H5File::open(b);
  int compared = 0;
  for (const char* grp : {"/params", "/buffers", "/optim"}) {
    std::vector<std::string> names;
    std::function<void(const H5Group&, const std::string&)> walk = [&](const H5Group& g, const std::string& pre) {
      for (auto& d : g.list_datasets()) names.push_back(pre + d);
      for (auto& s : g.list_groups()) walk(g.open_group(s), pre + s + "/");
    };
    walk(fa.open_group(grp), std::string(grp) + "/");
    for (auto& n : names) {
      if (!fb.has_dataset(n)) return ::testing::AssertionFailure() << b << " lacks " << n;
      Tensor ta = fa.read(n), tb = fb.read(n);
      if (ta.shape() != tb.shape() || ta.nbytes() != tb.nbytes() || std::memcmp(ta.raw(), tb.raw(), ta.nbytes()))
        return ::testing::AssertionFailure() << n << " differs between " << a << " and " << b;
      ++compared;
    }
  }
  if (compared < 10) return ::testing::AssertionFailure() << "only " << compared << " tensors compared";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "row " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

std::vector<double> seq(double from, double to) {
  std::vector<double> v;
  for (double x = from; x <= to; x += 1) v.push_back(x);
  return v;
}

// Eval rows of `r` at the given steps (first row per step).
std::vector<double> eval_at(const TrainRun& r, const std::string& col, const std::vector<double>& steps) {
  std::vector<double> s = metric(r, "/eval/step"), v = metric(r, col), out;
  for (double want : steps)
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == want) {
        out.push_back(v[i]);
        break;
      }
  return out;
}

}  // namespace

TEST(Trainer, RunDirectoryMetricsSchemaAndConfig) {
  clear_stop_request();
  clear_runs({"schema"});
  TrainRun r({{"run-name", "schema"}, {"epochs", "2"}, {"eval-batch-size", "5"}, {"seed", "3"}});
  TrainSummary s = r.go();
  EXPECT_EQ(s.run_dir, r.dir());
  EXPECT_EQ(s.steps, 8);
  EXPECT_FALSE(s.interrupted);
  EXPECT_EQ(s.last_checkpoint, checkpoint_path(r.dir(), 8));

  const std::string m = r.dir() + "/metrics.h5";
  H5File f = H5File::open(m);
  for (const char* name : {"step", "epoch", "loss", "accuracy", "lr", "time_ms", "forward_ms", "backward_ms",
                           "optimizer_ms", "data_ms", "samples_per_s", "peak_mem_mb"}) {
    std::string p = std::string("/step/") + name;
    ASSERT_TRUE(f.has_dataset(p)) << p;
    EXPECT_EQ(f.dataset_shape(p), (Shape{8})) << p;
    for (double v : column(m, p)) EXPECT_TRUE(std::isfinite(v) && v >= 0) << p << " = " << v;
  }
  EXPECT_EQ(metric(r, "/step/step"), seq(1, 8));
  EXPECT_EQ(metric(r, "/step/epoch"), (std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1}));
  for (double v : metric(r, "/step/lr")) EXPECT_EQ(v, 0.01);
  for (double v : metric(r, "/step/accuracy")) EXPECT_TRUE(v >= 0 && v <= 1 && std::fmod(v * 8, 1.0) == 0) << v;
  for (double v : metric(r, "/step/time_ms")) EXPECT_GT(v, 0);
  for (double v : metric(r, "/step/samples_per_s")) EXPECT_GT(v, 0);
  for (double v : metric(r, "/step/peak_mem_mb")) EXPECT_GT(v, 0);
  std::vector<double> loss = metric(r, "/step/loss");
  for (double v : loss) EXPECT_TRUE(v > 0 && v < 1) << v;  // rate MSE against one-hot

  // One evaluation per epoch, over the whole test set (16 samples in batches 5, 5, 5, 1).
  EXPECT_EQ(metric(r, "/eval/step"), (std::vector<double>{4, 8}));
  // /step/epoch is the 0-based epoch of the batch; /eval/epoch the number of epochs completed.
  EXPECT_EQ(metric(r, "/eval/epoch"), (std::vector<double>{1, 2}));
  std::vector<double> acc = metric(r, "/eval/accuracy"), eloss = metric(r, "/eval/loss");
  ASSERT_EQ(acc.size(), 2u);
  for (double a : acc) EXPECT_TRUE(a >= 0 && a <= 1 && std::fabs(a * 16 - std::round(a * 16)) < 1e-9) << a;
  EXPECT_EQ(s.final_test_accuracy, acc[1]);
  EXPECT_EQ(s.final_test_loss, eloss[1]);
  ASSERT_TRUE(f.has_dataset("/eval/firing_rate"));
  ASSERT_TRUE(f.has_dataset("/step/firing_rate"));
  EXPECT_EQ(f.dataset_shape("/eval/firing_rate"), (Shape{2, 4}));  // 4 IF layers in fmnist_csnn
  EXPECT_EQ(f.dataset_shape("/step/firing_rate"), (Shape{8, 4}));
  std::vector<double> fr = metric(r, "/eval/firing_rate");
  for (double v : fr) EXPECT_TRUE(v >= 0 && v <= 1) << v;
  std::string names = dataset_string_attr(m, "/eval/firing_rate", "layer_names");
  EXPECT_EQ(names, "conv_fc.2,conv_fc.6,conv_fc.10,conv_fc.12");
  EXPECT_EQ(dataset_string_attr(m, "/step/firing_rate", "layer_names"), names);

  // The evaluation, recomputed from the final checkpoint in one batch of all 16 samples.
  {
    ModelSelection sel;
    sel.model = "fmnist_csnn";
    sel.vars = {"C=4"};
    auto model = sel.build();
    model->finalize(DType::F32, Device::cpu(), 77);
    OptimizerConfig oc;
    auto opt = make_optimizer(oc, model->params());
    load_model_checkpoint(s.last_checkpoint, *model, *opt);
    H5Dataset ds = H5Dataset::open(dataset());
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < 16; ++i) idx.push_back(i);
    Tensor x, y;
    ds.read(Split::Test, idx, x, y);
    Tensor xt = encode_static(x, model->info.T, Encoding::Direct, DType::F32, 3, 0, idx);
    Ctx ctx;
    ctx.seed = 3;
    Layout layout(*model, nullptr, resolved_layout_plan(LayoutOptions{}, MeshShape{}, 1, 0, *model));
    StepResult e = eval_step(layout, xt, y, ctx);
    EXPECT_EQ(e.count, 16);
    EXPECT_DOUBLE_EQ(static_cast<double>(e.correct) / 16, acc[1]);
    EXPECT_NEAR(e.loss, eloss[1], 1e-6);
    auto st = model->stats();
    ASSERT_EQ(st.size(), 4u);
    for (size_t l = 0; l < 4; ++l) EXPECT_NEAR(st[l].value, fr[4 + l], 1e-6) << st[l].layer;
  }

  // log.txt and config.toml; the config reads back into the same configuration.
  std::string log = read_text(r.dir() + "/log.txt");
  EXPECT_NE(log.find("step 8/8"), std::string::npos) << log;
  EXPECT_NE(log.find("eval  step 4"), std::string::npos) << log;
  EXPECT_NE(log.find("done: 8 steps"), std::string::npos) << log;
  std::string toml = read_text(r.dir() + "/config.toml");
  EXPECT_EQ(toml, r.resolver.to_toml());
  TrainConfig back;
  TrainConfigResolver rb(back);
  rb.apply_toml_file(r.dir() + "/config.toml");
  EXPECT_EQ(rb.to_toml(), toml);
  EXPECT_EQ(back.vars, (std::vector<std::string>{"C=4"}));
  EXPECT_EQ(back.data, dataset());
  EXPECT_EQ(back.batch_size, 8);
  EXPECT_EQ(back.epochs, 2);
  EXPECT_EQ(back.seed, 3);
  EXPECT_EQ(back.eval_batch_size, 5);
  EXPECT_EQ(back.run_name, "schema");
  // ... and the checkpoint carries the same text.
  EXPECT_EQ(read_checkpoint_info(s.last_checkpoint).config_toml, toml);
}

TEST(Trainer, ExactResumeAfterMaxStepsWithAutoAndPath) {
  clear_stop_request();
  clear_runs({"full", "auto", "path"});
  // 3 epochs x 4 steps, checkpoints every 3 steps, step-decay schedule with warm-up.
  std::vector<std::pair<std::string, std::string>> common = {
      {"epochs", "3"}, {"ckpt-every", "3"}, {"lr-schedule", "step"}, {"lr-step-size", "4"},
      {"lr-gamma", "0.5"}, {"warmup-steps", "2"}, {"seed", "5"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  TrainRun full(with({{"run-name", "full"}}));
  TrainSummary sf = full.go();
  ASSERT_EQ(sf.steps, 12);
  std::vector<double> want = metric(full, "/step/loss");
  ASSERT_EQ(want.size(), 12u);
  // The losses must actually move, or "identical" would prove little.
  EXPECT_NE(want.front(), want.back());
  // Starting over in a run directory that holds checkpoints needs --resume; nothing is touched.
  {
    TrainRun again(with({{"run-name", "full"}}));
    std::string before = read_text(full.dir() + "/config.toml");
    std::string e;
    try {
      again.go();
    } catch (const Error& err) {
      e = err.what();
    }
    EXPECT_NE(e.find(full.dir()), std::string::npos) << e;
    EXPECT_NE(e.find("--resume"), std::string::npos) << e;
    EXPECT_EQ(metric(full, "/step/loss"), want);
    EXPECT_EQ(read_text(full.dir() + "/config.toml"), before);
  }

  // Stopped by --max-steps 5 (mid-epoch 2), then resumed with --resume auto.
  TrainRun part(with({{"run-name", "auto"}, {"max-steps", "5"}}));
  TrainSummary sp = part.go();
  EXPECT_EQ(sp.steps, 5);
  EXPECT_EQ(sp.last_checkpoint, checkpoint_path(part.dir(), 5));
  CheckpointInfo ci = read_checkpoint_info(sp.last_checkpoint);
  EXPECT_EQ(ci.state.step, 5);
  EXPECT_EQ(ci.state.epoch, 1);
  EXPECT_EQ(ci.state.batch_in_epoch, 1);
  TrainRun rest(with({{"run-name", "auto"}, {"resume", "auto"}}));
  TrainSummary sr = rest.go();
  EXPECT_EQ(sr.steps, 12);
  EXPECT_EQ(metric(rest, "/step/step"), seq(1, 12));
  EXPECT_TRUE(bitwise_equal(metric(rest, "/step/loss"), want));
  EXPECT_TRUE(bitwise_equal(metric(rest, "/step/lr"), metric(full, "/step/lr")));
  EXPECT_TRUE(bitwise_equal(metric(rest, "/step/firing_rate"), metric(full, "/step/firing_rate")));
  EXPECT_TRUE(bitwise_equal(eval_at(rest, "/eval/loss", {4, 8, 12}), metric(full, "/eval/loss")));
  EXPECT_TRUE(bitwise_equal(eval_at(rest, "/eval/accuracy", {4, 8, 12}), metric(full, "/eval/accuracy")));
  EXPECT_EQ(sr.final_test_accuracy, sf.final_test_accuracy);
  EXPECT_TRUE(same_checkpoint_tensors(sf.last_checkpoint, sr.last_checkpoint));
  EXPECT_NE(read_text(rest.dir() + "/log.txt").find("resumed from " + sp.last_checkpoint), std::string::npos);

  // --resume PATH: from the uninterrupted run's step-6 checkpoint into a new run directory.
  std::string from = checkpoint_path(full.dir(), 6);
  TrainRun path_run(with({{"run-name", "path"}, {"resume", from}}));
  TrainSummary sq = path_run.go();
  EXPECT_EQ(sq.steps, 12);
  EXPECT_EQ(metric(path_run, "/step/step"), seq(7, 12));
  EXPECT_TRUE(bitwise_equal(metric(path_run, "/step/loss"), std::vector<double>(want.begin() + 6, want.end())));
  EXPECT_TRUE(same_checkpoint_tensors(sf.last_checkpoint, sq.last_checkpoint));
}

TEST(Trainer, StopRequestedBeforeTrainingCheckpointsAndResumesExactly) {
  // Poisson encoding, SGD with Nesterov momentum, cosine schedule: every stateful part.
  std::vector<std::pair<std::string, std::string>> common = {
      {"epochs", "2"},         {"encoding", "poisson"},     {"optimizer", "sgd"},  {"nesterov", "true"},
      {"lr", "0.05"},          {"lr-schedule", "cosine"},   {"warmup-steps", "1"}, {"clip-grad-norm", "1.0"},
      {"seed", "9"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  clear_stop_request();
  clear_runs({"stop_full", "stop"});
  TrainRun full(with({{"run-name", "stop_full"}}));
  ASSERT_EQ(full.go().steps, 8);

  TrainRun first(with({{"run-name", "stop"}}));
  signal_stop();
  TrainSummary s1 = first.go();
  clear_stop_request();
  EXPECT_TRUE(s1.interrupted);
  EXPECT_EQ(s1.steps, 1);  // the step in flight is finished, then the run stops
  EXPECT_EQ(s1.last_checkpoint, checkpoint_path(first.dir(), 1));
  EXPECT_EQ(find_latest_checkpoint(nullptr, first.dir()), s1.last_checkpoint);
  EXPECT_NE(read_text(first.dir() + "/log.txt").find("stop requested"), std::string::npos);

  TrainRun again(with({{"run-name", "stop"}, {"resume", "auto"}}));
  TrainSummary s2 = again.go();
  EXPECT_FALSE(s2.interrupted);
  EXPECT_EQ(s2.steps, 8);
  EXPECT_EQ(metric(again, "/step/step"), seq(1, 8));
  EXPECT_TRUE(bitwise_equal(metric(again, "/step/loss"), metric(full, "/step/loss")));
  EXPECT_TRUE(bitwise_equal(metric(again, "/step/lr"), metric(full, "/step/lr")));
  EXPECT_TRUE(bitwise_equal(metric(again, "/eval/loss"), metric(full, "/eval/loss")));
  EXPECT_TRUE(same_checkpoint_tensors(checkpoint_path(full.dir(), 8), s2.last_checkpoint));
}

TEST(Trainer, StopRequestedDuringTrainingCheckpointsAndResumesExactly) {
  std::vector<std::pair<std::string, std::string>> common = {{"epochs", "6"}, {"ckpt-every", "7"}, {"seed", "4"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  clear_stop_request();
  clear_runs({"during_full", "during"});
  TrainRun full(with({{"run-name", "during_full"}}));
  ASSERT_EQ(full.go().steps, 24);

  TrainRun first(with({{"run-name", "during"}}));
  std::atomic<bool> done{false};
  // Like a signal arriving at an arbitrary moment once training is under way.
  std::thread stopper([&] {
    const std::string log = first.dir() + "/log.txt";
    while (!done.load()) {
      if (read_text(log).find(" step 2/24") != std::string::npos) {
        signal_stop();
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  TrainSummary s1 = first.go();
  done = true;
  stopper.join();
  clear_stop_request();
  ASSERT_TRUE(s1.interrupted) << "the run finished before the stop request arrived";
  EXPECT_GE(s1.steps, 2);
  EXPECT_LT(s1.steps, 24);
  EXPECT_EQ(s1.last_checkpoint, checkpoint_path(first.dir(), s1.steps));
  EXPECT_EQ(metric(first, "/step/step"), seq(1, static_cast<double>(s1.steps)));

  TrainRun again(with({{"run-name", "during"}, {"resume", "auto"}}));
  TrainSummary s2 = again.go();
  EXPECT_EQ(s2.steps, 24);
  EXPECT_EQ(metric(again, "/step/step"), seq(1, 24));
  EXPECT_TRUE(bitwise_equal(metric(again, "/step/loss"), metric(full, "/step/loss")));
  EXPECT_TRUE(same_checkpoint_tensors(checkpoint_path(full.dir(), 24), s2.last_checkpoint));
}

TEST(Trainer, BadInputsFailBeforeWritingAnything) {
  clear_stop_request();
  auto error_of = [](TrainRun& r) -> std::string {
    try {
      r.go();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto exists = [](const std::string& p) { return access(p.c_str(), F_OK) == 0; };
  // Model/data mismatch: cifar10dvs_vgg expects [2, 48, 48] events.
  TrainRun wrong({{"run-name", "wrong_model"}, {"model", "cifar10dvs_vgg"}});
  wrong.cfg.vars.clear();  // the VGG spec has no var C
  std::string e = error_of(wrong);
  EXPECT_NE(e.find(dataset()), std::string::npos) << e;
  EXPECT_NE(e.find("cifar10dvs_vgg"), std::string::npos) << e;
  EXPECT_FALSE(exists(wrong.dir()));
  // Fewer training samples than one batch.
  TrainRun big({{"run-name", "big_batch"}, {"batch-size", "64"}});
  e = error_of(big);
  EXPECT_NE(e.find("64"), std::string::npos) << e;
  EXPECT_FALSE(exists(big.dir()));
  // A bad optimizer hyper-parameter: refused where it is set (its range, core/flag_ranges.h).
  std::string me;
  try {
    TrainRun mom({{"run-name", "bad_momentum"}, {"optimizer", "sgd"}, {"momentum", "-1"}});
    me = error_of(mom);
  } catch (const Error& x) {
    me = x.what();
  }
  EXPECT_NE(me.find("momentum"), std::string::npos) << me;
  EXPECT_FALSE(exists(root_dir() + "/bad_momentum"));
  // Missing dataset.
  TrainRun missing({{"run-name", "missing"}, {"data", root_dir() + "/nope.h5"}});
  EXPECT_NE(error_of(missing).find("nope.h5"), std::string::npos);
  EXPECT_FALSE(exists(missing.dir()));
  // Resuming from a checkpoint that does not exist names it.
  TrainRun res({{"run-name", "bad_resume"}, {"resume", root_dir() + "/no_ckpt.h5"}});
  EXPECT_NE(error_of(res).find("no_ckpt.h5"), std::string::npos);
}

}  // namespace sm

namespace sm {

// `--resume auto` of a run that already finished adds nothing: no training step, no second
// evaluation row at the final step, no new checkpoint.
TEST(Trainer, ResumingAFinishedRunAddsNoRows) {
  clear_stop_request();
  clear_runs({"finished"});
  TrainRun a({{"run-name", "finished"}, {"epochs", "1"}});
  TrainSummary s1 = a.go();
  ASSERT_EQ(s1.steps, 4);
  const std::vector<double> evals = metric(a, "/eval/step"), steps = metric(a, "/step/step");
  ASSERT_EQ(evals, (std::vector<double>{4}));
  TrainRun b({{"run-name", "finished"}, {"epochs", "1"}, {"resume", "auto"}});
  TrainSummary s2 = b.go();
  EXPECT_EQ(s2.steps, 4);
  EXPECT_EQ(metric(b, "/eval/step"), evals);
  EXPECT_EQ(metric(b, "/step/step"), steps);
  // A longer schedule on the same run still continues and evaluates.
  TrainRun c({{"run-name", "finished"}, {"epochs", "2"}, {"resume", "auto"}});
  TrainSummary s3 = c.go();
  EXPECT_EQ(s3.steps, 8);
  EXPECT_EQ(metric(c, "/eval/step"), (std::vector<double>{4, 8}));
}

}  // namespace sm
