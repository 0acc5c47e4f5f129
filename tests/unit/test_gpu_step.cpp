// test_gpu_step.cpp — whole training steps on the GPU against the CPU (the reference): both
// built-in model families (fmnist_csnn at C = 4; a CIFAR10-DVS VGG of the built-in's exact
// structure at small width/size through spec variables, and the built-in itself at T = 1)
// run forward, loss and backward from the same initial weights on the same batch; the loss,
// the output and every parameter gradient must agree (f32). Then 20 optimizer steps on
// synthetic DVS events (data/importers.h make_synth_dvs) in bf16 must converge like f32.
// Skipped without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "gpu_test_util.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/importers.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/models/spec_loader.h"
#include "spikemesh/optim/optimizer.h"
#include "spikemesh/optim/optimizer_cuda.h"

namespace sm {
namespace {

using gputest::gpu;
using gputest::rel_err;
using gputest::rel_l2;

// The CIFAR10-DVS VGG of input/models/cifar10dvs_vgg.toml (same units, layers, neuron,
// init, names), width C·{1,2,4,4,8,8,8,8} and input S×S (S divisible by 16).
const char* kSmallVgg = R"TOML([model]
name = "small_vgg"
input = [2, "S", "S"]
num_classes = 10
T = 2
loss = "mean_ce"
input_kind = "events"

[vars]
C = 4
S = 16

[neurons.vgg_lif]
type = "lif"
tau = 1.333
decay_input = false
v_threshold = 1.0
v_reset = 0.0
detach_reset = true
surrogate = "atan"
alpha = 2.0

[[unit]]
name = "features.0"
layers = [
  { type = "conv2d", name = "proj_bn.0", in_channels = 2, out_channels = "C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.1", num_features = "C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.1"
layers = [
  { type = "conv2d", name = "proj_bn.0", in_channels = "C", out_channels = "2*C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.1", num_features = "2*C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.2"
layers = [
  { type = "avgpool2d", name = "proj_bn.0", kernel_size = 2 },
  { type = "conv2d", name = "proj_bn.1", in_channels = "2*C", out_channels = "4*C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.2", num_features = "4*C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.3"
layers = [
  { type = "conv2d", name = "proj_bn.0", in_channels = "4*C", out_channels = "4*C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.1", num_features = "4*C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.4"
layers = [
  { type = "avgpool2d", name = "proj_bn.0", kernel_size = 2 },
  { type = "conv2d", name = "proj_bn.1", in_channels = "4*C", out_channels = "8*C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.2", num_features = "8*C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.5"
layers = [
  { type = "conv2d", name = "proj_bn.0", in_channels = "8*C", out_channels = "8*C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.1", num_features = "8*C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.6"
layers = [
  { type = "avgpool2d", name = "proj_bn.0", kernel_size = 2 },
  { type = "conv2d", name = "proj_bn.1", in_channels = "8*C", out_channels = "8*C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.2", num_features = "8*C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.7"
layers = [
  { type = "conv2d", name = "proj_bn.0", in_channels = "8*C", out_channels = "8*C", kernel_size = 3, padding = 1, init = "kaiming_normal_fan_out" },
  { type = "batchnorm2d", name = "proj_bn.1", num_features = "8*C" },
  { type = "neuron", name = "neuron", neuron = "vgg_lif" },
]
[[unit]]
name = "features.8"
layers = [ { type = "avgpool2d", name = "", kernel_size = 2 } ]
[[unit]]
name = "classifier"
layers = [
  { type = "flatten", name = "flatten" },
  { type = "dropout", p = 0.25 },
  { type = "linear", in_features = "8*C*(S/16)*(S/16)", out_features = 10 },
]
)TOML";

std::string small_vgg_path() {
  static const std::string path = [] {
    std::string p = ::testing::TempDir() + "sm_gpu_small_vgg_" + std::to_string(getpid()) + ".toml";
    std::ofstream(p) << kSmallVgg;
    return p;
  }();
  return path;
}

struct StepOut {
  Tensor out;                 // [T, N, K] model output (host f32)
  LossResult loss;
  std::vector<Tensor> grads;  // host copies, params() order
  std::vector<std::string> names;
};

// reset, zero_grad, forward (training), loss, backward: no optimizer step.
StepOut run_step(Model& m, const Tensor& x, const Tensor& y, uint64_t step = 0) {
  Ctx ctx;
  ctx.seed = 7;
  ctx.step = static_cast<int64_t>(step);
  ctx.training = true;
  m.reset_state();
  m.zero_grad();
  StepOut r;
  Tensor out = m.forward(x, ctx);
  r.loss = m.loss->forward(out, y);
  m.backward(m.loss->backward(1.0), ctx);
  r.out = gputest::host_f64(out).to_dtype(DType::F32);
  for (Param* p : m.params()) {
    r.grads.push_back(gputest::host_f64(p->grad));
    r.names.push_back(p->name);
  }
  return r;
}

// The same model on the CPU and on the GPU (f32), one step on the same batch.
void compare_whole_step(const std::function<std::unique_ptr<Model>()>& build, const Tensor& x, const Tensor& y,
                        double grad_tol, const std::string& what) {
  auto mc = build(), mg = build();
  mc->finalize(DType::F32, Device::cpu(), 17);
  mg->finalize(DType::F32, gpu(), 17);  // the loss runs on the device
  const StepOut c = run_step(*mc, x, y);
  const StepOut g = run_step(*mg, x.to(gpu()), y.to(gpu()));
  EXPECT_NEAR(g.loss.loss, c.loss.loss, 1e-5 * (1 + std::fabs(c.loss.loss))) << what;
  EXPECT_EQ(g.loss.correct, c.loss.correct) << what;
  EXPECT_LE(rel_l2(g.out, c.out), 1e-4) << what << ": model output";
  ASSERT_EQ(g.grads.size(), c.grads.size());
  double largest = 0.0;
  for (const Tensor& t : c.grads) largest = std::max(largest, gputest::norm_l2(t));
  for (size_t k = 0; k < c.grads.size(); ++k) {
    EXPECT_EQ(g.names[k], c.names[k]);
    EXPECT_LE(gputest::grad_rel_l2(g.grads[k], c.grads[k], largest), grad_tol)
        << what << ": grad of " << c.names[k] << " (|ref| " << gputest::norm_l2(c.grads[k]) << ", |gpu| "
        << gputest::norm_l2(g.grads[k]) << ", largest " << largest << ")";
  }
  // The GPU run's statistics (firing rates) are reported like the CPU's.
  const auto sc = mc->stats(), sg = mg->stats();
  ASSERT_EQ(sg.size(), sc.size()) << what;
  for (size_t i = 0; i < sc.size(); ++i) {
    EXPECT_EQ(sg[i].layer, sc[i].layer);
    EXPECT_NEAR(sg[i].value, sc[i].value, 1e-3) << what << ": " << sc[i].layer;
  }
}

TEST(GpuStep, FmnistCsnnMatchesCpu) {
  SKIP_WITHOUT_GPU();
  ModelOverrides ov;
  ov.vars["C"] = 4;
  ov.T = 3;
  const int T = 3, N = 4;
  const Tensor x = gputest::random_input({T, N, 1, 28, 28}, 31, false, 0.0, 1.0);
  Tensor y = Tensor::empty({N}, DType::I64);
  for (int i = 0; i < N; ++i) y.data<int64_t>()[i] = (7 * i + 2) % 10;
  compare_whole_step([&] { return load_builtin_model("fmnist_csnn", ov); }, x, y, 1e-3, "fmnist_csnn C=4");
}

TEST(GpuStep, SmallCifar10DvsVggMatchesCpu) {
  SKIP_WITHOUT_GPU();
  ModelOverrides ov;
  ov.vars["C"] = 4;
  ov.vars["S"] = 16;
  const int T = 2, N = 3;
  const Tensor x = gputest::random_input({T, N, 2, 16, 16}, 32, false, 0.0, 3.0);
  Tensor y = Tensor::empty({N}, DType::I64);
  for (int i = 0; i < N; ++i) y.data<int64_t>()[i] = (3 * i + 1) % 10;
  compare_whole_step([&] { return load_model_spec(small_vgg_path(), ov); }, x, y, 1e-3, "small VGG");
}

TEST(GpuStep, BuiltinCifar10DvsVggMatchesCpu) {
  SKIP_WITHOUT_GPU();
  ModelOverrides ov;
  ov.T = 1;
  const int T = 1, N = 2;
  const Tensor x = gputest::random_input({T, N, 2, 48, 48}, 33, false, 0.0, 3.0);
  Tensor y = Tensor::empty({N}, DType::I64);
  y.data<int64_t>()[0] = 4;
  y.data<int64_t>()[1] = 9;
  // Full width: a few spikes may sit within rounding of the threshold; gradients in norm.
  compare_whole_step([&] { return load_builtin_model("cifar10dvs_vgg", ov); }, x, y, 5e-3, "cifar10dvs_vgg T=1");
}

// ---- bf16 converges like f32 -------------------------------------------------------------

struct SynthData {
  Tensor x;  // [T, n, 2, S, S] f32 (host)
  Tensor y;  // [n] i64
};

// synth-dvs events (make_synth_dvs), transposed from the file's [n, T, ...] to [T, n, ...].
SynthData synth_dvs(int T, int S, int64_t n) {
  SynthDvsConfig c;
  c.T = T;
  c.size = S;
  c.train = n;
  c.test = 10;
  c.seed = 3;
  const std::string path = ::testing::TempDir() + "sm_gpu_synth_" + std::to_string(getpid()) + ".h5";
  make_synth_dvs(c, path);
  H5Dataset ds = H5Dataset::open(path);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  Tensor xs, ys;
  ds.read(Split::Train, idx, xs, ys);  // [n, T, 2, S, S]
  std::remove(path.c_str());
  SynthData d;
  const int64_t per = xs.numel() / (n * T);
  d.x = Tensor::empty({T, n, 2, S, S}, DType::F32);
  for (int64_t i = 0; i < n; ++i)
    for (int t = 0; t < T; ++t)
      std::copy_n(xs.data<float>() + (i * T + t) * per, per, d.x.data<float>() + (t * n + i) * per);
  d.y = ys;
  return d;
}

// Losses of `steps` Adam steps on batches cycling through the data, on `dev` at `p`.
std::vector<double> train_losses(const SynthData& d, const Device& dev, Precision p, int steps, int64_t batch,
                                 int64_t* skipped = nullptr) {
  ModelOverrides ov;
  ov.vars["C"] = 4;
  ov.vars["S"] = 16;
  ov.T = static_cast<int>(d.x.dim(0));
  ov.dropout = 0.0;
  auto m = load_model_spec(small_vgg_path(), ov);
  m->finalize(master_dtype(p), dev, 5);
  OptimizerConfig oc;
  oc.name = "adam";
  oc.lr = 2e-2;
  std::unique_ptr<Optimizer> opt;
  if (dev.is_cuda()) {
    opt = make_optimizer_cuda(oc, m->params());
  } else {
    opt = make_optimizer(oc, m->params());
  }
  LossScaler scaler = LossScaler::for_precision(p);
  const int64_t n = d.x.dim(1), T = d.x.dim(0), per = d.x.numel() / (T * n);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const int64_t b0 = (s * batch) % n;
    Tensor xb = Tensor::empty({T, batch, 2, d.x.dim(3), d.x.dim(4)}, DType::F32);
    Tensor yb = Tensor::empty({batch}, DType::I64);
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t src = (b0 + i) % n;
      yb.data<int64_t>()[i] = d.y.data<int64_t>()[src];
      for (int64_t t = 0; t < T; ++t)
        std::copy_n(d.x.data<float>() + (t * n + src) * per, per, xb.data<float>() + (t * batch + i) * per);
    }
    if (dev.is_cuda()) {
      xb = xb.to(dev).to_dtype(activation_dtype(p));
      yb = yb.to(dev);
    }
    Ctx ctx;
    ctx.step = s;
    m->reset_state();
    m->zero_grad();
    Tensor out = m->forward(xb, ctx);
    losses.push_back(m->loss->forward(out, yb).loss);
    m->backward(m->loss->backward(scaler.scale()), ctx);
    std::vector<Tensor*> grads;
    for (auto& u : m->units)
      if (u->flat_grad().defined()) grads.push_back(&u->flat_grad());
    const bool finite = scaler.unscale_and_check(grads);
    if (finite) opt->step();
    scaler.update(finite);
  }
  if (skipped) *skipped = scaler.skipped_steps();
  return losses;
}

double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0.0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

std::string show(const std::vector<double>& v) {
  std::ostringstream os;
  for (double e : v) os << e << " ";
  return os.str();
}

// The CPU f32 run that fixed the thresholds below (not run by default: slow on a CPU).
TEST(GpuStep, DISABLED_SynthDvsF32ReferenceOnCpu) {
  const SynthData d = synth_dvs(4, 16, 64);
  const std::vector<double> l = train_losses(d, Device::cpu(), Precision::FP32, 20, 16);
  std::printf("cpu f32 losses: %s\n", show(l).c_str());
  EXPECT_LT(mean_of(l, 15, 20), 0.8 * mean_of(l, 0, 5)) << show(l);
}

TEST(GpuStep, Bf16AndFp16TrainingConvergeLikeF32OnSynthDvs) {
  SKIP_WITHOUT_GPU();
  const SynthData d = synth_dvs(4, 16, 64);
  const int steps = 20;
  // CPU f32 (DISABLED_SynthDvsF32ReferenceOnCpu): 2.34 2.23 2.27 2.32 2.15 ... 1.44 1.22 1.34 1.28,
  // i.e. the mean of the last 5 losses is 0.61 of the first 5.
  const std::vector<double> f32 = train_losses(d, gpu(), Precision::FP32, steps, 16);
  const double start = mean_of(f32, 0, 5), end = mean_of(f32, steps - 5, steps);
  EXPECT_LT(end, 0.8 * start) << "f32 does not learn: " << show(f32);
  // bf16: learns as much as f32 (the trajectories differ: spikes are thresholds).
  const std::vector<double> bf16 = train_losses(d, gpu(), Precision::BF16, steps, 16);
  const double bf16_end = mean_of(bf16, steps - 5, steps);
  EXPECT_LT(bf16_end, 0.8 * mean_of(bf16, 0, 5)) << "bf16 does not learn: " << show(bf16);
  EXPECT_NEAR(bf16_end, end, 0.15 * start) << "bf16 " << show(bf16) << " vs f32 " << show(f32);
  EXPECT_NEAR(bf16[0], f32[0], 0.02 * f32[0]) << "first loss";
  // fp16 with dynamic loss scaling: a few skipped steps at most, then it learns too.
  int64_t skipped = 0;
  const std::vector<double> fp16 = train_losses(d, gpu(), Precision::FP16, steps, 16, &skipped);
  EXPECT_LE(skipped, 5) << show(fp16);
  EXPECT_LT(mean_of(fp16, steps - 5, steps), 0.9 * mean_of(fp16, 0, 5)) << "fp16 does not learn: " << show(fp16)
                                                                          << " (" << skipped << " skipped)";
  EXPECT_NEAR(fp16[0], f32[0], 0.02 * f32[0]) << "first loss";
}

}  // namespace
}  // namespace sm
