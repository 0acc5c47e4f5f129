// test_gpu_graph.cpp — --cuda-graphs (train/graph_step_cuda.h). GPU tests (*Gpu*, skipped
// without a GPU): N training steps with graphs on and off, from the same set-up, batches and
// per-step lr, must give bitwise the same losses, correct counts and parameters — fp32 and
// bf16, a model with batch norm (fmnist_csnn), one with dropout and batch norm
// (cifar10dvs_vgg at T 2), Spikformer at 32 px; several batches in turn (a replay must pick
// up each new batch); a short batch runs eagerly; `on` with PLIF is a one-line error. CPU
// tests: the flag, the auto rule, the CPU refusal of `on`, and that a CPU run ignores auto.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/graph_step_cuda.h"
#include "spikemesh/train/run_setup.h"
#include "spikemesh/train/train_config.h"

namespace sm {
namespace {

// ---- CPU -------------------------------------------------------------------------------

TEST(CudaGraphFlag, ParsesAutoOnOffAndRejectsTheRest) {
  EXPECT_EQ(parse_cuda_graphs("auto"), CudaGraphMode::Auto);
  EXPECT_EQ(parse_cuda_graphs("on"), CudaGraphMode::On);
  EXPECT_EQ(parse_cuda_graphs("off"), CudaGraphMode::Off);
  try {
    parse_cuda_graphs("yes");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("--cuda-graphs must be auto, on or off, got 'yes'"), std::string::npos);
  }
}

TEST(CudaGraphFlag, OnWithDeviceCpuIsRefused) {
  EXPECT_NO_THROW(validate_cuda_graphs_flag("on", "cuda"));
  EXPECT_NO_THROW(validate_cuda_graphs_flag("on", "auto"));
  EXPECT_NO_THROW(validate_cuda_graphs_flag("auto", "cpu"));
  try {
    validate_cuda_graphs_flag("on", "cpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_STREQ(e.what(), "--cuda-graphs on needs a GPU, but --device is cpu");
  }
}

TEST(CudaGraphFlag, TrainConfigKeyIsValidated) {
  TrainConfig c;
  TrainConfigResolver r(c);
  c.data = "input/any.h5";  // validation needs a data set name
  EXPECT_EQ(c.cuda_graphs, "auto");
  r.set("cuda-graphs", "off", "test");
  EXPECT_EQ(c.cuda_graphs, "off");
  EXPECT_NO_THROW(validate_train_config(c));
  auto message = [&] {
    try {
      validate_train_config(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  c.cuda_graphs = "on";
  c.device = "cpu";
  EXPECT_EQ(message(), "--cuda-graphs on needs a GPU, but --device is cpu");
  c.cuda_graphs = "maybe";
  c.device = "auto";
  EXPECT_EQ(message(), "--cuda-graphs must be auto, on or off, got 'maybe'");
  EXPECT_NE(r.to_toml().find("cuda-graphs"), std::string::npos);
}

TEST(CudaGraphRule, AutoNeedsOneRankOneMicrobatchAndNoLossScaling) {
  GraphConditions ok{true, 1, DistMode::None, 1, false};
#ifdef SPIKEMESH_HAVE_CUDA
  EXPECT_EQ(cuda_graph_obstacle(ok), "");
  GraphConditions c = ok;
  c.cuda = false;
  EXPECT_EQ(cuda_graph_obstacle(c), "the run is on the CPU");
  c = ok, c.world_size = 2;
  EXPECT_NE(cuda_graph_obstacle(c).find("2 ranks"), std::string::npos);
  c = ok, c.distributed_mode = DistMode::Dp;
  EXPECT_EQ(cuda_graph_obstacle(c), "--distributed-mode dp");
  c = ok, c.microbatches = 4;
  EXPECT_NE(cuda_graph_obstacle(c).find("--grad-accum"), std::string::npos);
  c = ok, c.loss_scaling = true;
  EXPECT_NE(cuda_graph_obstacle(c).find("loss scaling"), std::string::npos);
#else
  EXPECT_EQ(cuda_graph_obstacle(ok), "this build has no CUDA support");
#endif
}

TEST(CudaGraphRule, OnWithAnObstacleIsAOneLineErrorAndAutoStaysEager) {
  const GraphConditions cpu{false, 1, DistMode::None, 1, false};
  try {
    CudaGraphStep g(CudaGraphMode::On, cpu);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("--cuda-graphs on: ", 0), 0u) << e.what();
  }
  CudaGraphStep a(CudaGraphMode::Auto, cpu);
  EXPECT_FALSE(a.enabled());
  EXPECT_EQ(a.describe().rfind("off (", 0), 0u);
  CudaGraphStep off(CudaGraphMode::Off, GraphConditions{true, 1, DistMode::None, 1, false});
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.describe(), "off (--cuda-graphs off)");
}

// A CPU run through CudaGraphStep (auto) is train_step itself: bitwise the same trajectory.
TEST(CudaGraphRule, CpuStepsThroughTheDriverAreTrainStep) {
  auto run = [](bool driver) {
    RunRequest req;
    req.model.model = "fmnist_csnn";
    req.model.vars = {"C=2"};
    req.model.T = 2;
    req.device = "cpu";
    req.threads = 1;
    req.optimizer.name = "adam";
    req.optimizer.lr = 1e-2;
    RunParts parts = setup_run(req, nullptr);
    CudaGraphStep g(CudaGraphMode::Auto, GraphConditions{false, 1, DistMode::None, 1, false});
    CounterRng rng(3, "test/x");
    Tensor x = Tensor::empty({2, 2, 1, 28, 28}, DType::F32), y = Tensor::empty({2}, DType::I64);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rng.normal(i));
    y.data<int64_t>()[0] = 3, y.data<int64_t>()[1] = 7;
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) {
      Ctx ctx;
      ctx.step = s;
      std::vector<MicroBatch> mb{MicroBatch{x, y, 0}};
      const StepResult r = driver ? g.step(*parts.layout, *parts.optimizer, mb, ctx)
                                  : train_step(*parts.layout, *parts.optimizer, mb, ctx);
      losses.push_back(r.loss);
    }
    return losses;
  };
  const std::vector<double> a = run(true), b = run(false);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0);
}

// ---- GPU -------------------------------------------------------------------------------

struct Trajectory {
  std::vector<double> losses;
  std::vector<int64_t> correct;
  std::vector<std::vector<uint8_t>> params;  // every optimizer parameter's bytes after the run
  int64_t replays = 0;
  std::string described;
};

struct GraphRun {
  std::string model;
  std::vector<std::string> vars;
  int T = 2;
  int64_t batch = 2;
  std::string precision = "fp32";
  int steps = 6;
  int batches = 3;          // distinct batches used in turn
  bool short_last = false;  // the last step's batch has one sample fewer
};

Trajectory train(const GraphRun& g, CudaGraphMode mode) {
  RunRequest req;
  req.model.model = g.model;
  req.model.vars = g.vars;
  req.model.T = g.T;
  req.precision = g.precision;
  req.device = "cuda";
  req.seed = 5;
  req.optimizer.name = "adam";
  req.optimizer.lr = 1e-3;
  RunParts parts = setup_run(req, nullptr);
  const ModelInfo& mi = parts.model->info;
  CudaGraphStep graphs(mode, GraphConditions{true, 1, DistMode::None, 1, parts.scaler.enabled()});
  std::vector<MicroBatch> data;
  for (int b = 0; b < g.batches + 1; ++b) {  // the extra one: a short batch
    const int64_t n = b == g.batches ? g.batch - 1 : g.batch;
    Shape xs = {g.T, n};
    xs.insert(xs.end(), mi.input_shape.begin(), mi.input_shape.end());
    Tensor x = Tensor::empty(xs, DType::F32), y = Tensor::empty({n}, DType::I64);
    CounterRng rx(11 + b, "graph/x");
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(rx.normal(i));
    for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = (b * 3 + i) % mi.num_classes;
    data.push_back(MicroBatch{x.to(parts.device).to_dtype(parts.activations), y.to(parts.device), 0});
  }
  Trajectory t;
  for (int s = 0; s < g.steps; ++s) {
    Ctx ctx;
    ctx.seed = 9;
    ctx.step = s;
    parts.optimizer->set_lr(1e-3 * (1.0 + 0.5 * s));  // a schedule: the optimizer reads it eagerly
    const bool short_one = g.short_last && s + 1 == g.steps;
    std::vector<MicroBatch> mb{data[short_one ? g.batches : s % g.batches]};
    const StepResult r = graphs.step(*parts.layout, *parts.optimizer, mb, ctx);
    t.losses.push_back(r.loss);
    t.correct.push_back(r.correct);
  }
  for (Param* p : parts.layout->optimizer_params()) {
    const Tensor h = p->value.to(Device::cpu());
    const uint8_t* b = static_cast<const uint8_t*>(h.raw());
    t.params.emplace_back(b, b + h.nbytes());
  }
  t.replays = graphs.replays();
  t.described = graphs.describe();
  return t;
}

void expect_bitwise_same(const GraphRun& g) {
  const Trajectory eager = train(g, CudaGraphMode::Off), graph = train(g, CudaGraphMode::On);
  EXPECT_GT(graph.replays, 0) << graph.described;
  EXPECT_EQ(eager.replays, 0);
  ASSERT_EQ(eager.losses.size(), graph.losses.size());
  for (size_t s = 0; s < eager.losses.size(); ++s) {
    EXPECT_EQ(std::memcmp(&eager.losses[s], &graph.losses[s], sizeof(double)), 0)
        << "step " << s << ": eager " << eager.losses[s] << ", graph " << graph.losses[s];
    EXPECT_EQ(eager.correct[s], graph.correct[s]) << "step " << s;
  }
  ASSERT_EQ(eager.params.size(), graph.params.size());
  for (size_t k = 0; k < eager.params.size(); ++k) EXPECT_TRUE(eager.params[k] == graph.params[k]) << "param " << k;
  // The replays read each new batch: the same run over its first batch alone ends elsewhere.
  // (Compared on the parameters: a tiny model's loss can be the same for every batch — no
  // output spike, MSE against one-hot = 1/K — while its surrogate gradients differ.)
  GraphRun one = g;
  one.batches = 1;
  one.short_last = false;
  const Trajectory first_only = train(one, CudaGraphMode::On);
  EXPECT_GT(first_only.replays, 0) << first_only.described;
  EXPECT_FALSE(first_only.params == graph.params) << "the graph replays ignore the new batches";
}

TEST(GpuCudaGraph, FmnistCsnnWithBatchNormF32IsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  expect_bitwise_same(GraphRun{"fmnist_csnn", {"C=4"}, 2, 2, "fp32", 6, 3, false});
}

TEST(GpuCudaGraph, FmnistCsnnBf16IsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  expect_bitwise_same(GraphRun{"fmnist_csnn", {"C=4"}, 2, 2, "bf16", 6, 3, false});
}

TEST(GpuCudaGraph, Cifar10DvsVggWithDropoutIsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  expect_bitwise_same(GraphRun{"cifar10dvs_vgg", {}, 2, 2, "fp32", 5, 2, false});
}

TEST(GpuCudaGraph, Cifar10DvsVggBf16IsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  expect_bitwise_same(GraphRun{"cifar10dvs_vgg", {}, 2, 2, "bf16", 5, 2, false});
}

TEST(GpuCudaGraph, SpikformerSmallIsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  expect_bitwise_same(
      GraphRun{"spikformer_ti", {"image_size=32", "E=32", "heads=2", "depth=1", "num_classes=10"}, 2, 2, "fp32", 5, 2,
               false});
}

TEST(GpuCudaGraph, AShortBatchRunsEagerlyAndStaysBitwiseEager) {
  SKIP_WITHOUT_GPU();
  expect_bitwise_same(GraphRun{"fmnist_csnn", {"C=4"}, 2, 3, "fp32", 6, 2, true});
}

TEST(GpuCudaGraph, OnWithPlifIsAOneLineErrorAndAutoFallsBack) {
  SKIP_WITHOUT_GPU();
  char dir[] = "/tmp/sm_graph_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string spec = std::string(dir) + "/plif.toml";
  std::ofstream(spec) << R"TOML([model]
name = "tiny_plif"
input = [1, 4, 4]
num_classes = 10
T = 2
loss = "mean_ce"
input_kind = "static"

[neurons.p]
type = "plif"
tau = 2.0

[[unit]]
name = "fc"
layers = [
  { type = "flatten" },
  { type = "linear", in_features = 16, out_features = 10 },
  { type = "neuron", neuron = "p" },
]
)TOML";
  auto run = [&](CudaGraphMode mode) {
    RunRequest req;
    req.model.spec = spec;
    req.device = "cuda";
    RunParts parts = setup_run(req, nullptr);
    CudaGraphStep graphs(mode, GraphConditions{true, 1, DistMode::None, 1, false});
    Tensor x = Tensor::zeros({2, 2, 1, 4, 4}, DType::F32, parts.device), y = Tensor::zeros({2}, DType::I64, parts.device);
    for (int s = 0; s < 4; ++s) {
      Ctx ctx;
      ctx.step = s;
      graphs.step(*parts.layout, *parts.optimizer, {MicroBatch{x, y, 0}}, ctx);
    }
    return graphs.describe();
  };
  try {
    run(CudaGraphMode::On);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("--cuda-graphs on: the step cannot be captured: plif"), std::string::npos) << m;
  }
  const std::string described = run(CudaGraphMode::Auto);
  EXPECT_NE(described.find("off (plif"), std::string::npos) << described;
  std::remove(spec.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace sm
