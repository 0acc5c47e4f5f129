// test_gpu_trainer.cpp — `spikemesh train` on a GPU (train/trainer.h, --device cuda) with the
// built-in cifar10dvs_vgg on synthetic DVS events (T 2): the run directory holds what a CPU
// run writes (metrics with device peak memory, evaluations, checkpoints), the loss trajectory
// follows the CPU's (the reference: first step to 1e-4, the rest loosely — spikes are
// thresholds, so cuDNN's and oneDNN's roundings may flip a few), a resumed GPU run repeats the
// uninterrupted one bit for bit, a GPU checkpoint loads into a CPU model, and bf16/fp16 runs
// train (fp16 records its loss scale in metrics and checkpoints and keeps it across resume).
// Skipped without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "spikemesh/app/model_options.h"
#include "spikemesh/data/importers.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/optimizer.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/trainer.h"

namespace sm {
namespace {

std::string scratch() {
  static std::string d = [] {
    std::string p = ::testing::TempDir() + "sm_gpu_trainer_" + std::to_string(getpid());
    std::system(("rm -rf '" + p + "' && mkdir -p '" + p + "'").c_str());
    return p;
  }();
  return d;
}

// 32 training / 16 test samples [T 2, 2, 48, 48]: 4 steps per epoch at batch 8.
const std::string& dataset() {
  static std::string p = [] {
    SynthDvsConfig c;
    c.T = 2;
    c.size = 48;
    c.train = 32;
    c.test = 16;
    c.seed = 3;
    std::string path = scratch() + "/dvs.h5";
    make_synth_dvs(c, path);
    return path;
  }();
  return p;
}

struct GpuRun {
  TrainConfig cfg;
  TrainConfigResolver resolver{cfg};
  GpuRun(const std::string& name, const std::vector<std::pair<std::string, std::string>>& kv) {
    const std::vector<std::pair<std::string, std::string>> base = {
        {"model", "cifar10dvs_vgg"}, {"data", dataset()}, {"batch-size", "8"}, {"optimizer", "adam"},
        {"lr", "1e-3"},               {"dropout", "0"},    {"epochs", "2"},     {"output", scratch()},
        {"run-name", name},           {"log-every", "1"},  {"keep", "10"},      {"device", "cuda"}};
    for (auto& [k, v] : base) resolver.set(k, v, "test");
    for (auto& [k, v] : kv) resolver.set(k, v, "test");
    validate_train_config(cfg);
  }
  TrainSummary go() { return run_training(cfg, resolver.to_toml()); }
  std::string dir() const { return cfg.output + "/" + cfg.run_name; }
  std::vector<double> metric(const std::string& name) const {
    Tensor t = H5File::open(dir() + "/metrics.h5").read(name, DType::F64);
    return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
  }
};

void clear(const std::string& name) { std::system(("rm -rf '" + scratch() + "/" + name + "'").c_str()); }

TEST(GpuTrainer, FollowsTheCpuRunAndWritesTheSameFiles) {
  SKIP_WITHOUT_GPU();
  clear("cpu");
  clear("gpu");
  GpuRun cpu("cpu", {{"device", "cpu"}, {"max-steps", "4"}});
  GpuRun gpu("gpu", {{"max-steps", "4"}});
  const TrainSummary sc = cpu.go(), sg = gpu.go();
  ASSERT_EQ(sg.steps, 4);
  const std::vector<double> lc = cpu.metric("/step/loss"), lg = gpu.metric("/step/loss");
  ASSERT_EQ(lg.size(), 4u);
  ASSERT_EQ(lc.size(), lg.size());
  EXPECT_NEAR(lg[0], lc[0], 1e-4 * std::fabs(lc[0])) << "the first step starts from the same weights and batch";
  for (size_t i = 1; i < lg.size(); ++i) EXPECT_NEAR(lg[i], lc[i], 5e-2 * std::fabs(lc[i])) << "step " << i + 1;
  for (double m : gpu.metric("/step/peak_mem_mb")) EXPECT_GT(m, 0.0) << "device peak memory is reported";
  ASSERT_EQ(gpu.metric("/eval/accuracy").size(), 1u);
  EXPECT_NEAR(gpu.metric("/eval/loss")[0], cpu.metric("/eval/loss")[0], 5e-2 * cpu.metric("/eval/loss")[0]);
  EXPECT_EQ(read_checkpoint_info(sg.last_checkpoint).precision, "fp32");
  // The GPU checkpoint (full logical shapes, host files) loads into a CPU model and optimizer.
  ModelSelection sel;
  sel.model = "cifar10dvs_vgg";
  sel.T = 2;
  sel.dropout = 0;
  std::unique_ptr<Model> m = sel.build();
  m->finalize(DType::F32, Device::cpu(), 1);
  OptimizerConfig oc;
  oc.name = "adam";
  auto opt = make_optimizer(oc, m->params());
  const CheckpointInfo ci = load_checkpoint(sg.last_checkpoint, *m, *opt);
  EXPECT_EQ(ci.state.step, 4);
  EXPECT_EQ(opt->step_count(), 4);
}

TEST(GpuTrainer, ResumeReproducesTheUninterruptedLossesBitForBit) {
  SKIP_WITHOUT_GPU();
  clear("full");
  clear("split");
  GpuRun full("full", {});
  full.go();
  GpuRun first("split", {{"max-steps", "3"}});
  first.go();
  GpuRun rest("split", {{"resume", "auto"}});
  const TrainSummary s = rest.go();
  EXPECT_EQ(s.steps, 8);
  const std::vector<double> a = full.metric("/step/loss"), b = rest.metric("/step/loss");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(double)), 0) << "step " << i + 1 << ": " << a[i] << " vs " << b[i];
}

TEST(GpuTrainer, Bf16AndFp16RunsTrainAndFp16KeepsItsLossScale) {
  SKIP_WITHOUT_GPU();
  clear("bf16");
  GpuRun bf16("bf16", {{"precision", "bf16"}});
  bf16.go();
  for (double l : bf16.metric("/step/loss")) EXPECT_TRUE(std::isfinite(l));
  EXPECT_EQ(bf16.metric("/step/loss").size(), 8u);

  clear("fp16");
  GpuRun a("fp16", {{"precision", "fp16"}, {"max-steps", "3"}});
  const TrainSummary s = a.go();
  const std::vector<double> scale = a.metric("/step/loss_scale");
  ASSERT_EQ(scale.size(), 3u);
  EXPECT_GE(scale.back(), 1.0);
  H5File f = H5File::open(s.last_checkpoint);
  const H5Group meta = f.open_group("/meta");
  ASSERT_TRUE(meta.has_attr("loss_scale")) << "an fp16 checkpoint keeps the loss scale";
  EXPECT_EQ(meta.attr_double("loss_scale"), scale.back());
  GpuRun b("fp16", {{"precision", "fp16"}, {"resume", "auto"}});
  b.go();
  const std::vector<double> after = b.metric("/step/loss_scale");
  ASSERT_EQ(after.size(), 8u);
  for (double l : b.metric("/step/loss")) EXPECT_TRUE(std::isfinite(l));
}

}  // namespace
}  // namespace sm
