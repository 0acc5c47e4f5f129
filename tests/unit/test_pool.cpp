// test_pool.cpp — MaxPool2d / AvgPool2d against the naive padded-plane reference
// (tests/ref/pool_ref), finite-difference gradients, binary-flag propagation, -inf
// padding edge cases, invalid configurations; Flatten (view, flag, backward, gradients).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../ref/pool_ref.h"
#include "gradient_check.h"
#include "isa_guard.h"
#include "spikemesh/kernels/cpu/pool.h"
#include "spikemesh/layers/flatten.h"
#include "spikemesh/layers/pool.h"

namespace sm {
namespace {

std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

struct PoolCase {
  PoolConfig cfg;
  Shape shape;  // [T, N, C, H, W]
};

const PoolCase kCases[] = {
    {{2, 2, 0}, {2, 1, 3, 6, 8}},   // the VGG case (fast path)
    {{2, 2, 0}, {1, 2, 3, 7, 5}},   // fast path with odd H, W (last row/col dropped)
    {{3, 2, 1}, {2, 1, 3, 7, 5}},   // stride 2 + padding, non-square
    {{3, 2, 1}, {1, 1, 2, 8, 8}},   // Spikformer's stem pool on an even map (separable k3 path)
    {{3, 2, 1}, {1, 1, 1, 2, 2}},   // k3 windows all clipped
    {{3, 2, 0}, {1, 1, 2, 7, 9}},   // k3 without padding
    {{3, 3, 1}, {1, 1, 1, 7, 8}},   // k3 with stride 3
    {{3, 1, 1}, {1, 2, 2, 5, 6}},   // shape-preserving
    {{2, 1, 0}, {1, 1, 3, 4, 3}},   // overlapping windows
    {{4, 3, 2}, {1, 1, 2, 9, 10}},  // large padding
    {{5, 2, 0}, {1, 1, 1, 5, 5}},   // single output pixel per plane
    {{3, 2, 1}, {1, 2, 3, 9, 40}},  // f32: eight windows at a time (AVX2) and a scalar tail
    {{3, 2, 1}, {1, 1, 2, 6, 37}},  // the same on an odd width
    {{3, 2, 0}, {1, 1, 1, 5, 50}},  // ... without padding
    {{3, 2, 0}, {1, 1, 2, 4, 17}},  // one column short of a group of eight (all scalar)
    {{3, 2, 1}, {1, 1, 2, 5, 19}},  // exactly one group; the clipped top row in vector form
    {{3, 2, 1}, {1, 2, 2, 7, 112}}, // the stem's width: groups, an overlapping last group, edges
    {{3, 2, 0}, {1, 1, 2, 6, 35}},  // no padding: the overlapping last group ends the row
};

ref::PoolRefGeom ref_geom(const PoolCase& k) {
  ref::PoolRefGeom g;
  g.P = k.shape[0] * k.shape[1] * k.shape[2];
  g.H = k.shape[3];
  g.W = k.shape[4];
  g.k = k.cfg.kernel;
  g.stride = k.cfg.stride;
  g.pad = k.cfg.padding;
  return g;
}

template <class PoolLayer>
void check_against_reference(bool is_max) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-14 : 1e-6;
    for (const PoolCase& k : kCases) {
      PoolLayer layer(k.cfg);
      Tensor x = test::random_tensor(k.shape, dt, 5, -2, 2);  // continuous values: no ties
      Ctx ctx;
      Tensor y = layer.forward(x, ctx);
      const ref::PoolRefGeom g = ref_geom(k);
      ASSERT_EQ(y.shape(), (Shape{k.shape[0], k.shape[1], k.shape[2], g.Ho(), g.Wo()}));
      Tensor dy = test::random_tensor(y.shape(), dt, 6);
      Tensor dx = layer.backward_input(dy, ctx);
      ASSERT_EQ(dx.shape(), x.shape());
      std::vector<double> ry, rdx;
      if (is_max)
        ref::maxpool2d_ref(vec(x), g, vec(dy), ry, rdx);
      else
        ref::avgpool2d_ref(vec(x), g, vec(dy), ry, rdx);
      const std::vector<double> gy = vec(y), gdx = vec(dx);
      for (size_t i = 0; i < ry.size(); ++i)
        ASSERT_NEAR(gy[i], ry[i], tol) << layer.type() << " y[" << i << "] " << shape_str(k.shape);
      for (size_t i = 0; i < rdx.size(); ++i)
        ASSERT_NEAR(gdx[i], rdx[i], tol) << layer.type() << " dx[" << i << "] " << shape_str(k.shape);
    }
  }
}

TEST(MaxPool2d, MatchesReference) { check_against_reference<MaxPool2d>(true); }
TEST(AvgPool2d, MatchesReference) { check_against_reference<AvgPool2d>(false); }

// Spikes tie in almost every window and NaN must win as in the scalar path: the f32 kernel
// (eight windows per AVX2 step on wide rows) against the f64 one (scalar) on the same values,
// outputs and the gradient's routing (which input won) identical.
TEST(MaxPool2d, WideRowsWithTiesAndNaNMatchTheScalarPath) {
  const Shape xs{1, 2, 3, 11, 45};
  for (int pattern = 0; pattern < 2; ++pattern) {
    std::vector<double> v(static_cast<size_t>(shape_numel(xs)));
    CounterRng rng(21, "pool/ties");
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = rng.uniform(i) < 0.3 ? 1.0 : 0.0;  // spikes: ties everywhere
      if (pattern == 1 && i % 97 == 5) v[i] = std::nan("");
      if (pattern == 1 && i % 89 == 7) v[i] = -INFINITY;
    }
    std::vector<std::vector<double>> ys, dxs;
    for (DType dt : {DType::F64, DType::F32}) {
      MaxPool2d layer({3, 2, 1});
      Tensor x = Tensor::empty(xs, dt);
      for (size_t i = 0; i < v.size(); ++i) test::detail::set(x, static_cast<int64_t>(i), v[i]);
      Ctx ctx;
      Tensor y = layer.forward(x, ctx);
      Tensor dy = Tensor::empty(y.shape(), dt);
      for (int64_t i = 0; i < dy.numel(); ++i) test::detail::set(dy, i, 1.0 + static_cast<double>(i));
      ys.push_back(vec(y));
      dxs.push_back(vec(layer.backward_input(dy, ctx)));
    }
    ASSERT_EQ(ys[0].size(), ys[1].size());
    for (size_t i = 0; i < ys[0].size(); ++i) {
      if (std::isnan(ys[0][i])) {
        EXPECT_TRUE(std::isnan(ys[1][i])) << "y " << i;
      } else {
        EXPECT_EQ(ys[0][i], ys[1][i]) << "y " << i;
      }
    }
    EXPECT_EQ(dxs[0], dxs[1]) << "pattern " << pattern;  // the same winner in every window
  }
}

// MaxPool2d(3, 2, 1) on f32: the separable AVX-512 kernel (rows of 16 columns and more) against
// the AVX2 / scalar kernels on the same values — ties, NaN, ±inf and −0 included — plain and
// read through a batch norm's normalisation (a negative scale among them): pooled values and
// window offsets bitwise equal; where no NaN is present, also the naive double reference's.
TEST(MaxPool2d, SeparableAvx512KernelEqualsTheOthersBitwise) {
  if (!test::IsaGuard::avx512_available()) GTEST_SKIP() << "no AVX-512 on this CPU";
  const test::IsaGuard guard;
  const int64_t sizes[][2] = {{1, 16}, {4, 17}, {28, 28}, {3, 31}, {2, 34}, {3, 35}, {7, 36}, {8, 47}, {33, 50}, {12, 63}, {5, 112}, {16, 113}};
  for (const auto& hw : sizes)
    for (int pattern = 0; pattern < 3; ++pattern)
      for (bool normalise : {false, true}) {
        cpu::PoolGeom g;
        g.planes = 3, g.h = hw[0], g.w = hw[1], g.kernel = 3, g.stride = 2, g.padding = 1;
        const int64_t n_in = g.planes * g.h * g.w, n_out = g.planes * g.out_h() * g.out_w();
        CounterRng rng(31, "pool/avx512");
        std::vector<float> x(static_cast<size_t>(n_in));
        for (int64_t i = 0; i < n_in; ++i) {
          const double u = rng.uniform(static_cast<uint64_t>(i));
          x[i] = pattern == 0 ? static_cast<float>(u * 4 - 2) : (u < 0.3 ? 1.0f : 0.0f);  // 1, 2: ties
          if (pattern == 2 && i % 41 == 3) x[i] = std::nanf("");
          if (pattern == 2 && i % 37 == 8) x[i] = -INFINITY;
          if (pattern == 2 && i % 43 == 9) x[i] = INFINITY;
          if (pattern == 2 && i % 29 == 1) x[i] = -0.0f;
        }
        const std::vector<double> center = {0.25, -0.5, 0.0}, scale = {1.5, -0.75, 2.0}, offset = {0.1, 0.0, -1.0};
        std::vector<float> y[2];
        std::vector<uint8_t> a[2];
        for (int avx512 = 0; avx512 < 2; ++avx512) {
          cpu::allow_avx512_kernels(avx512 == 1);
          y[avx512].assign(static_cast<size_t>(n_out), 7.0f);
          a[avx512].assign(static_cast<size_t>(n_out), 99);
          if (normalise)
            cpu::maxpool2d_forward_normalized<float, uint8_t>(x.data(), g, 3, center.data(), scale.data(), offset.data(),
                                                              y[avx512].data(), a[avx512].data());
          else
            cpu::maxpool2d_forward<float, uint8_t>(x.data(), g, y[avx512].data(), a[avx512].data());
        }
        const std::string what = std::to_string(g.h) + "x" + std::to_string(g.w) + " pattern " +
                                 std::to_string(pattern) + (normalise ? " normalised" : "");
        ASSERT_TRUE(test::same_bytes(y[0], y[1])) << what;
        ASSERT_EQ(a[0], a[1]) << what;
        if (pattern == 2 || normalise) continue;
        std::vector<double> ry, rdx, xd(x.begin(), x.end()), dy(static_cast<size_t>(n_out), 1.0);
        ref::maxpool2d_ref(xd, ref::PoolRefGeom{g.planes, g.h, g.w, 3, 2, 1}, dy, ry, rdx);
        for (int64_t i = 0; i < n_out; ++i) ASSERT_EQ(static_cast<double>(y[1][i]), ry[i]) << what << " output " << i;
      }
}

// k·k > 256: window offsets no longer fit a byte (wide index path).
TEST(MaxPool2d, LargeKernelMatchesReference) {
  PoolCase k{{17, 2, 1}, {1, 1, 2, 19, 20}};
  MaxPool2d layer(k.cfg);
  Tensor x = test::random_tensor(k.shape, DType::F64, 8);
  Ctx ctx;
  Tensor y = layer.forward(x, ctx);
  Tensor dy = test::random_tensor(y.shape(), DType::F64, 9);
  Tensor dx = layer.backward_input(dy, ctx);
  std::vector<double> ry, rdx;
  ref::maxpool2d_ref(vec(x), ref_geom(k), vec(dy), ry, rdx);
  EXPECT_EQ(vec(y), ry);
  const std::vector<double> gdx = vec(dx);
  for (size_t i = 0; i < rdx.size(); ++i) ASSERT_NEAR(gdx[i], rdx[i], 1e-14) << i;
}

// Windows whose real elements are all -inf must still route the gradient to a real pixel.
TEST(MaxPool2d, PaddingNeverWinsEvenAgainstMinusInfinity) {
  const double ninf = -std::numeric_limits<double>::infinity();
  Tensor x = Tensor::full({1, 1, 1, 3, 3}, ninf, DType::F64);
  MaxPool2d layer({3, 2, 1});
  Ctx ctx;
  Tensor y = layer.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 1, 2, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.at(i), ninf);
  Tensor dy = Tensor::full(y.shape(), 1.0, DType::F64);
  Tensor dx = layer.backward_input(dy, ctx);
  double total = 0;
  for (int64_t i = 0; i < dx.numel(); ++i) total += dx.at(i);
  EXPECT_EQ(total, 4.0);
  std::vector<double> ry, rdx;
  ref::maxpool2d_ref(vec(x), ref_geom({{3, 2, 1}, {1, 1, 1, 3, 3}}), vec(dy), ry, rdx);
  EXPECT_EQ(vec(dx), rdx);
}

TEST(MaxPool2d, TiesPickTheFirstMaximum) {
  Tensor x = Tensor::zeros({1, 1, 1, 2, 2}, DType::F64);
  MaxPool2d layer({2, 2, 0});
  Ctx ctx;
  layer.forward(x, ctx);
  Tensor dx = layer.backward_input(Tensor::full({1, 1, 1, 1, 1}, 1.0, DType::F64), ctx);
  EXPECT_EQ(vec(dx), (std::vector<double>{1, 0, 0, 0}));
}

TEST(MaxPool2d, BinaryInputGivesBinaryOutput) {
  Tensor x = test::random_tensor({2, 2, 3, 6, 6}, DType::F32, 10);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = x.data<float>()[i] > 0.3f ? 1.0f : 0.0f;
  x.set_binary(true);
  Ctx ctx;
  MaxPool2d mp({2, 2, 0});
  Tensor y = mp.forward(x, ctx);
  EXPECT_TRUE(y.is_binary());
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_TRUE(y.at(i) == 0.0 || y.at(i) == 1.0);
  AvgPool2d ap({2, 2, 0});
  EXPECT_FALSE(ap.forward(x, ctx).is_binary());
  x.set_binary(false);
  EXPECT_FALSE(mp.forward(x, ctx).is_binary());
}

TEST(MaxPool2d, GradientCheck) {
  for (const PoolCase& k : kCases) {
    // Distinct values (no ties within a window) so the max is differentiable there.
    Tensor x = test::random_tensor(k.shape, DType::F64, 12, -3, 3);
    auto u = test::wrap(std::make_unique<MaxPool2d>(k.cfg));
    EXPECT_TRUE(test::check_layer_gradients(*u, x)) << shape_str(k.shape) << " k" << k.cfg.kernel;
  }
}

TEST(AvgPool2d, GradientCheck) {
  for (const PoolCase& k : kCases) {
    Tensor x = test::random_tensor(k.shape, DType::F64, 13);
    auto u = test::wrap(std::make_unique<AvgPool2d>(k.cfg));
    EXPECT_TRUE(test::check_layer_gradients(*u, x)) << shape_str(k.shape) << " k" << k.cfg.kernel;
  }
}

TEST(Pool, OutputShapeAndInvalidConfigs) {
  MaxPool2d mp({3, 2, 1});
  EXPECT_EQ(mp.output_shape({4, 7, 5}), (Shape{4, 4, 3}));
  AvgPool2d ap({2, 2, 0});
  EXPECT_EQ(ap.output_shape({4, 7, 5}), (Shape{4, 3, 2}));
  EXPECT_EQ(ap.type(), "avgpool2d");
  EXPECT_EQ(mp.type(), "maxpool2d");
  auto expect_input_error = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    }
  };
  expect_input_error([] { MaxPool2d bad({3, 1, 2}); });  // padding > kernel / 2
  expect_input_error([] { AvgPool2d bad({0, 1, 0}); });
  expect_input_error([] { AvgPool2d bad({2, 0, 0}); });
  expect_input_error([&] { ap.output_shape({4, 1, 5}); });  // window larger than the image
  expect_input_error([&] { ap.output_shape({4, 5}); });     // not [C, H, W]
}

// ---- Flatten ----------------------------------------------------------------------------

TEST(Flatten, ViewKeepsFlagAndBackwardReshapes) {
  Flatten f;
  EXPECT_EQ(f.output_shape({3, 4, 5}), (Shape{60}));
  Tensor x = test::random_tensor({2, 3, 3, 4, 5}, DType::F32, 14);
  x.set_binary(true);  // flag only matters as a flag here
  Ctx ctx;
  Tensor y = f.forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 60}));
  EXPECT_TRUE(y.is_binary());
  EXPECT_EQ(y.raw(), x.raw());  // a view, no copy
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y.at(i), x.at(i));
  Tensor dy = test::random_tensor({2, 3, 60}, DType::F32, 15);
  Tensor dx = f.backward_input(dy, ctx);
  EXPECT_EQ(dx.shape(), x.shape());
  for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_EQ(dx.at(i), dy.at(i));
}

TEST(Flatten, SlotsKeepTheirOwnShapes) {
  Flatten f;
  Ctx c0, c1;
  c1.slot = 1;
  f.forward(Tensor::zeros({1, 2, 3, 4}, DType::F64), c0);
  f.forward(Tensor::zeros({1, 2, 6, 2}, DType::F64), c1);
  EXPECT_EQ(f.backward_input(Tensor::zeros({1, 2, 12}, DType::F64), c1).shape(), (Shape{1, 2, 6, 2}));
  EXPECT_EQ(f.backward_input(Tensor::zeros({1, 2, 12}, DType::F64), c0).shape(), (Shape{1, 2, 3, 4}));
}

TEST(Flatten, GradientCheck) {
  auto u = test::wrap(std::make_unique<Flatten>());
  EXPECT_TRUE(test::check_layer_gradients(*u, test::random_tensor({2, 2, 3, 2, 3}, DType::F64, 16)));
}

}  // namespace
}  // namespace sm
