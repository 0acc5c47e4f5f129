// test_gpu_graph.cpp — --cuda-graphs (train/graph_step_cuda.h). GPU tests (*Gpu*, skipped
// without a GPU): N training steps with graphs on and off, from the same set-up, batches and
// per-step lr, must give bitwise the same losses, correct counts and parameters — fp32 and
// bf16, a model with batch norm (fmnist_csnn), one with dropout and batch norm
// (cifar10dvs_vgg at T 2), Spikformer at 32 px; several batches in turn (a replay must pick
// up each new batch); a short batch runs eagerly; `on` with PLIF is a one-line error; the
// optimizer update (SGD with momentum, Adam, AdamW) and clipping inside the graph, with the
// learning rate changing every step, give the eager trajectory and gradient norms bitwise.
// CPU tests: the flag, the auto rule and the captured-update rule, the CPU refusal of `on`,
// and that a CPU run ignores auto.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/graph_step_cuda.h"
#include "spikemesh/optim/optimizer.h"
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

TEST(CudaGraphRule, AutoNeedsOneRankNoLossScalingNoMemopt) {
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
  c = ok, c.microbatches = 4;  // one micro-batch graph replayed per micro-batch
  EXPECT_EQ(cuda_graph_obstacle(c), "");
  c = ok, c.memopt = true;
  EXPECT_NE(cuda_graph_obstacle(c).find("memopt"), std::string::npos);
  c = ok, c.loss_scaling = true;
  EXPECT_NE(cuda_graph_obstacle(c).find("loss scaling"), std::string::npos);
#else
  EXPECT_EQ(cuda_graph_obstacle(ok), "this build has no CUDA support");
#endif
}

TEST(CudaGraphRule, TheUpdateJoinsTheGraphWhenItsStepLivesOnTheDevice) {
  EXPECT_EQ(captured_update_obstacle(UpdateConditions{true, false, false}), "");
  EXPECT_EQ(captured_update_obstacle(UpdateConditions{false, false, false}),
            "the optimizer reads its step on the host");
  EXPECT_EQ(captured_update_obstacle(UpdateConditions{true, true, false}),
            "the gradient norm is all-reduced over ranks");
  EXPECT_NE(captured_update_obstacle(UpdateConditions{true, false, true}).find("loss scaling"), std::string::npos);
}

TEST(CudaGraphRule, CpuOptimizersHaveNoDeviceResidentStep) {
  Param p;
  p.name = p.local_name = "w";
  p.shape = p.local_shape = {2};
  p.value = Tensor::zeros({2}, DType::F32);
  p.grad = Tensor::zeros({2}, DType::F32);
  for (const char* name : {"sgd", "adam", "adamw"}) {
    OptimizerConfig cfg;
    cfg.name = name;
    auto opt = make_optimizer(cfg, {&p});
    EXPECT_FALSE(opt->supports_captured_update()) << name;
    EXPECT_THROW(opt->stage_step(), Error) << name;
    EXPECT_THROW(opt->enqueue_update(nullptr), Error) << name;
  }
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
    RunParts parts = (req.layout = plan_layout(LayoutOptions{}, MeshShape{}, 1, 0), setup_run(req, nullptr));
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
  std::vector<double> losses, grad_norms;
  std::vector<int64_t> correct;
  std::vector<std::vector<uint8_t>> params;  // every optimizer parameter's bytes after the run
  int64_t replays = 0;
  bool update_in_graph = false;
  std::string described;
};

struct GraphRun {
  GraphRun(std::string model_name, std::vector<std::string> model_vars, int steps_T, int64_t batch_size,
           std::string prec, int n_steps, int n_batches, bool short_last_batch)
      : model(std::move(model_name)), vars(std::move(model_vars)), T(steps_T), batch(batch_size),
        precision(std::move(prec)), steps(n_steps), batches(n_batches), short_last(short_last_batch) {}
  std::string model;
  std::vector<std::string> vars;
  int T = 2;
  int64_t batch = 2;
  std::string precision = "fp32";
  int steps = 6;
  int batches = 3;          // distinct batches used in turn
  bool short_last = false;  // the last step's batch has one sample fewer
  std::string optimizer = "adam";
  double clip_norm = 0.0;   // 0: no clipping
  int micro = 1;            // micro-batches per step (gradient accumulation)
  std::string spec;         // a model spec file instead of `model`
};

Trajectory train(const GraphRun& g, CudaGraphMode mode) {
  RunRequest req;
  if (g.spec.empty()) {
    req.model.model = g.model;
    req.model.vars = g.vars;
  } else {
    req.model.spec = g.spec;
  }
  req.model.T = g.T;
  req.precision = g.precision;
  req.device = "cuda";
  req.seed = 5;
  req.optimizer.name = g.optimizer;
  req.optimizer.lr = 1e-3;
  req.optimizer.weight_decay = g.optimizer == "adam" ? 0.0 : 1e-2;
  req.optimizer.momentum = 0.9;
  RunParts parts = (req.layout = plan_layout(LayoutOptions{}, MeshShape{}, 1, 0), setup_run(req, nullptr));
  const ModelInfo& mi = parts.model->info;
  CudaGraphStep graphs(mode, GraphConditions{true, 1, DistMode::None, g.micro, parts.scaler.enabled()});
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
    parts.optimizer->set_lr(1e-3 * (1.0 + 0.5 * s));  // a schedule: read from device memory in the graph
    const bool short_one = g.short_last && s + 1 == g.steps;
    std::vector<MicroBatch> mb;
    for (int m = 0; m < g.micro; ++m) {  // micro-batch m holds samples [m·batch, (m+1)·batch) of the step
      MicroBatch b = data[short_one ? g.batches : (s * g.micro + m) % g.batches];
      b.sample_offset = m * g.batch;
      mb.push_back(b);
    }
    const StepResult r = graphs.step(*parts.layout, *parts.optimizer, mb, ctx, StepOptions{g.clip_norm, nullptr});
    t.losses.push_back(r.loss);
    t.grad_norms.push_back(r.grad_norm);
    t.correct.push_back(r.correct);
  }
  for (Param* p : parts.layout->optimizer_params()) {
    const Tensor h = p->value.to(Device::cpu());
    const uint8_t* b = static_cast<const uint8_t*>(h.raw());
    t.params.emplace_back(b, b + h.nbytes());
  }
  t.replays = graphs.replays();
  t.update_in_graph = graphs.update_in_graph();
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
    EXPECT_EQ(std::memcmp(&eager.grad_norms[s], &graph.grad_norms[s], sizeof(double)), 0)
        << "step " << s << ": eager norm " << eager.grad_norms[s] << ", graph " << graph.grad_norms[s];
  }
  EXPECT_TRUE(graph.update_in_graph) << "the optimizer update was not captured";
  if (g.clip_norm > 0) {
    EXPECT_GT(graph.grad_norms.back(), 0.0);
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

// The update inside the graph: SGD with Nesterov momentum and weight decay, AdamW, with and
// without clipping (a clip norm small enough to act on every step), the lr changing per step.
TEST(GpuCudaGraph, SgdUpdateWithClippingInTheGraphIsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  GraphRun g{"fmnist_csnn", {"C=4"}, 2, 2, "fp32", 6, 3, false};
  g.optimizer = "sgd";
  g.clip_norm = 0.05;
  expect_bitwise_same(g);
}

TEST(GpuCudaGraph, AdamWUpdateWithClippingInTheGraphIsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  GraphRun g{"cifar10dvs_vgg", {}, 2, 2, "fp32", 5, 2, false};
  g.optimizer = "adamw";
  g.clip_norm = 1e-3;
  expect_bitwise_same(g);
}

TEST(GpuCudaGraph, AdamUpdateWithAnInactiveClipInTheGraphIsBitwiseEager) {
  SKIP_WITHOUT_GPU();
  GraphRun g{"fmnist_csnn", {"C=4"}, 2, 2, "bf16", 5, 2, false};
  g.clip_norm = 1e9;  // the norm computed and reported, the factor never acting
  expect_bitwise_same(g);
}

// A spec without batch norm, with dropout between two LIF layers (its mask depends on the
// micro-batch's sample offset), written to a temporary file.
struct DropoutSpec {
  char dir[32] = "/tmp/sm_graph_XXXXXX";
  std::string path;
  DropoutSpec() {
    EXPECT_NE(mkdtemp(dir), nullptr);
    path = std::string(dir) + "/drop.toml";
    std::ofstream(path) << R"TOML([model]
name = "tiny_dropout"
input = [1, 4, 4]
num_classes = 10
T = 2
loss = "mean_ce"
input_kind = "static"

[neurons.n]
type = "lif"
tau = 2.0

[[unit]]
name = "fc"
layers = [
  { type = "flatten" },
  { type = "linear", in_features = 16, out_features = 32 },
  { type = "neuron", neuron = "n" },
  { type = "dropout", p = 0.3 },
  { type = "linear", in_features = 32, out_features = 10 },
  { type = "neuron", neuron = "n" },
]
)TOML";
  }
  ~DropoutSpec() {
    std::remove(path.c_str());
    rmdir(dir);
  }
};

// Gradient accumulation: one micro-batch graph replayed per micro-batch (dropout reading each
// one's sample offset from device memory), the update graph after the last.
TEST(GpuCudaGraph, GradientAccumulationReplaysTheMicrobatchGraphBitwiseEager) {
  SKIP_WITHOUT_GPU();
  DropoutSpec spec;
  for (const char* opt : {"sgd", "adamw"}) {
    SCOPED_TRACE(opt);
    GraphRun g{"", {}, 2, 3, "fp32", 6, 4, false};
    g.spec = spec.path;
    g.micro = 3;
    g.optimizer = opt;
    g.clip_norm = 0.05;
    expect_bitwise_same(g);
  }
  GraphRun one{"", {}, 2, 3, "fp32", 6, 4, false};  // and with one micro-batch, through the device offset
  one.spec = spec.path;
  expect_bitwise_same(one);
}

// With batch norm: either batch norm keeps no per-micro-batch host decision and the replays
// are bitwise eager, or the capture is refused naming --grad-accum (`on`: one line; `auto`:
// eager, bitwise).
TEST(GpuCudaGraph, GradientAccumulationWithBatchNormIsBitwiseEagerOrRefusedInOneLine) {
  SKIP_WITHOUT_GPU();
  GraphRun g{"fmnist_csnn", {"C=4"}, 2, 2, "fp32", 5, 3, false};
  g.micro = 2;
  const Trajectory eager = train(g, CudaGraphMode::Off), automatic = train(g, CudaGraphMode::Auto);
  EXPECT_TRUE(eager.params == automatic.params);
  ASSERT_EQ(eager.losses.size(), automatic.losses.size());
  for (size_t s = 0; s < eager.losses.size(); ++s)
    EXPECT_EQ(std::memcmp(&eager.losses[s], &automatic.losses[s], sizeof(double)), 0) << "step " << s;
  if (automatic.replays > 0) return;  // captured: the comparison above is the test
  EXPECT_NE(automatic.described.find("--grad-accum"), std::string::npos) << automatic.described;
  try {
    train(g, CudaGraphMode::On);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("--grad-accum"), std::string::npos) << m;
  }
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
    RunParts parts = (req.layout = plan_layout(LayoutOptions{}, MeshShape{}, 1, 0), setup_run(req, nullptr));
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
