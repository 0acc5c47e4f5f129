// test_gpu_trainer.cpp — `spikemesh train` on a GPU (train/trainer.h, --device cuda) with the
// built-in cifar10dvs_vgg on synthetic DVS events (T 2): the run directory holds what a CPU
// run writes (metrics with device peak memory, evaluations, checkpoints), the loss trajectory
// follows the CPU's (the reference: first step to 1e-3, the rest loosely — spikes are
// thresholds, so cuDNN's and oneDNN's roundings may flip a few), a resumed GPU run repeats the
// uninterrupted one bit for bit, a GPU checkpoint loads into a CPU model, and bf16/fp16 runs
// train (fp16 records its loss scale in metrics and checkpoints, and a resumed fp16 run repeats
// the uninterrupted one, scaler included). The GPU run's log names the device (not a CPU run).
// Skipped without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/data/importers.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/train_plan.h"
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
  TrainSummary go() { return run_training(cfg, resolver.to_toml(), nullptr, training_layout_plan(cfg, MeshShape{}, 1)); }
  std::string dir() const { return cfg.output + "/" + cfg.run_name; }
  std::vector<double> metric(const std::string& name) const {
    Tensor t = H5File::open(dir() + "/metrics.h5").read(name, DType::F64);
    return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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
  EXPECT_NE(read_text(gpu.dir() + "/log.txt").find("cuda:0"), std::string::npos) << "the run was not on the GPU";
  EXPECT_EQ(read_text(cpu.dir() + "/log.txt").find("cuda:0"), std::string::npos);
  EXPECT_NEAR(lg[0], lc[0], 1e-3 * std::fabs(lc[0])) << "the first step starts from the same weights and batch";
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
  const CheckpointInfo ci = load_model_checkpoint(sg.last_checkpoint, *m, *opt);
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

  // fp16: an interrupted run resumed from its checkpoint continues the loss scaler (scale and
  // the count of finite steps towards its growth) and repeats the uninterrupted run exactly.
  clear("fp16");
  clear("fp16_full");
  GpuRun full("fp16_full", {{"precision", "fp16"}});
  const TrainSummary sf = full.go();
  GpuRun a("fp16", {{"precision", "fp16"}, {"max-steps", "3"}});
  const TrainSummary s = a.go();
  const std::vector<double> scale = a.metric("/step/loss_scale");
  ASSERT_EQ(scale.size(), 3u);
  {
    H5File f = H5File::open(s.last_checkpoint);
    const H5Group meta = f.open_group("/meta");
    ASSERT_TRUE(meta.has_attr("loss_scale")) << "an fp16 checkpoint keeps the loss scale";
    EXPECT_EQ(meta.attr_double("loss_scale"), scale.back());
    EXPECT_GE(meta.attr_int("loss_scale_finite_in_row") + meta.attr_int("skipped_steps"), 1);  // 3 steps counted
  }
  GpuRun b("fp16", {{"precision", "fp16"}, {"resume", "auto"}});
  const TrainSummary sb = b.go();
  const std::vector<double> after = b.metric("/step/loss_scale"), want = full.metric("/step/loss_scale");
  ASSERT_EQ(after.size(), 8u);
  EXPECT_EQ(after, want) << "the resumed run's loss scale follows the uninterrupted run's";
  EXPECT_EQ(b.metric("/step/skipped_steps"), full.metric("/step/skipped_steps"));
  const std::vector<double> la = b.metric("/step/loss"), lf = full.metric("/step/loss");
  ASSERT_EQ(la.size(), lf.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(std::memcmp(&la[i], &lf[i], sizeof(double)), 0) << "step " << i + 1;
  H5File fa = H5File::open(sb.last_checkpoint), ff = H5File::open(sf.last_checkpoint);
  EXPECT_EQ(fa.open_group("/meta").attr_int("loss_scale_finite_in_row"),
            ff.open_group("/meta").attr_int("loss_scale_finite_in_row"));
}

}  // namespace
}  // namespace sm
