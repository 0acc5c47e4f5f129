// test_gpu_layers.cpp — every non-GEMM layer's CUDA hooks against the CPU layer (the
// reference): BatchNorm (training with the output kept and with the input kept, eval),
// max/avg pooling (odd sizes, padding, spikes), LIF/PLIF/IF neurons (spikes bit-identical,
// membrane continuation across forwards, reset through the Unit, firing rate), dropout (the
// same mask as the CPU), residual blocks, flatten, the graph composite (channel split, adds,
// fan-out), and the device loss wrapper (microbatch slots included). f32 to 1e-5 relative,
// bf16 to 2e-2. Skipped without a GPU.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/dataflow_graph.h"
#include "spikemesh/layers/dropout.h"
#include "spikemesh/layers/flatten.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/sequential.h"
#include "spikemesh/layers/split_add_nodes.h"

namespace sm {
namespace {

using gputest::compare_layer;
using gputest::gpu;
using gputest::LayerCheck;
using gputest::make_units;
using gputest::rel_err;

std::function<LayerPtr()> bn_maker(int C, int dims) {
  return [=]() {
    BatchNormConfig c;
    c.num_features = C;
    c.spatial_dims = dims;
    return LayerPtr(std::make_unique<BatchNorm>(c));
  };
}

TEST(GpuBatchNorm, TrainingAndEvalMatchCpu) {
  SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;
    int dims;
  };
  for (const Case& c : {Case{{2, 3, 5, 7, 6}, 2}, Case{{1, 3, 3, 1, 1}, 2}, Case{{2, 4, 6}, 1}, Case{{3, 2, 4, 9}, 1}})
    for (DType dt : {DType::F32, DType::BF16})
      for (bool training : {true, false}) {
        auto u = make_units(bn_maker(static_cast<int>(c.x[2]), c.dims));
        LayerCheck chk;
        chk.gpu_dtype = dt;
        chk.tol = dt == DType::F32 ? 1e-5 : 2e-2;
        chk.training = training;
        chk.lo = 0.5;  // a mean away from zero
        chk.hi = 3.0;
        EXPECT_EQ(compare_layer(u, c.x, chk), "") << dtype_name(dt) << " bn x " << shape_str(c.x)
                                                   << (training ? " training" : " eval");
        // Running statistics moved identically.
        for (size_t b = 0; b < 2; ++b)
          EXPECT_LE(rel_err(u.gpu->buffers()[b]->value, u.cpu->buffers()[b]->value), 1e-6)
              << u.cpu->buffers()[b]->name;
        EXPECT_EQ(u.gpu->buffers()[2]->value.item(), u.cpu->buffers()[2]->value.item());  // num_batches_tracked
      }
}

TEST(GpuBatchNorm, KeepsTheInputWhenTheOutputCannotRecoverIt) {
  SKIP_WITHOUT_GPU();
  auto u = make_units(bn_maker(4, 2));
  // |β| > 8|γ| for one channel: the layer must keep its input (both devices decide alike).
  for (Unit* unit : {u.cpu.get(), u.gpu.get()}) {
    Tensor beta = Tensor::full({4}, 0.0, DType::F32);
    beta.data<float>()[2] = 100.0f;
    unit->params()[1]->value.copy_from(beta);
  }
  LayerCheck chk;
  EXPECT_EQ(compare_layer(u, {2, 2, 4, 5, 5}, chk), "");
}

TEST(GpuPool, MaxAndAvgMatchCpu) {
  SKIP_WITHOUT_GPU();
  struct Case {
    Shape x;
    PoolConfig p;
    bool max, binary;
  };
  const Case cases[] = {{{2, 3, 4, 8, 8}, {2, 2, 0}, true, false},  {{1, 2, 3, 7, 9}, {3, 2, 1}, true, false},
                        {{2, 2, 5, 6, 6}, {2, 2, 0}, true, true},   {{2, 3, 4, 8, 8}, {2, 2, 0}, false, false},
                        {{1, 2, 3, 7, 9}, {3, 2, 1}, false, false}, {{1, 1, 1, 2, 2}, {2, 2, 0}, false, true}};
  for (const Case& c : cases)
    for (DType dt : {DType::F32, DType::BF16}) {
      auto make = [c]() {
        return c.max ? LayerPtr(std::make_unique<MaxPool2d>(c.p)) : LayerPtr(std::make_unique<AvgPool2d>(c.p));
      };
      auto u = make_units(make);
      LayerCheck chk;
      chk.gpu_dtype = dt;
      chk.tol = dt == DType::F32 ? 1e-6 : 2e-2;
      chk.binary_input = c.binary;
      EXPECT_EQ(compare_layer(u, c.x, chk), "") << (c.max ? "max" : "avg") << " pool " << dtype_name(dt) << " x "
                                                 << shape_str(c.x) << " k" << c.p.kernel;
    }
}

std::function<LayerPtr()> neuron_maker(NeuronConfig c) {
  return [c]() { return LayerPtr(std::make_unique<Neuron>(c)); };
}

std::vector<NeuronConfig> neuron_configs() {
  NeuronConfig lif;  // CIFAR10-DVS VGG's LIF
  lif.tau = 1.333;
  lif.decay_input = false;
  lif.detach_reset = true;
  lif.surrogate = SurrogateKind::ATan;
  lif.alpha = 2.0;
  NeuronConfig plif;
  plif.kind = NeuronKind::PLIF;
  plif.tau = 2.0;
  NeuronConfig ifn;  // Fashion-MNIST CSNN's IF, plus a soft reset variant
  ifn.kind = NeuronKind::IF;
  ifn.surrogate = SurrogateKind::ATan;
  ifn.alpha = 2.0;
  NeuronConfig soft = ifn;
  soft.hard_reset = false;
  return {lif, plif, ifn, soft};
}

TEST(GpuNeuron, SpikesAndGradientsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const NeuronConfig& nc : neuron_configs())
    for (DType dt : {DType::F32, DType::BF16})
      for (bool binary : {false, true}) {
        auto u = make_units(neuron_maker(nc));
        LayerCheck chk;
        chk.gpu_dtype = dt;
        chk.tol = dt == DType::F32 ? 1e-5 : 2e-2;
        chk.binary_input = binary;
        chk.lo = -0.5;
        chk.hi = 2.0;
        EXPECT_EQ(compare_layer(u, {5, 3, 4, 7}, chk), "")
            << u.cpu->at(0).type() << " " << dtype_name(dt) << (binary ? " spikes in" : "");
        // Spikes are exactly equal (the GPU recomputes the CPU's f32 membrane bit for bit).
        Ctx ctx;
        u.cpu->reset_state();
        u.gpu->reset_state();
        Tensor x = gputest::random_input({5, 3, 4, 7}, 9, binary, -0.5, 2.0);
        const Tensor ref = u.cpu->forward(x.to_dtype(dt).to_dtype(DType::F32), ctx);
        const Tensor got = u.gpu->forward(x.to(gpu()).to_dtype(dt), ctx);
        EXPECT_TRUE(got.is_binary());
        EXPECT_EQ(rel_err(got, ref), 0.0) << u.cpu->at(0).type();
        // Firing rate reported for the GPU run too.
        std::vector<LayerStat> sc, sg;
        u.cpu->collect_stats(sc);
        u.gpu->collect_stats(sg);
        ASSERT_EQ(sc.size(), 1u);
        ASSERT_EQ(sg.size(), 1u);
        EXPECT_EQ(sg[0].key, "firing_rate");
        EXPECT_EQ(sg[0].value, sc[0].value);
      }
}

TEST(GpuNeuron, MembraneContinuesAcrossForwardsUntilTheUnitResets) {
  SKIP_WITHOUT_GPU();
  for (const NeuronConfig& nc : neuron_configs()) {
    auto u = make_units(neuron_maker(nc));
    Ctx ctx;
    const Tensor x1 = gputest::random_input({3, 2, 10}, 1, false, -0.5, 1.5);
    const Tensor x2 = gputest::random_input({3, 2, 10}, 2, false, -0.5, 1.5);
    u.cpu->reset_state();
    u.gpu->reset_state();
    u.cpu->forward(x1, ctx);
    u.gpu->forward(x1.to(gpu()), ctx);
    // Second forward continues the membrane (not at rest): y and the BPTT through v_init.
    const Tensor y_cpu = u.cpu->forward(x2, ctx);
    const Tensor y_gpu = u.gpu->forward(x2.to(gpu()), ctx);
    EXPECT_EQ(rel_err(y_gpu, y_cpu), 0.0) << u.cpu->at(0).type();
    const Tensor dy = gputest::random_input({3, 2, 10}, 3);
    u.cpu->zero_grad();
    u.gpu->zero_grad();
    EXPECT_LE(rel_err(u.gpu->backward_input(dy.to(gpu()), ctx), u.cpu->backward_input(dy, ctx)), 1e-5);
    for (size_t k = 0; k < u.cpu->params().size(); ++k)
      EXPECT_LE(rel_err(u.gpu->params()[k]->grad, u.cpu->params()[k]->grad), 1e-5);
    // After a reset both start at rest again: the same spikes as a fresh forward of x2.
    u.cpu->reset_state();
    u.gpu->reset_state();
    const Tensor r_cpu = u.cpu->forward(x2, ctx);
    const Tensor r_gpu = u.gpu->forward(x2.to(gpu()), ctx);
    EXPECT_EQ(rel_err(r_gpu, r_cpu), 0.0);
  }
}

TEST(GpuDropout, DrawsTheCpuMaskAndIsIdentityInEval) {
  SKIP_WITHOUT_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    auto u = make_units([] { return LayerPtr(std::make_unique<Dropout>(0.25)); });
    u.cpu->at(0).set_name("classifier.1");
    u.gpu->at(0).set_name("classifier.1");
    LayerCheck chk;
    chk.gpu_dtype = dt;
    chk.tol = dt == DType::F32 ? 1e-6 : 2e-2;  // a different mask would differ by O(1)
    EXPECT_EQ(compare_layer(u, {4, 5, 3, 11}, chk), "") << dtype_name(dt);
    chk.training = false;
    EXPECT_EQ(compare_layer(u, {4, 5, 3, 11}, chk), "") << dtype_name(dt) << " eval";
  }
  // Sample offset and step enter the mask on both devices alike.
  auto u = make_units([] { return LayerPtr(std::make_unique<Dropout>(0.5)); });
  Ctx ctx;
  ctx.seed = 3;
  ctx.step = 17;
  ctx.sample_offset = 1000;
  const Tensor x = gputest::random_input({2, 6, 40}, 4);
  EXPECT_EQ(rel_err(u.gpu->forward(x.to(gpu()), ctx), u.cpu->forward(x, ctx)), 0.0);
}

TEST(GpuResidual, ConvBnBlockAndFlattenMatchCpu) {
  SKIP_WITHOUT_GPU();
  auto make = []() {
    auto r = std::make_unique<Residual>();
    Conv2dConfig cc;
    cc.in_channels = 4;
    cc.out_channels = 4;
    cc.kernel = 3;
    cc.padding = 1;
    r->add(std::make_unique<Conv2d>(cc));
    BatchNormConfig bc;
    bc.num_features = 4;
    r->add(std::make_unique<BatchNorm>(bc));
    auto s = std::make_unique<Sequential>();
    s->add(std::move(r));
    s->add(std::make_unique<Flatten>());
    return LayerPtr(std::move(s));
  };
  for (DType dt : {DType::F32, DType::BF16}) {
    auto u = make_units(make);
    LayerCheck chk;
    chk.gpu_dtype = dt;
    chk.tol = dt == DType::F32 ? 1e-5 : 2e-2;
    EXPECT_EQ(compare_layer(u, {2, 3, 4, 6, 5}, chk), "") << dtype_name(dt);
  }
}

TEST(GpuGraph, SplitAddAndFanOutMatchCpu) {
  SKIP_WITHOUT_GPU();
  auto make = []() {
    auto g = std::make_unique<Graph>();
    const GraphValue proj = g->add("proj", std::make_unique<Conv1d>(Conv1dConfig{4, 6}), Graph::input());
    const auto qkv = g->add_op("split", std::make_unique<ChannelSplit>(std::vector<int64_t>{2, 2, 2}), {proj});
    const GraphValue sum = g->add_op("sum", std::make_unique<Add>(3), {qkv[0], qkv[1], qkv[2]})[0];
    const GraphValue up = g->add("up", std::make_unique<Conv1d>(Conv1dConfig{2, 4}), sum);
    const GraphValue vp = g->add("vproj", std::make_unique<Conv1d>(Conv1dConfig{2, 4}), qkv[2]);  // v twice
    g->add_op("res", std::make_unique<Add>(3), {Graph::input(), up, vp});  // the input twice
    return LayerPtr(std::move(g));
  };
  for (DType dt : {DType::F32, DType::BF16}) {
    auto u = make_units(make);
    LayerCheck chk;
    chk.gpu_dtype = dt;
    chk.tol = dt == DType::F32 ? 1e-5 : 3e-2;
    EXPECT_EQ(compare_layer(u, {2, 3, 4, 5}, chk), "") << dtype_name(dt);
  }
}

TEST(GpuLoss, SlotsKeepEachMicrobatch) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"mean_ce", "rate_mse"}) {
    const Tensor a = gputest::random_input({3, 4, 6}, 31, false, -2.0, 2.0);
    const Tensor b = gputest::random_input({3, 2, 6}, 32, false, -2.0, 2.0);
    Tensor la = Tensor::empty({4}, DType::I64), lb = Tensor::empty({2}, DType::I64);
    for (int i = 0; i < 4; ++i) la.data<int64_t>()[i] = (i * 5 + 1) % 6;
    for (int i = 0; i < 2; ++i) lb.data<int64_t>()[i] = (i * 3 + 2) % 6;
    auto cpu_loss = make_loss(name);
    cpu_loss->forward(a, la);
    const Tensor ga = cpu_loss->backward(0.5);
    cpu_loss->forward(b, lb);
    const Tensor gb = cpu_loss->backward(0.25);
    auto dev_loss = with_cuda_support(make_loss(name));
    dev_loss->forward(a.to(gpu()), la, 0);
    dev_loss->forward(b.to(gpu()), lb, 1);
    EXPECT_LE(rel_err(dev_loss->backward(0.25, 1), gb), 1e-6) << name;
    EXPECT_LE(rel_err(dev_loss->backward(0.5, 0), ga), 1e-6) << name;
    EXPECT_THROW(dev_loss->backward(1.0, 0), Error) << "backward released slot 0";
  }
}

TEST(GpuLoss, DeviceLossMatchesCpuLoss) {
  SKIP_WITHOUT_GPU();
  for (const char* name : {"mean_ce", "rate_mse"})
    for (DType dt : {DType::F32, DType::BF16}) {
      auto cpu_loss = make_loss(name);
      auto dev_loss = with_cuda_support(make_loss(name));
      const Tensor out = gputest::random_input({4, 7, 10}, 8, false, -2.0, 2.0).to_dtype(dt).to_dtype(DType::F32);
      Tensor labels = Tensor::empty({7}, DType::I64);
      for (int i = 0; i < 7; ++i) labels.data<int64_t>()[i] = (3 * i + 1) % 10;
      const LossResult rc = cpu_loss->forward(out, labels);
      const LossResult rg = dev_loss->forward(out.to(gpu()).to_dtype(dt), labels);  // labels on the host
      EXPECT_NEAR(rg.loss, rc.loss, 1e-12 * (1 + std::fabs(rc.loss))) << name;
      EXPECT_EQ(rg.correct, rc.correct) << name;
      EXPECT_EQ(rg.count, 7);
      const Tensor gc = cpu_loss->backward(0.5), gg = dev_loss->backward(0.5);
      EXPECT_TRUE(gg.device().is_cuda());
      EXPECT_EQ(gg.dtype(), dt);
      EXPECT_LE(rel_err(gg, gc), dt == DType::F32 ? 1e-6 : 1e-2) << name;
      // Labels on the device work too; a bad label is the CPU's Input error.
      EXPECT_NO_THROW(dev_loss->forward(out.to(gpu()), labels.to(gpu())));
      labels.data<int64_t>()[3] = 10;
      try {
        dev_loss->forward(out.to(gpu()), labels.to(gpu()));
        ADD_FAILURE() << "no error for label 10";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input);
        EXPECT_NE(std::string(e.what()).find("label 10"), std::string::npos) << e.what();
      }
      // Host outputs still go to the CPU loss.
      labels.data<int64_t>()[3] = 2;
      EXPECT_NEAR(dev_loss->forward(out, labels).loss, cpu_loss->forward(out, labels).loss, 1e-15);
    }
}

}  // namespace
}  // namespace sm
