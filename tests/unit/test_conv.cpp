// test_conv.cpp — 2-D convolution kernels (oneDNN float, own im2col float/double, the
// production dispatch) against the naive double reference (tests/ref/conv_ref) on odd
// shapes; determinism of the own kernels across thread counts; the Conv2d and Conv1d
// layers: finite-difference gradients in f64 (fused and split B/W), f32 against the
// reference, accumulation, spike inputs saved as bits, parameter shapes and input errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "../ref/conv_ref.h"
#include "conv_test_util.h"
#include "gradient_check.h"
#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cpu/conv.h"
#include "spikemesh/kernels/cpu/winograd.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/conv2d.h"

namespace sm {
namespace ref {
void PrintTo(const ConvRefShape& s, std::ostream* os) {
  *os << "{n " << s.n << ", cin " << s.cin << ", " << s.h << "x" << s.w << ", cout " << s.cout << ", k " << s.k
      << ", stride " << s.stride << ", pad " << s.pad << "}";
}
}  // namespace ref
namespace {

std::vector<double> random_vec(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  CounterRng rng(seed, "test_conv");
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng.uniform(i);
  return v;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

void set_values(Tensor& t, const std::vector<double>& v) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) test::detail::set(t, i, v[i]);
}

Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  set_values(t, v);
  return t;
}

// ||got − want||₂ ≤ rtol · ||want||₂ (+ a tiny absolute floor for all-zero references).
template <typename T>
::testing::AssertionResult close(const std::vector<T>& got, const std::vector<double>& want, double rtol,
                                 const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  double err = 0, norm = 0, worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += want[i] * want[i];
    if (std::fabs(d) > worst) worst = std::fabs(d), worst_i = i;
  }
  if (std::sqrt(err) <= rtol * std::sqrt(norm) + 1e-300) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << std::sqrt(err / norm) << " > " << rtol
                                       << "; worst at " << worst_i << ": " << static_cast<double>(got[worst_i])
                                       << " vs " << want[worst_i];
}

using test::geometry_of;

// One convolution implementation under test, for scalar T.
template <typename T>
struct ConvImpl {
  std::string name;
  std::function<void(const cpu::Conv2dGeometry&, const T*, const T*, const T*, T*)> forward;
  std::function<void(const cpu::Conv2dGeometry&, const T*, const T*, T*)> backward_data;
  std::function<void(const cpu::Conv2dGeometry&, const T*, const T*, T*, T*)> backward_weights;
};

std::vector<ConvImpl<float>> float_impls() {
  return {{"dnnl<float>", cpu::conv2d_forward_dnnl, cpu::conv2d_backward_data_dnnl,
           cpu::conv2d_backward_weights_dnnl},
          {"im2col<float>", cpu::conv2d_forward_im2col<float>, cpu::conv2d_backward_data_im2col<float>,
           cpu::conv2d_backward_weights_im2col<float>},
          {"dispatch<float>", cpu::conv2d_forward<float>, cpu::conv2d_backward_data<float>,
           cpu::conv2d_backward_weights<float>}};
}

std::vector<ConvImpl<double>> double_impls() {
  return {{"im2col<double>", cpu::conv2d_forward_im2col<double>, cpu::conv2d_backward_data_im2col<double>,
           cpu::conv2d_backward_weights_im2col<double>},
          {"dispatch<double>", cpu::conv2d_forward<double>, cpu::conv2d_backward_data<double>,
           cpu::conv2d_backward_weights<double>}};
}

template <typename T>
void check_impl(const ConvImpl<T>& impl, const ref::ConvRefShape& s, double rtol) {
  const cpu::Conv2dGeometry g = geometry_of(s);
  const int64_t nx = s.n * s.cin * s.h * s.w, nw = s.cout * s.cin * s.k * s.k, ny = s.n * s.cout * s.ho() * s.wo();
  const auto x = random_vec(nx, 1), w = random_vec(nw, 2), b = random_vec(s.cout, 3), dy = random_vec(ny, 4);
  const auto dw0 = random_vec(nw, 5), db0 = random_vec(s.cout, 6);
  const auto xt = cast<T>(x), wt = cast<T>(w), bt = cast<T>(b), dyt = cast<T>(dy);

  // Forward with and without bias.
  std::vector<T> y(ny, T(-7));
  impl.forward(g, xt.data(), wt.data(), bt.data(), y.data());
  EXPECT_TRUE(close(y, ref::conv2d_forward(s, x, w, b), rtol, impl.name + " forward"));
  impl.forward(g, xt.data(), wt.data(), nullptr, y.data());
  EXPECT_TRUE(close(y, ref::conv2d_forward(s, x, w, {}), rtol, impl.name + " forward (no bias)"));

  // Backward data overwrites dx.
  std::vector<T> dx(nx, T(3));
  impl.backward_data(g, dyt.data(), wt.data(), dx.data());
  EXPECT_TRUE(close(dx, ref::conv2d_backward_data(s, dy, w), rtol, impl.name + " backward data"));

  // Backward weights accumulates into dw and dbias.
  std::vector<T> dw = cast<T>(dw0), db = cast<T>(db0);
  impl.backward_weights(g, xt.data(), dyt.data(), dw.data(), db.data());
  auto want_dw = ref::conv2d_backward_weights(s, x, dy);
  auto want_db = ref::conv2d_backward_bias(s, dy);
  for (int64_t i = 0; i < nw; ++i) want_dw[i] += static_cast<double>(static_cast<T>(dw0[i]));
  for (int64_t i = 0; i < s.cout; ++i) want_db[i] += static_cast<double>(static_cast<T>(db0[i]));
  EXPECT_TRUE(close(dw, want_dw, rtol, impl.name + " backward weights (accumulated)"));
  EXPECT_TRUE(close(db, want_db, rtol, impl.name + " backward bias (accumulated)"));
  std::vector<T> dw_only(nw, T(0));
  impl.backward_weights(g, xt.data(), dyt.data(), dw_only.data(), nullptr);
  EXPECT_TRUE(close(dw_only, ref::conv2d_backward_weights(s, x, dy), rtol, impl.name + " backward weights"));
}

class ConvKernel : public ::testing::TestWithParam<ref::ConvRefShape> {};


TEST_P(ConvKernel, FloatMatchesReference) {
  for (const auto& impl : float_impls()) check_impl(impl, GetParam(), 1e-5);
}

TEST_P(ConvKernel, DoubleMatchesReference) {
  for (const auto& impl : double_impls()) check_impl(impl, GetParam(), 1e-12);
}

std::string shape_name(const ::testing::TestParamInfo<ref::ConvRefShape>& info) {
  const auto& s = info.param;
  return "n" + std::to_string(s.n) + "_c" + std::to_string(s.cin) + "_" + std::to_string(s.h) + "x" +
         std::to_string(s.w) + "_o" + std::to_string(s.cout) + "_k" + std::to_string(s.k) + "_s" +
         std::to_string(s.stride) + "_p" + std::to_string(s.pad);
}

// {n, cin, h, w, cout, k, stride, pad}
INSTANTIATE_TEST_SUITE_P(
    OddShapes, ConvKernel,
    ::testing::Values(ref::ConvRefShape{2, 3, 7, 5, 4, 3, 1, 1}, ref::ConvRefShape{1, 5, 9, 6, 7, 3, 2, 0},
                      ref::ConvRefShape{3, 7, 8, 11, 5, 5, 2, 2}, ref::ConvRefShape{2, 3, 6, 6, 5, 1, 1, 0},
                      ref::ConvRefShape{4, 5, 10, 7, 3, 1, 2, 0}, ref::ConvRefShape{2, 3, 5, 5, 6, 5, 1, 2},
                      ref::ConvRefShape{5, 2, 12, 9, 8, 3, 2, 1}, ref::ConvRefShape{1, 16, 5, 4, 17, 3, 1, 1},
                      ref::ConvRefShape{2, 32, 6, 6, 24, 3, 1, 1}, ref::ConvRefShape{3, 20, 13, 6, 40, 5, 2, 1},
                      ref::ConvRefShape{1, 7, 3, 3, 5, 3, 1, 0}, ref::ConvRefShape{2, 3, 4, 9, 5, 3, 2, 2},
                      // multi-block GEMM: K = 630 > 256, M = 100 > 96
                      ref::ConvRefShape{2, 70, 9, 9, 100, 3, 1, 1},
                      // output plane 48x46 = 2208 > one 2048-column GEMM panel
                      ref::ConvRefShape{1, 3, 48, 46, 4, 3, 1, 1}),
    shape_name);

// oneDNN's Winograd F(4×4, 3×3) kernels (AVX-512 CPUs only; skipped elsewhere), over batches
// split into chunks of ~64 MB of transformed tiles (one chunk at these sizes), on planes down
// to 6×6 (two 4×4 output tiles per side, half of them padding). Tolerance: the
// transforms (entries up to 5.25 in magnitude) round every tile, so the relative L2 error is
// ~1e-6 here against ~1e-7 for the direct kernel; 2e-5 bounds it with margin (documented in
// docs/architecture.md §4b), still 50× below the f32-vs-f64 spread of a training step.
TEST(ConvWinograd, FloatMatchesReference) {
  const std::vector<ref::ConvRefShape> shapes = {
      {2, 32, 17, 19, 48, 3, 1, 1}, {9, 64, 16, 16, 64, 3, 1, 1}, {3, 16, 20, 20, 24, 3, 1, 0}, {17, 24, 16, 18, 32, 3, 1, 1},
      {2, 128, 12, 12, 160, 3, 1, 1},   // 12×12 planes and long reductions (the VGG's 512-channel layers' form)
      {5, 96, 6, 6, 64, 3, 1, 1}};      // 6×6 planes (the VGG's last two layers' form)
  const ConvImpl<float> wino{"winograd<float>", cpu::conv2d_forward_winograd_dnnl, cpu::conv2d_backward_data_winograd_dnnl,
                             cpu::conv2d_backward_weights_winograd_dnnl};
  int ran = 0;
  for (const auto& s : shapes) {
    if (!cpu::conv2d_winograd_available(geometry_of(s))) continue;
    SCOPED_TRACE(shape_name(::testing::TestParamInfo<ref::ConvRefShape>(s, 0)));
    check_impl(wino, s, 2e-5);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "oneDNN has no Winograd kernel on this CPU (it needs AVX-512)";
  // where it has none for a geometry (stride 2, 5×5), it says so
  EXPECT_FALSE(cpu::conv2d_winograd_available(geometry_of({2, 32, 17, 19, 48, 3, 2, 1})));
  EXPECT_FALSE(cpu::conv2d_winograd_available(geometry_of({2, 32, 17, 19, 48, 5, 1, 2})));
}

// Under a DyLayoutReuse scope the weight gradient takes the blocked dy the input gradient
// converted (per chunk of samples) instead of converting again: the same bits as without the
// scope, for oneDNN's direct pair and its Winograd pair (two chunks of samples here: 12 + 2),
// and a dy changed after its scope ended is converted afresh.
TEST(ConvDyLayoutReuse, SameBitsAsConvertingTwice) {
  const ref::ConvRefShape s{14, 128, 48, 48, 128, 3, 1, 1};
  const cpu::Conv2dGeometry g = geometry_of(s);
  std::vector<float> x = cast<float>(random_vec(g.input_numel(), 1)), w = cast<float>(random_vec(128 * 128 * 9, 2)),
                     dy = cast<float>(random_vec(g.output_numel(), 3));
  using DataFn = void (*)(const cpu::Conv2dGeometry&, const float*, const float*, float*);
  using WeightsFn = void (*)(const cpu::Conv2dGeometry&, const float*, const float*, float*, float*);
  struct Pair {
    const char* name;
    DataFn data;
    WeightsFn weights;
  };
  std::vector<Pair> pairs = {{"direct", cpu::conv2d_backward_data_dnnl, cpu::conv2d_backward_weights_dnnl}};
  if (cpu::conv2d_winograd_available(g))
    pairs.push_back({"winograd", cpu::conv2d_backward_data_winograd_dnnl, cpu::conv2d_backward_weights_winograd_dnnl});
  for (const Pair& p : pairs) {
    SCOPED_TRACE(p.name);
    auto both = [&](bool reuse, std::vector<float>& dx, std::vector<float>& dw) {
      dx.assign(g.input_numel(), 0.0f);
      dw.assign(w.size(), 0.0f);
      std::unique_ptr<cpu::DyLayoutReuse> scope = reuse ? std::make_unique<cpu::DyLayoutReuse>() : nullptr;
      p.data(g, dy.data(), w.data(), dx.data());
      p.weights(g, x.data(), dy.data(), dw.data(), nullptr);
    };
    std::vector<float> dx0, dw0, dx1, dw1;
    both(false, dx0, dw0);
    both(true, dx1, dw1);
    EXPECT_EQ(dx0, dx1);
    EXPECT_EQ(dw0, dw1);
    {  // a scope whose kept dy is never taken; dy then changes
      const cpu::DyLayoutReuse scope;
      p.data(g, dy.data(), w.data(), dx1.data());
    }
    for (float& v : dy) v = -v;
    std::vector<float> dw2(w.size(), 0.0f);
    p.weights(g, x.data(), dy.data(), dw2.data(), nullptr);
    for (size_t i = 0; i < dw2.size(); ++i) ASSERT_EQ(dw2[i], -dw0[i]) << "element " << i;
    for (float& v : dy) v = -v;
  }
}

// The weight gradient of spikes kept as bits, unpacked straight into the primitive's blocked
// input (direct, and Winograd in two chunks of samples: 12 + 2): the same bits as from the
// unpacked floats; a plane of 6×6 (36 bits, no byte start per plane) is refused.
TEST(ConvWeightsFromBits, SameBitsAsFromUnpackedSpikes) {
  const ref::ConvRefShape s{14, 128, 48, 48, 128, 3, 1, 1};
  const cpu::Conv2dGeometry g = geometry_of(s);
  CounterRng rng(21, "bits");
  Tensor x = Tensor::empty({g.batch, g.in_channels, g.height, g.width}, DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.uniform(i) < 0.15 ? 1.0f : 0.0f;
  const Tensor bits = pack_bits(x);
  const std::vector<float> dy = cast<float>(random_vec(g.output_numel(), 22));
  std::vector<bool> modes = {false};
  if (cpu::conv2d_winograd_available(g)) modes.push_back(true);
  for (bool winograd : modes) {
    SCOPED_TRACE(winograd ? "winograd" : "direct");
    std::vector<float> dw0(128 * 128 * 9, 0.0f), dw1(dw0.size(), 0.0f), db0(128, 0.0f), db1(128, 0.0f);
    (winograd ? cpu::conv2d_backward_weights_winograd_dnnl : cpu::conv2d_backward_weights_dnnl)(
        g, x.data<float>(), dy.data(), dw0.data(), db0.data());
    if (!cpu::conv2d_backward_weights_bits_dnnl(g, bits.data<uint8_t>(), dy.data(), dw1.data(), db1.data(), winograd))
      GTEST_SKIP() << "oneDNN reads a plain input here (no channel-blocked layout on this CPU)";
    EXPECT_EQ(dw0, dw1);
    EXPECT_EQ(db0, db1);
  }
  cpu::Conv2dGeometry six = g;
  six.height = six.width = 6;
  std::vector<float> dw(128 * 128 * 9, 0.0f);
  EXPECT_FALSE(cpu::conv2d_backward_weights_bits_dnnl(six, bits.data<uint8_t>(), dy.data(), dw.data(), nullptr, false));
  EXPECT_EQ(dw, std::vector<float>(dw.size(), 0.0f));
}

// The own Winograd F(2×2, 3×3) (winograd.h: the dense 3×3 passes where oneDNN has no
// Winograd): forward and input gradient against the naive double reference; the weight
// gradient goes through oneDNN direct, as in production. Shapes: odd planes (partial 2×2
// tiles), padding 0–2, channel counts below and past the GEMM's micro-tile, tile counts that
// leave a partial block. Tolerance: F(2, 3)'s transforms have entries of magnitude ≤ 1 (½ in
// G), so the error stays near the direct kernel's (relative L2 ≤ 3e-7 measured); 5e-6 bounds
// it with margin (docs/architecture.md §4b).
TEST(ConvWinogradOwn, FloatMatchesReference) {
  const std::vector<ref::ConvRefShape> shapes = {{2, 32, 17, 19, 48, 3, 1, 1}, {3, 5, 9, 7, 7, 3, 1, 0},
                                                 {2, 16, 11, 12, 17, 3, 1, 2}, {5, 64, 24, 24, 64, 3, 1, 1},
                                                 {1, 3, 3, 3, 2, 3, 1, 0},     {2, 4, 2, 5, 3, 3, 1, 1}};
  const ConvImpl<float> wino{"winograd_f2", cpu::conv2d_forward_winograd_f2, cpu::conv2d_backward_data_winograd_f2,
                             cpu::conv2d_backward_weights_winograd_f2};
  for (const auto& s : shapes) {
    SCOPED_TRACE(shape_name(::testing::TestParamInfo<ref::ConvRefShape>(s, 0)));
    ASSERT_TRUE(cpu::winograd_f2_applies(geometry_of(s)));
    check_impl(wino, s, 5e-6);
  }
  EXPECT_FALSE(cpu::winograd_f2_applies(geometry_of({2, 8, 9, 9, 8, 3, 2, 1})));  // stride 2
  EXPECT_FALSE(cpu::winograd_f2_applies(geometry_of({2, 8, 9, 9, 8, 5, 1, 2})));  // 5×5
  EXPECT_FALSE(cpu::winograd_f2_applies(geometry_of({2, 8, 9, 9, 8, 3, 1, 3})));  // padding 3
}

// The own F(4×4, 3×3) (the input gradient where oneDNN has no Winograd): the same shapes
// (planes that leave partial 4×4 tiles, padding 0–2) against the naive double reference. Its
// transforms have entries up to 8, so its error is about ten times F(2, 3)'s (relative L2
// ~1e-6 measured); 2e-5 bounds it, oneDNN's F(4×4, 3×3) bound in ConvWinograd.
TEST(ConvWinogradOwn, F4FloatMatchesReference) {
  const std::vector<ref::ConvRefShape> shapes = {{2, 32, 17, 19, 48, 3, 1, 1}, {3, 5, 9, 7, 7, 3, 1, 0},
                                                 {2, 16, 11, 12, 17, 3, 1, 2}, {5, 64, 24, 24, 64, 3, 1, 1},
                                                 {1, 3, 3, 3, 2, 3, 1, 0},     {2, 4, 2, 5, 3, 3, 1, 1},
                                                 {3, 40, 12, 12, 24, 3, 1, 1}, {3, 8, 40, 44, 6, 3, 1, 1}};
  const ConvImpl<float> wino{"winograd_f4", cpu::conv2d_forward_winograd_f4, cpu::conv2d_backward_data_winograd_f4,
                             cpu::conv2d_backward_weights_winograd_f4};
  for (const auto& s : shapes) {
    SCOPED_TRACE(shape_name(::testing::TestParamInfo<ref::ConvRefShape>(s, 0)));
    check_impl(wino, s, 2e-5);
  }
}

// Bitwise the same result for 1, 2 and 3 threads, although the blocks of tiles differ (330
// tiles: blocks of 96, 48 and 32 tiles), and so does the split of the weight gradient's
// transforms and positions (F(2, 3): 330 tiles, two blocks of the reduction).
TEST(ConvWinogradOwn, BitwiseIndependentOfThreads) {
  const ref::ConvRefShape s{3, 24, 21, 20, 40, 3, 1, 1};
  const cpu::Conv2dGeometry g = geometry_of(s);
  const int64_t nx = s.n * s.cin * s.h * s.w, nw = s.cout * s.cin * 9, ny = s.n * s.cout * s.ho() * s.wo();
  const auto x = cast<float>(random_vec(nx, 21)), w = cast<float>(random_vec(nw, 22)),
             b = cast<float>(random_vec(s.cout, 23)), dy = cast<float>(random_vec(ny, 24));
  std::vector<std::vector<float>> results;
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> y(ny), dx(nx);
    cpu::conv2d_forward_winograd_f2(g, x.data(), w.data(), b.data(), y.data());
    cpu::conv2d_backward_data_winograd_f2(g, dy.data(), w.data(), dx.data());
    y.insert(y.end(), dx.begin(), dx.end());
    cpu::conv2d_backward_data_winograd_f4(g, dy.data(), w.data(), dx.data());
    y.insert(y.end(), dx.begin(), dx.end());
    std::vector<float> dw(w), db(b);
    cpu::conv2d_backward_weights_winograd_f2(g, x.data(), dy.data(), dw.data(), db.data());
    cpu::conv2d_backward_weights_winograd_f4(g, x.data(), dy.data(), dw.data(), nullptr);
    y.insert(y.end(), dw.begin(), dw.end());
    y.insert(y.end(), db.begin(), db.end());
    results.push_back(y);
  }
  omp_set_num_threads(saved_threads);
  for (size_t r = 1; r < results.size(); ++r)
    for (size_t i = 0; i < results[0].size(); ++i)
      ASSERT_EQ(results[0][i], results[r][i]) << "element " << i << " threads run " << r;
}

// The 1×1 channel convolution (Conv1d kernels): float (oneDNN batched matmul / 1×1 conv)
// and double (own) against the reference as a 1×1 Conv2d on [batch, C, 1, L].
template <typename T>
void check_conv1x1(int64_t batch, int64_t cin, int64_t cout, int64_t len, double rtol) {
  ref::ConvRefShape s{batch, cin, 1, len, cout, 1, 1, 0};
  const auto x = random_vec(batch * cin * len, 71), w = random_vec(cout * cin, 72), b = random_vec(cout, 73),
             dy = random_vec(batch * cout * len, 74), dw0 = random_vec(cout * cin, 75), db0 = random_vec(cout, 76);
  const auto xt = cast<T>(x), wt = cast<T>(w), bt = cast<T>(b), dyt = cast<T>(dy);
  const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " conv1x1 b" + std::to_string(batch) +
                           " c" + std::to_string(cin) + " o" + std::to_string(cout) + " l" + std::to_string(len);
  std::vector<T> y(batch * cout * len, T(5)), dx(batch * cin * len, T(5));
  cpu::conv1x1_forward<T>(batch, cin, cout, len, xt.data(), wt.data(), bt.data(), y.data());
  EXPECT_TRUE(close(y, ref::conv2d_forward(s, x, w, b), rtol, what + " forward"));
  cpu::conv1x1_forward<T>(batch, cin, cout, len, xt.data(), wt.data(), nullptr, y.data());
  EXPECT_TRUE(close(y, ref::conv2d_forward(s, x, w, {}), rtol, what + " forward (no bias)"));
  cpu::conv1x1_backward_data<T>(batch, cin, cout, len, dyt.data(), wt.data(), dx.data());
  EXPECT_TRUE(close(dx, ref::conv2d_backward_data(s, dy, w), rtol, what + " backward data"));
  std::vector<T> dw = cast<T>(dw0), db = cast<T>(db0);
  cpu::conv1x1_backward_weights<T>(batch, cin, cout, len, xt.data(), dyt.data(), dw.data(), db.data());
  auto want_dw = ref::conv2d_backward_weights(s, x, dy);
  auto want_db = ref::conv2d_backward_bias(s, dy);
  for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += static_cast<double>(static_cast<T>(dw0[i]));
  for (size_t i = 0; i < want_db.size(); ++i) want_db[i] += static_cast<double>(static_cast<T>(db0[i]));
  EXPECT_TRUE(close(dw, want_dw, rtol, what + " backward weights (accumulated)"));
  EXPECT_TRUE(close(db, want_db, rtol, what + " backward bias (accumulated)"));
}

TEST(Conv1x1Kernel, MatchesReference) {
  // {batch, cin, cout, len}
  for (auto d : std::vector<std::array<int64_t, 4>>{{1, 1, 1, 1}, {3, 5, 7, 11}, {2, 16, 48, 9}, {4, 33, 17, 64}, {1, 7, 3, 1}}) {
    check_conv1x1<float>(d[0], d[1], d[2], d[3], 1e-5);
    check_conv1x1<double>(d[0], d[1], d[2], d[3], 1e-12);
  }
}

// The own kernels give identical bits for 1, 2 and 3 threads and for small batches (GEMM
// split) versus large batches (samples split) — the fp64 layout-comparison guarantee.
TEST(ConvKernelDeterminism, Im2colDoubleIsBitwiseIndependentOfThreads) {
  for (int64_t batch : {1, 6}) {
    ref::ConvRefShape s{batch, 32, 16, 15, 64, 3, 1, 1};
    const cpu::Conv2dGeometry g = geometry_of(s);
    const int64_t nx = s.n * s.cin * s.h * s.w, nw = s.cout * s.cin * 9, ny = s.n * s.cout * s.ho() * s.wo();
    const auto x = random_vec(nx, 11), w = random_vec(nw, 12), b = random_vec(s.cout, 13), dy = random_vec(ny, 14);
    std::vector<std::vector<double>> results;
    const int saved_threads = omp_get_max_threads();
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<double> y(ny), dx(nx), dw(nw, 0.5), db(s.cout, 0.25);
      cpu::conv2d_forward_im2col<double>(g, x.data(), w.data(), b.data(), y.data());
      cpu::conv2d_backward_data_im2col<double>(g, dy.data(), w.data(), dx.data());
      cpu::conv2d_backward_weights_im2col<double>(g, x.data(), dy.data(), dw.data(), db.data());
      std::vector<double> all;
      for (auto* v : {&y, &dx, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
      results.push_back(all);
    }
    omp_set_num_threads(saved_threads);
    for (size_t r = 1; r < results.size(); ++r)
      for (size_t i = 0; i < results[0].size(); ++i)
        ASSERT_EQ(results[0][i], results[r][i]) << "batch " << batch << " element " << i << " threads run " << r;
  }
}

// ---- Conv2d layer ------------------------------------------------------------------------

std::unique_ptr<Unit> conv2d_unit(const Conv2dConfig& c, DType dt = DType::F64) {
  return test::wrap(std::make_unique<Conv2d>(c), dt);
}

TEST(Conv2dLayer, ParamNamesShapesAndInit) {
  Conv2dConfig c{5, 7, 3, 1, 1, true, WeightInit::TorchDefault};
  auto u = conv2d_unit(c);
  auto ps = u->params();
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0]->local_name, "weight");
  EXPECT_EQ(ps[0]->shape, (Shape{7, 5, 3, 3}));
  EXPECT_EQ(ps[1]->local_name, "bias");
  EXPECT_EQ(ps[1]->shape, (Shape{7}));
  const double bound = 1.0 / std::sqrt(5.0 * 9.0);  // TorchDefault: U(±1/sqrt(fan_in))
  for (Param* p : ps)
    for (int64_t i = 0; i < p->value.numel(); ++i) EXPECT_LE(std::fabs(p->value.at(i)), bound + 1e-12);
  Conv2dConfig nb = c;
  nb.bias = false;
  EXPECT_EQ(conv2d_unit(nb)->params().size(), 1u);
}

TEST(Conv2dLayer, OutputShapeAndInputErrors) {
  Conv2d conv(Conv2dConfig{64, 128, 3, 2, 1, true, WeightInit::TorchDefault});
  EXPECT_EQ(conv.output_shape({64, 24, 17}), (Shape{128, 12, 9}));
  try {
    conv.output_shape({32, 24, 24});
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("conv2d expects 64 input channels, got 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(conv.output_shape({64, 24}), Error);
  Conv2d big(Conv2dConfig{3, 4, 5, 1, 0, true, WeightInit::TorchDefault});
  EXPECT_THROW(big.output_shape({3, 4, 9}), Error);  // 5x5 kernel on a 4-row input
}

TEST(Conv2dLayer, GradientCheckF64) {
  // {in, out, kernel, stride, padding, bias}; inputs [T, N, C, H, W] with odd sizes.
  struct Case { Conv2dConfig c; Shape x; };
  const std::vector<Case> cases = {
      {{3, 4, 3, 1, 1, true, WeightInit::TorchDefault}, {2, 2, 3, 5, 6}},
      {{2, 5, 5, 2, 2, false, WeightInit::KaimingNormalFanOut}, {1, 1, 2, 7, 6}},
      {{5, 3, 3, 2, 0, true, WeightInit::TorchDefault}, {2, 1, 5, 7, 8}},
      {{4, 6, 1, 1, 0, true, WeightInit::TorchDefault}, {3, 2, 4, 3, 2}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    auto u = conv2d_unit(cases[i].c);
    Tensor x = test::random_tensor(cases[i].x, DType::F64, 100 + i);
    EXPECT_TRUE(test::check_layer_gradients(*u, x)) << "case " << i;
  }
}

// The f32 layer (oneDNN) against the reference on [T, N, ...] input: forward, dx, dW, db.
TEST(Conv2dLayer, F32MatchesReference) {
  Conv2dConfig c{3, 6, 3, 2, 1, true, WeightInit::TorchDefault};
  auto u = conv2d_unit(c, DType::F32);
  const Shape xs{2, 3, 3, 9, 7};
  ref::ConvRefShape s{6, 3, 9, 7, 6, 3, 2, 1};
  const auto xv = random_vec(shape_numel(xs), 21);
  Tensor x = tensor_of(xv, xs, DType::F32);
  auto ps = u->params();
  const auto w = vec(ps[0]->value), b = vec(ps[1]->value);
  Ctx ctx;
  Tensor y = u->forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 6, 5, 4}));
  EXPECT_TRUE(close(vec(y), ref::conv2d_forward(s, xv, w, b), 1e-5, "forward"));
  const auto dyv = random_vec(y.numel(), 22);
  u->zero_grad();
  Tensor dx = u->backward_input(tensor_of(dyv, y.shape(), DType::F32), ctx);
  EXPECT_EQ(dx.shape(), xs);
  EXPECT_TRUE(close(vec(dx), ref::conv2d_backward_data(s, dyv, w), 1e-5, "dx"));
  EXPECT_TRUE(close(vec(ps[0]->grad), ref::conv2d_backward_weights(s, xv, dyv), 1e-5, "dW"));
  EXPECT_TRUE(close(vec(ps[1]->grad), ref::conv2d_backward_bias(s, dyv), 1e-5, "db"));
}

// Gradients accumulate over backward calls (fused and split), never overwrite.
TEST(Conv2dLayer, GradientsAccumulate) {
  auto u = conv2d_unit({3, 4, 3, 1, 1, true, WeightInit::TorchDefault});
  Tensor x = test::random_tensor({2, 1, 3, 5, 5}, DType::F64, 31);
  Tensor dy = test::random_tensor({2, 1, 4, 5, 5}, DType::F64, 32);
  Ctx ctx;
  u->zero_grad();
  u->forward(x, ctx);
  u->backward_input(dy, ctx);
  const auto once = vec(u->flat_grad());
  u->forward(x, ctx);
  ctx.split_wgrad = true;
  u->backward_input(dy, ctx);
  u->backward_weight(ctx);
  const auto twice = vec(u->flat_grad());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12 * (1 + std::fabs(once[i])));
}

// A spike input flagged binary is saved as bits; its weight gradient must equal the one
// computed from the same values saved unpacked (f32: oneDNN, f64: own kernels).
template <class MakeUnit>
void check_spike_input(MakeUnit make_unit, const Shape& xs, DType dt) {
  auto packed = make_unit(dt), plain = make_unit(dt);
  Tensor spikes = Tensor::empty(xs, dt);
  CounterRng rng(41, "spikes");
  for (int64_t i = 0; i < spikes.numel(); ++i) test::detail::set(spikes, i, rng.uniform(i) < 0.3 ? 1.0 : 0.0);
  Tensor flagged = spikes.clone();
  flagged.set_binary(true);
  spikes.set_binary(false);
  Ctx ctx;
  Tensor y1 = packed->forward(flagged, ctx);
  Tensor y2 = plain->forward(spikes, ctx);
  // The packed layer keeps its own bit copy: clobbering the caller's tensor after forward
  // must not change its weight gradient (a layer that kept a reference would see zeros).
  flagged.fill(0.0);
  Tensor dy = test::random_tensor(y1.shape(), dt, 42);
  packed->zero_grad();
  plain->zero_grad();
  ctx.split_wgrad = true;  // W runs from the saved (packed) input after B
  Tensor dx1 = packed->backward_input(dy, ctx);
  packed->backward_weight(ctx);
  ctx.split_wgrad = false;
  Tensor dx2 = plain->backward_input(dy, ctx);
  EXPECT_EQ(vec(y1), vec(y2));
  EXPECT_EQ(vec(dx1), vec(dx2));
  const auto g1 = vec(packed->flat_grad()), g2 = vec(plain->flat_grad());
  ASSERT_EQ(g1.size(), g2.size());
  double norm = 0;
  for (double g : g2) norm += std::fabs(g);
  EXPECT_GT(norm, 0.0);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_EQ(g1[i], g2[i]) << "grad element " << i;
}

TEST(Conv2dLayer, SpikeInputSavedAsBitsGivesSameWeightGrad) {
  auto make = [](DType dt) { return conv2d_unit({5, 4, 3, 1, 1, true, WeightInit::TorchDefault}, dt); };
  check_spike_input(make, {2, 3, 5, 7, 6}, DType::F32);
  check_spike_input(make, {2, 3, 5, 7, 6}, DType::F64);
}

// ---- Conv1d layer ------------------------------------------------------------------------

std::unique_ptr<Unit> conv1d_unit(const Conv1dConfig& c, DType dt = DType::F64) {
  return test::wrap(std::make_unique<Conv1d>(c), dt);
}

TEST(Conv1dLayer, ParamShapesAndInputErrors) {
  Conv1dConfig c{6, 10, true, WeightInit::TruncNormal002};
  auto u = conv1d_unit(c);
  auto ps = u->params();
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0]->shape, (Shape{10, 6, 1}));
  EXPECT_EQ(ps[1]->shape, (Shape{10}));
  for (int64_t i = 0; i < ps[1]->value.numel(); ++i) EXPECT_EQ(ps[1]->value.at(i), 0.0);  // trunc-normal: bias 0
  Conv1d conv(c);
  EXPECT_EQ(conv.output_shape({6, 13}), (Shape{10, 13}));
  try {
    conv.output_shape({5, 13});
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("conv1d expects 6 input channels, got 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(conv.output_shape({6, 4, 4}), Error);
}

TEST(Conv1dLayer, GradientCheckF64) {
  auto u = conv1d_unit({5, 3, true, WeightInit::TorchDefault});
  EXPECT_TRUE(test::check_layer_gradients(*u, test::random_tensor({2, 3, 5, 7}, DType::F64, 51)));
  auto nb = conv1d_unit({3, 7, false, WeightInit::TorchDefault});
  EXPECT_TRUE(test::check_layer_gradients(*nb, test::random_tensor({1, 1, 3, 1}, DType::F64, 52)));
}

TEST(Conv1dLayer, MatchesReferenceF32AndF64) {
  for (DType dt : {DType::F32, DType::F64}) {
    auto u = conv1d_unit({7, 5, true, WeightInit::TorchDefault}, dt);
    const Shape xs{3, 2, 7, 11};
    ref::ConvRefShape s{6, 7, 1, 11, 5, 1, 1, 0};
    const auto xv = random_vec(shape_numel(xs), 61);
    auto ps = u->params();
    const auto w = vec(ps[0]->value), b = vec(ps[1]->value);
    Ctx ctx;
    Tensor y = u->forward(tensor_of(xv, xs, dt), ctx);
    EXPECT_EQ(y.shape(), (Shape{3, 2, 5, 11}));
    const double tol = dt == DType::F32 ? 1e-5 : 1e-12;
    EXPECT_TRUE(close(vec(y), ref::conv2d_forward(s, xv, w, b), tol, "forward"));
    const auto dyv = random_vec(y.numel(), 62);
    u->zero_grad();
    Tensor dx = u->backward_input(tensor_of(dyv, y.shape(), dt), ctx);
    EXPECT_TRUE(close(vec(dx), ref::conv2d_backward_data(s, dyv, w), tol, "dx"));
    EXPECT_TRUE(close(vec(ps[0]->grad), ref::conv2d_backward_weights(s, xv, dyv), tol, "dW"));
    EXPECT_TRUE(close(vec(ps[1]->grad), ref::conv2d_backward_bias(s, dyv), tol, "db"));
  }
}

TEST(Conv1dLayer, SpikeInputSavedAsBitsGivesSameWeightGrad) {
  auto make = [](DType dt) { return conv1d_unit({9, 5, true, WeightInit::TorchDefault}, dt); };
  check_spike_input(make, {2, 3, 9, 13}, DType::F32);
  check_spike_input(make, {2, 3, 9, 13}, DType::F64);
}

}  // namespace
}  // namespace sm
