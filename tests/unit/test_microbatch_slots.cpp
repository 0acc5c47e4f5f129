// test_microbatch_slots.cpp — every layer type keeps each microbatch in its own slot
// (docs/architecture.md §4): microbatch A forward (slot 0), B forward (slot 1), then B
// backward_input with ctx.split_wgrad, A backward_input, A backward_weight, B backward_weight must
// give the dx and parameter gradients (and BN running statistics) of A then B run one after the
// other without slots (fused backward, reset_state between microbatches as the engine does). f64;
// equal to 1e-12 relative (in practice bitwise: the accumulation order is the same).
// Layers: Conv2d (also with a spike input kept as bits), Conv1d, Linear, BatchNorm1d/2d,
// MaxPool2d/AvgPool2d, Flatten (also tokens), Mean, Dropout, SSA (also on spikes kept as bits),
// LIF/PLIF/IF, Residual, the graph composite, and each Unit of the fmnist_csnn model.
#include <gtest/gtest.h>

#include <functional>

#include "gradient_check.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/dataflow_graph.h"
#include "spikemesh/layers/dropout.h"
#include "spikemesh/layers/flatten.h"
#include "spikemesh/layers/linear.h"
#include "spikemesh/layers/mean.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/spiking_attention.h"
#include "spikemesh/layers/split_add_nodes.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {
namespace {

using UnitMaker = std::function<std::unique_ptr<Unit>()>;

std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

// A microbatch: its input, its output gradient and its context (slot set by the run).
struct Micro {
  Tensor x, dy;
  Ctx ctx;
};

// What a run leaves: dx per microbatch, every parameter gradient and buffer.
struct Result {
  std::vector<std::vector<double>> dx, grads, buffers;
};

Result collect(Unit& u, const Tensor& dxa, const Tensor& dxb) {
  Result r;
  r.dx = {vec(dxa), vec(dxb)};
  for (Param* p : u.params()) r.grads.push_back(vec(p->grad));
  for (Buffer* b : u.buffers()) r.buffers.push_back(vec(b->value));
  return r;
}

Result sequential(Unit& u, Micro a, Micro b) {
  u.zero_grad();
  Tensor dx[2];
  int k = 0;
  for (Micro* m : {&a, &b}) {
    m->ctx.slot = 0;
    m->ctx.split_wgrad = false;
    u.reset_state();
    u.forward(m->x, m->ctx);
    dx[k++] = u.backward_input(m->dy, m->ctx);
  }
  return collect(u, dx[0], dx[1]);
}

Result interleaved(Unit& u, Micro a, Micro b) {
  u.zero_grad();
  a.ctx.slot = 0;
  b.ctx.slot = 1;
  a.ctx.split_wgrad = b.ctx.split_wgrad = true;
  u.reset_state();
  u.forward(a.x, a.ctx);
  u.reset_state();
  u.forward(b.x, b.ctx);
  const Tensor dxb = u.backward_input(b.dy, b.ctx);
  const Tensor dxa = u.backward_input(a.dy, a.ctx);
  u.backward_weight(a.ctx);
  u.backward_weight(b.ctx);
  return collect(u, dxa, dxb);
}

::testing::AssertionResult same(const std::vector<std::vector<double>>& got,
                                const std::vector<std::vector<double>>& want, const std::string& what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": count differs";
  for (size_t k = 0; k < want.size(); ++k) {
    if (got[k].size() != want[k].size()) return ::testing::AssertionFailure() << what << " " << k << ": size differs";
    for (size_t i = 0; i < want[k].size(); ++i)
      if (std::fabs(got[k][i] - want[k][i]) > 1e-12 * (1 + std::fabs(want[k][i])))
        return ::testing::AssertionFailure() << what << " " << k << "[" << i << "]: " << got[k][i] << " vs "
                                             << want[k][i];
  }
  return ::testing::AssertionSuccess();
}

// Inputs xa [na samples], xb [nb samples] of per-sample shape `in` (spikes when binary).
void check(const std::string& name, const UnitMaker& make, const Shape& in, bool binary = false, int64_t steps = 2) {
  SCOPED_TRACE(name);
  Micro m[2];
  const int64_t n[2] = {3, 2};
  for (int k = 0; k < 2; ++k) {
    Shape xs{steps, n[k]};
    xs.insert(xs.end(), in.begin(), in.end());
    m[k].x = test::random_tensor(xs, DType::F64, 100 + k, binary ? 0.0 : -1.0, binary ? 1.0 : 2.0);
    if (binary) {
      for (int64_t i = 0; i < m[k].x.numel(); ++i) test::detail::set(m[k].x, i, m[k].x.at(i) < 0.4 ? 1.0 : 0.0);
      m[k].x.set_binary(true);
    }
    m[k].ctx.seed = 5;
    m[k].ctx.step = 7;
    m[k].ctx.sample_offset = k == 0 ? 0 : n[0];  // B follows A in the batch (dropout masks)
    Shape ys{steps, n[k]};
    const Shape out = make()->output_shape(in);
    ys.insert(ys.end(), out.begin(), out.end());
    m[k].dy = test::random_tensor(ys, DType::F64, 200 + k);
  }
  auto u_seq = make(), u_il = make();
  const Result want = sequential(*u_seq, m[0], m[1]);
  const Result got = interleaved(*u_il, m[0], m[1]);
  EXPECT_TRUE(same(got.dx, want.dx, "dx"));
  EXPECT_TRUE(same(got.grads, want.grads, "parameter gradient"));
  EXPECT_TRUE(same(got.buffers, want.buffers, "buffer"));
}

template <class L, class Cfg>
UnitMaker leaf(Cfg cfg) {
  return [cfg] { return test::wrap(std::make_unique<L>(cfg)); };
}

NeuronConfig neuron(NeuronKind kind) {
  NeuronConfig c;
  c.kind = kind;
  c.v_threshold = 0.5;  // fire often on the random inputs
  c.surrogate = SurrogateKind::ATan;
  c.alpha = 2.0;
  return c;
}

BatchNormConfig bn(int C, int dims) {
  BatchNormConfig c;
  c.num_features = C;
  c.spatial_dims = dims;
  return c;
}

TEST(MicrobatchSlots, WeightLayers) {
  const Conv2dConfig conv2d{3, 4, 3, 1, 1, true, WeightInit::TorchDefault};
  check("conv2d", leaf<Conv2d>(conv2d), {3, 5, 4});
  check("conv2d spikes", leaf<Conv2d>(conv2d), {3, 5, 4}, /*binary=*/true);
  check("conv1d", leaf<Conv1d>(Conv1dConfig{3, 5, true, WeightInit::TorchDefault}), {3, 6});
  check("linear", leaf<Linear>(LinearConfig{6, 4, true, WeightInit::TorchDefault}), {6});
  check("linear no bias", leaf<Linear>(LinearConfig{6, 4, false, WeightInit::TorchDefault}), {2, 6});
}

TEST(MicrobatchSlots, BatchNorm) {
  check("batchnorm2d", leaf<BatchNorm>(bn(3, 2)), {3, 4, 5});
  check("batchnorm1d", leaf<BatchNorm>(bn(3, 1)), {3, 6});
  check("batchnorm1d [C]", leaf<BatchNorm>(bn(4, 1)), {4});
}

TEST(MicrobatchSlots, PoolFlattenDropout) {
  check("maxpool2d", leaf<MaxPool2d>(PoolConfig{2, 2, 0}), {2, 6, 5});
  check("maxpool2d spikes", leaf<MaxPool2d>(PoolConfig{3, 2, 1}), {2, 6, 5}, /*binary=*/true);
  check("avgpool2d", leaf<AvgPool2d>(PoolConfig{3, 2, 1}), {2, 6, 5});
  check("flatten", [] { return test::wrap(std::make_unique<Flatten>()); }, {2, 3, 4});
  check("dropout", [] { return test::wrap(std::make_unique<Dropout>(0.4)); }, {3, 5});
  check("flatten tokens", [] { return test::wrap(std::make_unique<Flatten>(1)); }, {2, 3, 4});
  check("mean", [] { return test::wrap(std::make_unique<Mean>(-1)); }, {3, 5});
}

TEST(MicrobatchSlots, SpikingSelfAttention) {
  check("ssa", [] { return test::wrap(std::make_unique<SpikingAttention>(2, 0.125)); }, {12, 5});
  check("ssa spikes", [] { return test::wrap(std::make_unique<SpikingAttention>(2, 0.125)); }, {12, 5},
        /*binary=*/true);
}

TEST(MicrobatchSlots, Neurons) {
  check("lif", leaf<Neuron>(neuron(NeuronKind::LIF)), {3, 4}, false, 4);
  check("plif", leaf<Neuron>(neuron(NeuronKind::PLIF)), {3, 4}, false, 4);
  check("if", leaf<Neuron>(neuron(NeuronKind::IF)), {3, 4}, false, 4);
}

TEST(MicrobatchSlots, Composites) {
  check("residual", [] {
    auto r = std::make_unique<Residual>();
    r->add(std::make_unique<BatchNorm>(bn(2, 2)));
    r->add(std::make_unique<Neuron>(neuron(NeuronKind::PLIF)));
    return test::wrap(std::move(r));
  }, {2, 3, 3});
  check("graph", [] {  // q, k, v from one projection; a 3-input add; fan-out of v and of the input
    auto g = std::make_unique<Graph>();
    const GraphValue proj = g->add("proj", std::make_unique<Conv1d>(Conv1dConfig{4, 6}), Graph::input());
    const auto qkv = g->add_op("split", std::make_unique<ChannelSplit>(std::vector<int64_t>{2, 2, 2}), {proj});
    const GraphValue qn = g->add("q_bn", std::make_unique<BatchNorm>(bn(2, 1)), qkv[0]);
    const GraphValue sum = g->add_op("sum", std::make_unique<Add>(3), {qn, qkv[1], qkv[2]})[0];
    const GraphValue s = g->add("lif", std::make_unique<Neuron>(neuron(NeuronKind::LIF)), sum);
    const GraphValue up = g->add("up", std::make_unique<Conv1d>(Conv1dConfig{2, 4}), s);
    const GraphValue vp = g->add("vproj", std::make_unique<Conv1d>(Conv1dConfig{2, 4}), qkv[2]);
    g->add_op("res", std::make_unique<Add>(3), {Graph::input(), up, vp});
    return test::wrap(std::move(g));
  }, {4, 3}, false, 3);
}

TEST(MicrobatchSlots, FmnistCsnnUnits) {
  ModelOverrides ov;
  ov.vars["C"] = 4;
  const auto probe = load_builtin_model("fmnist_csnn", ov);
  const std::vector<Shape> outs = probe->unit_output_shapes();
  ASSERT_EQ(outs.size(), 3u);
  for (size_t k = 0; k < outs.size(); ++k) {
    const Shape in = k == 0 ? probe->info.input_shape : outs[k - 1];
    auto make = [ov, k]() {
      std::shared_ptr<Model> m = load_builtin_model("fmnist_csnn", ov);
      m->finalize(DType::F64, Device::cpu(), 9);
      // Hand out the unit; the model (and its other units) go away.
      return std::move(m->units[k]);
    };
    // Unit 0 sees real-valued images; later units see spikes (kept as bits by conv/linear).
    check("fmnist_csnn unit " + std::to_string(k), make, in, /*binary=*/k > 0, 3);
  }
}

}  // namespace
}  // namespace sm
