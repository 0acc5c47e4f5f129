// test_spike_conv.cpp — the binary-input convolution (kernels/cpu/spike_conv.h) against the
// naive double reference (tests/ref/conv_ref) at firing rates 0–100% on odd shapes (Cin not
// a multiple of 64, Cout not a multiple of 16, stride 2, K 1/3/5, no padding, 1×1 rows),
// within the documented bound |sparse − exact| ≤ (n + 2)·u·(Σ|terms| + |start|), n the number
// of active terms, u = 2⁻²⁴; bitwise independence of the thread count and of the register
// width (AVX-512 vs AVX2); and the layers' --conv-algo modes: sparse and dense agree within
// the bound, auto chooses by the firing rate, fp64 never takes the sparse path; the Winograd
// choice (SPIKEMESH_WINOGRAD) and a layer on the own Winograd kernel against direct.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "../ref/conv_ref.h"
#include "conv_test_util.h"
#include "gradient_check.h"
#include "isa_guard.h"
#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cpu/spike_conv.h"
#include "spikemesh/kernels/cpu/winograd.h"
#include "spikemesh/kernels/spike_conv_choice.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/layer_profile.h"

namespace sm {
namespace {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);

std::vector<double> uniform_vec(int64_t n, uint64_t seed, double lo, double hi) {
  CounterRng rng(seed, "test_spike_conv");
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(i);
  return v;
}

std::vector<double> spikes(int64_t n, double density, uint64_t seed) {
  CounterRng rng(seed, "test_spike_conv/spikes");
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = rng.uniform(i) < density ? 1.0 : 0.0;
  return v;
}

std::vector<float> to_f32(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
std::vector<double> abs_of(std::vector<double> v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

using test::geometry_of;

struct Case {
  ref::ConvRefShape shape;
  double density;
};

void PrintTo(const Case& c, std::ostream* os) {
  const ref::ConvRefShape& s = c.shape;
  *os << "{n " << s.n << ", cin " << s.cin << ", " << s.h << "x" << s.w << ", cout " << s.cout << ", k " << s.k
      << ", stride " << s.stride << ", pad " << s.pad << ", density " << c.density << "}";
}

std::vector<Case> cases() {
  const std::vector<ref::ConvRefShape> shapes = {
      {3, 5, 7, 6, 4, 3, 1, 1},      // tiny, H != W
      {2, 70, 9, 11, 20, 3, 1, 1},   // Cin over one 64-bit word, Cout not a multiple of 16
      {2, 130, 8, 8, 100, 3, 2, 1},  // stride 2, a partial second register block
      {2, 3, 10, 10, 7, 5, 1, 2},    // K 5
      {4, 33, 1, 17, 65, 1, 1, 0},   // a 1×1 row (Conv1d as the kernel sees it)
      {1, 64, 5, 5, 64, 3, 1, 0},    // no padding, whole words and blocks
      {5, 3, 56, 56, 20, 3, 1, 1},   // weight gradient in chunks of 2, 2 and 1 samples (dy 401 KB each)
      {2, 40, 10, 9, 100, 3, 1, 1},  // nine-tap weight gradient over blocks of 64 and 48 lanes
  };
  std::vector<Case> out;
  for (const auto& s : shapes)
    for (double d : {0.0, 0.01, 0.1, 0.3, 0.6, 1.0}) out.push_back({s, d});
  return out;
}

// |got − want| ≤ (n + 2)·u·scale elementwise, n = terms[i].
void expect_within_bound(const std::vector<float>& got, const std::vector<double>& want,
                         const std::vector<double>& terms, const std::vector<double>& scale, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double bound = (terms[i] + 2) * kUnitRoundoff * scale[i];
    if (std::fabs(got[i] - want[i]) > bound) {
      ADD_FAILURE() << what << " element " << i << ": " << got[i] << " vs exact " << want[i] << " (bound " << bound
                    << ", " << terms[i] << " terms)";
      ++bad;
    }
  }
}

class SpikeConvKernel : public ::testing::TestWithParam<Case> {};

TEST_P(SpikeConvKernel, ForwardMatchesReferenceWithinBound) {
  const ref::ConvRefShape& s = GetParam().shape;
  const cpu::Conv2dGeometry g = geometry_of(s);
  const auto x = spikes(g.input_numel(), GetParam().density, 1);
  const auto w = uniform_vec(g.weight_numel(), 2, -1, 1), b = uniform_vec(s.cout, 3, -1, 1);
  const auto want = ref::conv2d_forward(s, x, w, b);
  // Σ|terms| and the number of terms per output, from the reference itself (x ≥ 0)
  const auto scale = ref::conv2d_forward(s, x, abs_of(w), abs_of(b));
  const auto terms = ref::conv2d_forward(s, x, std::vector<double>(w.size(), 1.0), std::vector<double>(b.size(), 0.0));
  const auto xf = to_f32(x), wf = to_f32(w), bf = to_f32(b);
  std::vector<float> y(g.output_numel(), 7.0f);  // overwritten
  cpu::spike_conv2d_forward(g, xf.data(), wf.data(), bf.data(), y.data());
  expect_within_bound(y, want, terms, scale, "forward");
  // without a bias: exactly the weight sums
  std::vector<float> y0(g.output_numel(), 7.0f);
  cpu::spike_conv2d_forward(g, xf.data(), wf.data(), nullptr, y0.data());
  const auto want0 = ref::conv2d_forward(s, x, w, {});
  expect_within_bound(y0, want0, terms, ref::conv2d_forward(s, x, abs_of(w), {}), "forward without bias");
  if (GetParam().density == 0.0) {
    for (int64_t i = 0; i < g.output_numel(); ++i) ASSERT_EQ(y[i], bf[i / (g.out_height() * g.out_width()) % s.cout]);
  }
}

TEST_P(SpikeConvKernel, WeightGradientAccumulatesWithinBound) {
  const ref::ConvRefShape& s = GetParam().shape;
  const cpu::Conv2dGeometry g = geometry_of(s);
  const auto x = spikes(g.input_numel(), GetParam().density, 4);
  const auto dy = uniform_vec(g.output_numel(), 5, -1, 1), dw0 = uniform_vec(g.weight_numel(), 6, -1, 1);
  const auto db0 = uniform_vec(s.cout, 7, -1, 1);
  const auto fresh = ref::conv2d_backward_weights(s, x, dy);
  const auto scale_fresh = ref::conv2d_backward_weights(s, x, abs_of(dy));
  const auto terms = ref::conv2d_backward_weights(s, x, std::vector<double>(dy.size(), 1.0));
  std::vector<double> want(fresh.size()), scale(fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) {
    want[i] = dw0[i] + fresh[i];
    scale[i] = std::fabs(dw0[i]) + scale_fresh[i];
  }
  const auto xf = to_f32(x), dyf = to_f32(dy);
  std::vector<float> dw = to_f32(dw0), db = to_f32(db0);
  cpu::spike_conv2d_backward_weights(g, xf.data(), dyf.data(), dw.data(), db.data());
  expect_within_bound(dw, want, terms, scale, "dW");
  const auto dbias = ref::conv2d_backward_bias(s, dy);
  for (int64_t c = 0; c < s.cout; ++c)
    EXPECT_NEAR(db[c], db0[c] + dbias[c], 1e-5 * (1 + std::fabs(dbias[c]))) << "dbias " << c;
}

TEST_P(SpikeConvKernel, BitwiseIndependentOfThreadsAndRegisterWidth) {
  const ref::ConvRefShape& s = GetParam().shape;
  const cpu::Conv2dGeometry g = geometry_of(s);
  const auto xf = to_f32(spikes(g.input_numel(), GetParam().density, 8));
  const auto wf = to_f32(uniform_vec(g.weight_numel(), 9, -1, 1)), dyf = to_f32(uniform_vec(g.output_numel(), 10, -1, 1));
  std::vector<std::vector<float>> ys, dws;
  const test::IsaGuard guard;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    for (bool avx512 : {true, false}) {
      omp_set_num_threads(threads);
      cpu::allow_avx512_kernels(avx512);
      std::vector<float> y(g.output_numel()), dw(g.weight_numel(), 0.5f);
      cpu::spike_conv2d_forward(g, xf.data(), wf.data(), nullptr, y.data());
      cpu::spike_conv2d_backward_weights(g, xf.data(), dyf.data(), dw.data(), nullptr);
      ys.push_back(y);
      dws.push_back(dw);
    }
    // the same from the packed bits a layer keeps (no pass over the floats)
    Tensor xt = Tensor::empty({g.input_numel()}, DType::F32);
    std::copy(xf.begin(), xf.end(), xt.data<float>());
    const Tensor bits = pack_bits(xt);
    std::vector<float> y(g.output_numel()), dw(g.weight_numel(), 0.5f);
    cpu::spike_conv2d_forward_bits(g, bits.data<uint8_t>(), wf.data(), nullptr, y.data());
    cpu::spike_conv2d_backward_weights_bits(g, bits.data<uint8_t>(), dyf.data(), dw.data(), nullptr);
    ys.push_back(y);
    dws.push_back(dw);
    EXPECT_DOUBLE_EQ(cpu::set_bit_fraction(bits.data<uint8_t>(), g.input_numel()),
                     cpu::nonzero_fraction(xf.data(), g.input_numel()));
  }
  // one sample per weight-gradient chunk: the same order per element, so the same bits
  cpu::set_spike_conv_weight_chunk_bytes(1);
  std::vector<float> dw_one_sample_chunks(g.weight_numel(), 0.5f);
  cpu::spike_conv2d_backward_weights(g, xf.data(), dyf.data(), dw_one_sample_chunks.data(), nullptr);
  cpu::set_spike_conv_weight_chunk_bytes(0);
  omp_set_num_threads(saved);
  for (size_t r = 1; r < ys.size(); ++r) {
    ASSERT_EQ(ys[0], ys[r]) << "forward, run " << r << " (threads 1, 2, 3 × AVX-512 on/off, then from bits)";
    ASSERT_EQ(dws[0], dws[r]) << "weight gradient, run " << r;
  }
  ASSERT_EQ(dws[0], dw_one_sample_chunks) << "weight gradient, one sample per chunk against the default chunks";
}

INSTANTIATE_TEST_SUITE_P(Densities, SpikeConvKernel, ::testing::ValuesIn(cases()));

TEST(SpikeConvKernel, NonzeroFractionCountsExactly) {
  std::vector<float> v(1001, 0.0f);
  for (int i = 0; i < 1001; i += 7) v[i] = 1.0f;
  v[3] = -2.0f;
  EXPECT_DOUBLE_EQ(cpu::nonzero_fraction(v.data(), 1001), 144.0 / 1001);
  EXPECT_EQ(cpu::nonzero_fraction(v.data(), 0), 0.0);
}

// ---- the layers under --conv-algo --------------------------------------------------------

struct AlgoGuard {  // restores the process-wide mode
  SpikeConvAlgo saved = spike_conv_algo();
  ~AlgoGuard() { set_spike_conv_algo(saved); }
};

Tensor spike_tensor(const Shape& shape, DType dt, double density, uint64_t seed) {
  const auto v = spikes(shape_numel(shape), density, seed);
  Tensor t = Tensor::empty(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) test::detail::set(t, i, v[i]);
  t.set_binary(true);
  return t;
}

struct LayerRun {
  std::vector<double> y, dx, dw, db;
};

LayerRun run_layer(Unit& u, const Tensor& x, uint64_t seed) {
  Ctx ctx;
  Tensor y = u.forward(x, ctx);
  u.zero_grad();
  Tensor dx = u.backward_input(test::random_tensor(y.shape(), y.dtype(), seed), ctx);
  auto ps = u.params();
  LayerRun r{test::vec(y), test::vec(dx), test::vec(ps[0]->grad), {}};
  if (ps.size() > 1) r.db = test::vec(ps[1]->grad);
  return r;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << what << " " << i;
}

TEST(SpikeConvLayer, SparseAndDenseModesAgreeForConv2dAndConv1d) {
  AlgoGuard guard;
  for (int kind = 0; kind < 2; ++kind) {
    auto make = [&] {
      return kind == 0 ? test::wrap(std::make_unique<Conv2d>(Conv2dConfig{70, 24, 3, 1, 1, true, WeightInit::TorchDefault}),
                                    DType::F32, 5)
                       : test::wrap(std::make_unique<Conv1d>(Conv1dConfig{70, 40, true, WeightInit::TorchDefault}),
                                    DType::F32, 5);
    };
    const Shape xs = kind == 0 ? Shape{2, 3, 70, 6, 5} : Shape{2, 3, 70, 13};
    const Tensor x = spike_tensor(xs, DType::F32, 0.12, 11);
    set_spike_conv_algo(SpikeConvAlgo::Dense);
    auto dense_unit = make();
    const LayerRun dense = run_layer(*dense_unit, x, 12);
    set_spike_conv_algo(SpikeConvAlgo::Sparse);
    auto sparse_unit = make();
    const LayerRun sparse = run_layer(*sparse_unit, x, 12);
    // both f32, in different orders: each within ~n·u of the exact sums (n ≤ 630 terms)
    expect_close(sparse.y, dense.y, 1e-4, "y");
    EXPECT_EQ(sparse.dx, dense.dx);  // the input gradient is dense in every mode
    expect_close(sparse.dw, dense.dw, 1e-4, "dW");
    expect_close(sparse.db, dense.db, 1e-5, "db");
  }
}

TEST(SpikeConvLayer, AutoChoosesByFiringRateAndProfileRecordsIt) {
  AlgoGuard guard;
  set_spike_conv_algo(SpikeConvAlgo::Auto);
  layer_profile_reset();
  layer_profile_enable(true);
  for (double density : {0.05, 0.6}) {
    auto u = test::wrap(std::make_unique<Conv2d>(Conv2dConfig{16, 8, 3, 1, 1, true, WeightInit::TorchDefault}),
                        DType::F32, 3);
    run_layer(*u, spike_tensor({4, 4, 16, 12, 12}, DType::F32, density, 13), 14);  // crossovers 23% and 15%
  }
  layer_profile_enable(false);
  const auto rows = layer_profile_spike_conv_report();
  layer_profile_reset();
  ASSERT_EQ(rows.size(), 1u);  // both units' layers carry the same name
  EXPECT_EQ(rows[0].forward_calls, 2);
  EXPECT_EQ(rows[0].forward_sparse, 1);  // 5%: sparse; 60%: dense
  EXPECT_EQ(rows[0].weight_calls, 2);
  EXPECT_EQ(rows[0].weight_sparse, 1);
  EXPECT_NEAR(rows[0].density_sum, 0.65, 0.05);
  EXPECT_EQ(rows[0].geometry, "16->8 12x12 k3");
}

TEST(SpikeConvLayer, Fp64AndNonBinaryInputsStayDense) {
  AlgoGuard guard;
  set_spike_conv_algo(SpikeConvAlgo::Sparse);
  layer_profile_reset();
  layer_profile_enable(true);
  auto u64 = test::wrap(std::make_unique<Conv2d>(Conv2dConfig{4, 3, 3, 1, 1, true, WeightInit::TorchDefault}));
  run_layer(*u64, spike_tensor({1, 2, 4, 5, 5}, DType::F64, 0.1, 15), 16);
  auto u32 = test::wrap(std::make_unique<Conv2d>(Conv2dConfig{4, 3, 3, 1, 1, true, WeightInit::TorchDefault}),
                        DType::F32);
  run_layer(*u32, test::random_tensor({1, 2, 4, 5, 5}, DType::F32, 17), 18);  // not flagged binary
  layer_profile_enable(false);
  EXPECT_TRUE(layer_profile_spike_conv_report().empty());
  layer_profile_reset();
}

struct WinogradGuard {  // restores the process-wide Winograd choice
  WinogradChoice saved = winograd_choice();
  ~WinogradGuard() { set_winograd_choice(saved); }
};

cpu::Conv2dGeometry conv3x3(int64_t cin, int64_t cout, int64_t hw, int64_t batch = 8) {
  cpu::Conv2dGeometry g;
  g.batch = batch, g.in_channels = cin, g.out_channels = cout, g.height = g.width = hw;
  g.kernel = 3, g.padding = 1;
  return g;
}

// The rule of spike_conv_choice.h: off and --conv-algo dense/sparse run direct; own where either
// shape rule holds, every pass; auto takes oneDNN's where this CPU has it, the own one on wide
// layers where not, for the gradients only.
TEST(SpikeConvChoice, WinogradRule) {
  AlgoGuard algo;
  WinogradGuard wino;
  set_spike_conv_algo(SpikeConvAlgo::Auto);
  set_winograd_choice(WinogradChoice::Own);
  for (WinogradPass pass : {WinogradPass::Forward, WinogradPass::Data, WinogradPass::Weights}) {
    EXPECT_EQ(winograd_kernel(conv3x3(16, 16, 24), pass), WinogradKernel::Own);   // oneDNN's shape rule
    EXPECT_EQ(winograd_kernel(conv3x3(64, 128, 48), pass), WinogradKernel::Own);  // the own shape rule
    EXPECT_EQ(winograd_kernel(conv3x3(2, 64, 48), pass), WinogradKernel::None);   // too few channels
    EXPECT_EQ(winograd_kernel(conv3x3(512, 512, 12), pass), WinogradKernel::Own); // up to 512x512 on 12x12
    EXPECT_EQ(winograd_kernel(conv3x3(512, 1024, 12), pass), WinogradKernel::None); // transformed weights too large
    EXPECT_EQ(winograd_kernel(conv3x3(512, 512, 6), pass), WinogradKernel::None);   // too few tiles
  }
  cpu::Conv2dGeometry strided = conv3x3(64, 64, 24);
  strided.stride = 2;
  EXPECT_EQ(winograd_kernel(strided, WinogradPass::Data), WinogradKernel::None);
  set_spike_conv_algo(SpikeConvAlgo::Dense);
  EXPECT_EQ(winograd_kernel(conv3x3(64, 64, 24), WinogradPass::Data), WinogradKernel::None);
  set_spike_conv_algo(SpikeConvAlgo::Auto);
  set_winograd_choice(WinogradChoice::Off);
  EXPECT_EQ(winograd_kernel(conv3x3(64, 64, 24), WinogradPass::Data), WinogradKernel::None);
  set_winograd_choice(WinogradChoice::Auto);
  const bool avx512 = cpu::conv2d_winograd_available(conv3x3(64, 64, 24));
  const WinogradKernel dnnl_or_own = avx512 ? WinogradKernel::OneDnn : WinogradKernel::Own;
  EXPECT_EQ(winograd_kernel(conv3x3(16, 16, 24), WinogradPass::Data), avx512 ? WinogradKernel::OneDnn : WinogradKernel::None);
  for (WinogradPass pass : {WinogradPass::Forward, WinogradPass::Data, WinogradPass::Weights}) {
    EXPECT_EQ(winograd_kernel(conv3x3(64, 128, 48), pass), dnnl_or_own);
    EXPECT_EQ(winograd_kernel(conv3x3(512, 512, 12), pass), dnnl_or_own);
  }
  // the forward (of frames, pooled spikes, or spikes above the crossover): F(4×4, 3×3), oneDNN's
  // or the own, on the own kernels' shapes
  EXPECT_EQ(winograd_kernel(conv3x3(256, 256, 24), WinogradPass::Forward), dnnl_or_own);
  EXPECT_EQ(winograd_kernel(conv3x3(32, 32, 24), WinogradPass::Forward),
            avx512 ? WinogradKernel::OneDnn : WinogradKernel::None);
  // 6×6 planes: oneDNN's forward and input gradient, never its weight gradient nor the own kernels
  for (WinogradPass pass : {WinogradPass::Forward, WinogradPass::Data})
    EXPECT_EQ(winograd_kernel(conv3x3(512, 512, 6), pass), avx512 ? WinogradKernel::OneDnn : WinogradKernel::None);
  EXPECT_EQ(winograd_kernel(conv3x3(512, 512, 6), WinogradPass::Weights), WinogradKernel::None);
  EXPECT_EQ(winograd_kernel(conv3x3(512, 512, 4), WinogradPass::Data), WinogradKernel::None);  // below 6×6
}

// The binary-input kernel's weight gradient competes with the dense kernel that would run:
// where that is oneDNN's Winograd its crossover is direct's scaled by 0.5 (planes of 24x24 and
// more) or 0.75 (smaller); where it runs direct (no Winograd on this CPU, SPIKEMESH_WINOGRAD=off,
// 6x6 planes) it is direct's. The forward crossover is never scaled: a forward pass of spikes
// stays with the kernels of direct's accuracy (spike_conv_choice.cpp says why).
TEST(SpikeConvChoice, WeightCrossoverFollowsTheDenseKernelThatWouldRun) {
  AlgoGuard algo;
  WinogradGuard wino;
  set_spike_conv_algo(SpikeConvAlgo::Auto);
  set_winograd_choice(WinogradChoice::Auto);
  const bool avx512 = cpu::conv2d_winograd_available(conv3x3(64, 64, 24));
  for (const auto& [g, scale] : {std::pair{conv3x3(256, 256, 24), 0.5}, std::pair{conv3x3(64, 128, 48), 0.5},
                                 std::pair{conv3x3(512, 512, 12), 0.75}, std::pair{conv3x3(512, 512, 6, 40), 1.0}}) {
    SCOPED_TRACE(std::to_string(g.in_channels) + "->" + std::to_string(g.out_channels) + " " +
                 std::to_string(g.height) + "x" + std::to_string(g.width));
    const double weights = spike_conv_crossover_vs_direct(ConvPass::Weights, g);
    EXPECT_GT(weights, 0.0);
    EXPECT_DOUBLE_EQ(spike_conv_crossover(ConvPass::Weights, g), avx512 ? scale * weights : weights);
    EXPECT_DOUBLE_EQ(spike_conv_crossover(ConvPass::Forward, g), spike_conv_crossover_vs_direct(ConvPass::Forward, g));
  }
  set_winograd_choice(WinogradChoice::Off);
  EXPECT_DOUBLE_EQ(spike_conv_crossover(ConvPass::Weights, conv3x3(256, 256, 24)),
                   spike_conv_crossover_vs_direct(ConvPass::Weights, conv3x3(256, 256, 24)));
  set_winograd_choice(WinogradChoice::Auto);
  // 15 % spikes into 256->256 on 24x24: the forward sparse everywhere; the weight gradient
  // sparse against direct, Winograd where it runs (crossover 25 % x 0.5)
  EXPECT_TRUE(use_spike_kernel(ConvPass::Forward, conv3x3(256, 256, 24), 0.15));
  EXPECT_EQ(use_spike_kernel(ConvPass::Weights, conv3x3(256, 256, 24), 0.15), !avx512);
}

// A Conv2d layer (f32, frames: not spikes) under SPIKEMESH_WINOGRAD=own against off: the own
// kernels ran (other bits) within f32 rounding for y, dx and dW (F(4×4, 3×3)'s rounding).
TEST(SpikeConvLayer, OwnWinogradLayerAgreesWithDirect) {
  AlgoGuard algo;
  WinogradGuard wino;
  set_spike_conv_algo(SpikeConvAlgo::Auto);
  auto run = [&](WinogradChoice c) {
    set_winograd_choice(c);
    auto u = test::wrap(std::make_unique<Conv2d>(Conv2dConfig{32, 24, 3, 1, 1, true, WeightInit::TorchDefault}),
                        DType::F32, 7);
    return run_layer(*u, test::random_tensor({2, 2, 32, 17, 16}, DType::F32, 19), 20);
  };
  const LayerRun own = run(WinogradChoice::Own), direct = run(WinogradChoice::Off);
  EXPECT_NE(own.y, direct.y);
  expect_close(own.y, direct.y, 1e-5, "y");
  expect_close(own.dx, direct.dx, 1e-5, "dx");
  EXPECT_NE(own.dw, direct.dw);
  double largest = 0;  // the weight gradient's sums cancel: its error scales with the largest element
  for (double v : direct.dw) largest = std::max(largest, std::fabs(v));
  for (size_t i = 0; i < direct.dw.size(); ++i) ASSERT_NEAR(own.dw[i], direct.dw[i], 2e-5 * largest) << "dw " << i;
  expect_close(own.db, direct.db, 1e-5, "db");
}

TEST(SpikeConvChoice, WinogradEnvironmentIsChecked) {
  WinogradGuard wino;
  const char* old = std::getenv("SPIKEMESH_WINOGRAD");
  const std::string saved = old ? old : "";
  setenv("SPIKEMESH_WINOGRAD", "fast", 1);
  try {
    apply_winograd_env();
    ADD_FAILURE() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("SPIKEMESH_WINOGRAD=fast: unknown Winograd choice (valid: auto, own, off)"),
              std::string::npos)
        << e.what();
  }
  setenv("SPIKEMESH_WINOGRAD", "off", 1);
  apply_winograd_env();
  EXPECT_EQ(winograd_choice(), WinogradChoice::Off);
  if (old) setenv("SPIKEMESH_WINOGRAD", saved.c_str(), 1);
  else unsetenv("SPIKEMESH_WINOGRAD");
}

TEST(SpikeConvChoice, NamesAndErrors) {
  EXPECT_EQ(spike_conv_algo_from_name("dense", "--conv-algo"), SpikeConvAlgo::Dense);
  EXPECT_EQ(spike_conv_algo_from_name("sparse", "--conv-algo"), SpikeConvAlgo::Sparse);
  EXPECT_EQ(spike_conv_algo_from_name("auto", "--conv-algo"), SpikeConvAlgo::Auto);
  try {
    spike_conv_algo_from_name("fast", "--conv-algo");
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("--conv-algo fast: unknown convolution algorithm (valid: dense, sparse, auto)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sm
