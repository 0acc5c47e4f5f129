// test_graph.cpp — the dataflow composite (layers/dataflow_graph.h) and its ops
// (layers/split_add_nodes.h):
// ChannelSplit / Add values; a small Spikformer-like block (one projection split into q, k, v,
// a multi-input add, fan-out of v and of the graph input into a residual add) checked by finite
// differences in f64 (smooth spikes), fused and split B/W; two interleaved microbatch slots
// equal to one microbatch after the other; an unused output (zero gradient); state-dict names
// through a Unit; misuse errors.
#include <gtest/gtest.h>

#include "gradient_check.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/dataflow_graph.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/split_add_nodes.h"

namespace sm {
namespace {

using test::vec;

LayerPtr conv1d(int cin, int cout) {
  return std::make_unique<Conv1d>(Conv1dConfig{cin, cout, true, WeightInit::TorchDefault});
}

// x [T, N, 4, L] -> proj (conv1d 4->6) -> split {2, 2, 2} = q, k, v; qn = BN1d(q);
// s = lif(qn + k + v); out = x + up(s) + vproj(v)   (fan-out: x twice, v twice).
std::unique_ptr<Graph> make_block() {
  auto g = std::make_unique<Graph>();
  g->set_name("blk");
  const GraphValue proj = g->add("proj", conv1d(4, 6), Graph::input());
  const std::vector<GraphValue> qkv =
      g->add_op("split", std::make_unique<ChannelSplit>(std::vector<int64_t>{2, 2, 2}), {proj});
  BatchNormConfig bc;
  bc.num_features = 2;
  bc.spatial_dims = 1;
  const GraphValue qn = g->add("q_bn", std::make_unique<BatchNorm>(bc), qkv[0]);
  const GraphValue sum = g->add_op("sum", std::make_unique<Add>(3), {qn, qkv[1], qkv[2]})[0];
  NeuronConfig lif;
  lif.surrogate = SurrogateKind::ATan;
  lif.alpha = 2.0;
  const GraphValue s = g->add("lif", std::make_unique<Neuron>(lif), sum);
  const GraphValue up = g->add("up", conv1d(2, 4), s);
  const GraphValue vproj = g->add("vproj", conv1d(2, 4), qkv[2]);
  g->add_op("res", std::make_unique<Add>(3), {Graph::input(), up, vproj});
  return g;
}

TEST(GraphOps, ChannelSplitAndAdd) {
  Tensor x = test::random_tensor({2, 3, 5, 4}, DType::F64, 1);  // [T, N, C, L]
  ChannelSplit split({2, 3});
  Ctx ctx;
  const std::vector<Tensor> ys = split.forward_multi({x}, ctx);
  ASSERT_EQ(ys.size(), 2u);
  EXPECT_EQ(ys[0].shape(), (Shape{2, 3, 2, 4}));
  EXPECT_EQ(ys[1].shape(), (Shape{2, 3, 3, 4}));
  for (int64_t tn = 0; tn < 6; ++tn)
    for (int64_t c = 0; c < 5; ++c)
      for (int64_t l = 0; l < 4; ++l) {
        const Tensor& y = c < 2 ? ys[0] : ys[1];
        const int64_t cy = c < 2 ? c : c - 2, Cy = c < 2 ? 2 : 3;
        ASSERT_EQ(y.at((tn * Cy + cy) * 4 + l), x.at((tn * 5 + c) * 4 + l));
      }
  // Backward concatenates: the gradients of the parts are the parts of the gradient.
  const std::vector<Tensor> dx = split.backward_multi(ys, ctx);
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_EQ(vec(dx[0]), vec(x));
  EXPECT_THROW(split.backward_multi(ys, ctx), Error) << "the slot was released";

  Add add(3);
  const Tensor a = test::random_tensor({2, 2, 3}, DType::F64, 2), b = test::random_tensor({2, 2, 3}, DType::F64, 3);
  const Tensor y = add.forward_multi({a, b, a}, ctx)[0];
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.at(i), (a.at(i) + b.at(i)) + a.at(i));
  const std::vector<Tensor> da = add.backward_multi({b}, ctx);
  ASSERT_EQ(da.size(), 3u);
  for (const Tensor& d : da) EXPECT_EQ(vec(d), vec(b));
}

TEST(Graph, ShapesNamesAndParams) {
  auto g = make_block();
  EXPECT_EQ(g->output_shape({4, 3}), (Shape{4, 3}));
  EXPECT_EQ(g->size(), 8u);
  auto u = std::make_unique<Unit>("enc");
  u->add(std::move(g));
  u->finalize(DType::F64, Device::cpu(), 3);
  std::vector<std::string> names;
  for (Param* p : u->params()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"enc.blk.proj.weight", "enc.blk.proj.bias", "enc.blk.q_bn.weight",
                                             "enc.blk.q_bn.bias", "enc.blk.up.weight", "enc.blk.up.bias",
                                             "enc.blk.vproj.weight", "enc.blk.vproj.bias"}));
  EXPECT_EQ(u->buffers()[0]->name, "enc.blk.q_bn.running_mean");
}

TEST(Graph, GradientCheckWithFanOutAndMultiInputNodes) {
  auto u = test::wrap(make_block());
  test::GradCheckOptions o;
  o.smooth_spikes = true;
  o.max_checks = 60;
  EXPECT_TRUE(test::check_layer_gradients(*u, test::random_tensor({2, 3, 4, 3}, DType::F64, 11), o));
}

// One microbatch's results: dx and every parameter gradient.
struct Grads {
  std::vector<double> dx;
  std::vector<std::vector<double>> dparams;
};

TEST(Graph, InterleavedSlotsEqualSequentialMicrobatches) {
  const Tensor xa = test::random_tensor({2, 3, 4, 3}, DType::F64, 21);  // microbatch A: 3 samples
  const Tensor xb = test::random_tensor({2, 2, 4, 3}, DType::F64, 22);  // microbatch B: 2 samples
  const Tensor da = test::random_tensor(xa.shape(), DType::F64, 23);
  const Tensor db = test::random_tensor(xb.shape(), DType::F64, 24);
  auto grads_of = [](Unit& u, const Tensor& dxa, const Tensor& dxb) {
    Grads g;
    g.dx = vec(dxa);
    for (double v : vec(dxb)) g.dx.push_back(v);
    for (Param* p : u.params()) g.dparams.push_back(vec(p->grad));
    return g;
  };
  Ctx ctx;
  ctx.smooth_spikes = true;
  auto seq = test::wrap(make_block());
  seq->zero_grad();
  seq->reset_state();
  seq->forward(xa, ctx);
  const Tensor sa = seq->backward_input(da, ctx);
  seq->reset_state();
  seq->forward(xb, ctx);
  const Tensor sb = seq->backward_input(db, ctx);
  const Grads want = grads_of(*seq, sa, sb);

  auto il = test::wrap(make_block());
  il->zero_grad();
  Ctx c0 = ctx, c1 = ctx;
  c0.slot = 0;
  c1.slot = 1;
  c0.split_wgrad = c1.split_wgrad = true;
  il->reset_state();
  il->forward(xa, c0);
  il->reset_state();
  il->forward(xb, c1);
  const Tensor ib = il->backward_input(db, c1);
  const Tensor ia = il->backward_input(da, c0);
  il->backward_weight(c0);
  il->backward_weight(c1);
  const Grads got = grads_of(*il, ia, ib);
  EXPECT_EQ(got.dx, want.dx);
  ASSERT_EQ(got.dparams.size(), want.dparams.size());
  for (size_t k = 0; k < want.dparams.size(); ++k)
    for (size_t i = 0; i < want.dparams[k].size(); ++i)
      EXPECT_NEAR(got.dparams[k][i], want.dparams[k][i], 1e-12 * (1 + std::fabs(want.dparams[k][i])))
          << il->params()[k]->name << "[" << i << "]";
}

TEST(Graph, UnusedOutputGetsZeroGradient) {
  auto g = std::make_unique<Graph>();
  const std::vector<GraphValue> parts =
      g->add_op("split", std::make_unique<ChannelSplit>(std::vector<int64_t>{1, 2}), {Graph::input()});
  g->add("proj", conv1d(2, 3), parts[1]);  // part 0 unused
  auto u = test::wrap(std::move(g));
  Ctx ctx;
  const Tensor x = test::random_tensor({1, 2, 3, 4}, DType::F64, 31);
  const Tensor y = u->forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 3, 4}));
  const Tensor dx = u->backward_input(test::random_tensor(y.shape(), DType::F64, 32), ctx);
  for (int64_t tn = 0; tn < 2; ++tn)
    for (int64_t l = 0; l < 4; ++l) EXPECT_EQ(dx.at((tn * 3 + 0) * 4 + l), 0.0) << "channel 0 feeds nothing";
  EXPECT_TRUE(test::check_layer_gradients(*u, x));
}

TEST(Graph, MisuseIsAnInputError) {
  auto expect_input_error = [](auto&& f, const char* what) {
    try {
      f();
      ADD_FAILURE() << what << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    }
  };
  Graph g;
  g.add("a", conv1d(2, 2), Graph::input());
  expect_input_error([&] { g.add("b", conv1d(2, 2), GraphValue{3, 0}); }, "a later node");
  expect_input_error([&] { g.add("b", conv1d(2, 2), GraphValue{0, 1}); }, "a missing output");
  expect_input_error([&] { g.add("a", conv1d(2, 2), GraphValue{0, 0}); }, "a duplicate name");
  expect_input_error([&] { g.add_op("s", std::make_unique<Add>(2), {GraphValue{0, 0}}); }, "a wrong input count");
  expect_input_error([&] { Add(2).output_shape({3}); }, "a two-input op as a layer");
  g.add_op("sum", std::make_unique<Add>(2), {Graph::input(), GraphValue{0, 0}});
  expect_input_error([&] { g.output_shape({3, 5}); }, "a conv1d of the wrong width");  // conv1d 2 -> 2 on 3 channels
}

}  // namespace
}  // namespace sm
