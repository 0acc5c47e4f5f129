// test_dropout.cpp — Dropout: one mask per (sample, feature) shared by all T steps, drawn
// from CounterRng(seed, "dropout/"+name) keyed by (step, global sample index, feature) so
// batch splits agree; keep rate ≈ 1-p; gradient = mask·scale; identity in eval / p = 0.
#include <gtest/gtest.h>

#include <cmath>

#include "gradient_check.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/layers/dropout.h"

using namespace sm;

namespace {

// A named dropout layer (the name keys its random stream).
std::unique_ptr<Dropout> named_dropout(double p, const std::string& name = "classifier.1") {
  auto d = std::make_unique<Dropout>(p);
  d->set_name(name);
  return d;
}

}  // namespace

TEST(Dropout, MaskIsSharedOverTimeAndDrawnFromTheNamedCounterStream) {
  const double p = 0.25;
  auto d = named_dropout(p);
  const int64_t T = 5, N = 3, C = 2, L = 7, F = C * L;
  Tensor x = test::random_tensor({T, N, C, L}, DType::F64, 1, 0.5, 1.5);  // nonzero
  Ctx ctx;
  ctx.seed = 99;
  ctx.step = 12;
  ctx.sample_offset = 40;
  Tensor y = d->forward(x, ctx);
  EXPECT_FALSE(y.is_binary());
  const CounterRng rng(99, "dropout/classifier.1");
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const bool keep = rng.uniform(f, 12, static_cast<uint32_t>(40 + n)) >= p;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = (t * N + n) * F + f;
        ASSERT_DOUBLE_EQ(y.at(i), keep ? x.at(i) / (1 - p) : 0.0) << "t " << t << " n " << n << " f " << f;
      }
    }
}

TEST(Dropout, MaskDoesNotDependOnHowTheBatchIsSplit) {
  const int64_t T = 4, N = 6, F = 33;
  Tensor x = test::random_tensor({T, N, F}, DType::F32, 2, 0.5, 1.5);
  Ctx ctx;
  ctx.seed = 5;
  ctx.step = 3;
  auto whole = named_dropout(0.5, "drop");
  Tensor y = whole->forward(x, ctx);

  // Two half batches (as on two data-parallel ranks or two microbatches).
  auto half = named_dropout(0.5, "drop");
  for (int part = 0; part < 2; ++part) {
    Tensor xh = Tensor::empty({T, N / 2, F}, DType::F32);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < N / 2 * F; ++i)
        xh.data<float>()[t * (N / 2) * F + i] = x.data<float>()[(t * N + part * N / 2) * F + i];
    Ctx c = ctx;
    c.sample_offset = part * N / 2;
    c.slot = part;
    Tensor yh = half->forward(xh, c);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < N / 2 * F; ++i)
        ASSERT_EQ(yh.at(t * (N / 2) * F + i), y.at((t * N + part * N / 2) * F + i));
  }
  // Another step or another layer name draws another mask.
  Ctx next = ctx;
  next.step = 4;
  auto other = named_dropout(0.5, "drop");
  Tensor y_next = other->forward(x, next);
  auto renamed = named_dropout(0.5, "drop2");
  Tensor y_renamed = renamed->forward(x, ctx);
  int differ_step = 0, differ_name = 0;
  for (int64_t i = 0; i < N * F; ++i) {
    differ_step += (y.at(i) == 0) != (y_next.at(i) == 0);
    differ_name += (y.at(i) == 0) != (y_renamed.at(i) == 0);
  }
  EXPECT_GT(differ_step, N * F / 4);
  EXPECT_GT(differ_name, N * F / 4);
}

TEST(Dropout, KeepRateIsOneMinusP) {
  for (double p : {0.1, 0.25, 0.6}) {
    auto d = named_dropout(p);
    const int64_t N = 64, F = 4099;  // F not a multiple of 8: bits straddle samples
    Tensor x = Tensor::full({2, N, F}, 1.0, DType::F32);
    Ctx ctx;
    ctx.seed = 7;
    Tensor y = d->forward(x, ctx);
    int64_t kept = 0;
    for (int64_t i = 0; i < N * F; ++i) {
      const double v = y.at(i);
      ASSERT_TRUE(v == 0.0 || std::fabs(v - 1.0 / (1 - p)) < 1e-6) << v;
      kept += v != 0.0;
      ASSERT_EQ(y.at(N * F + i), v) << "second time step must reuse the mask";
    }
    const double n = double(N * F), rate = kept / n;
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(rate, 1 - p, 5 * sigma) << "p " << p;
  }
}

TEST(Dropout, GradientIsMaskTimesScale) {
  const double p = 0.4;
  auto d = named_dropout(p);
  const Shape shape{3, 2, 5, 3};
  Tensor x = test::random_tensor(shape, DType::F64, 3, 0.5, 1.5);
  Tensor dy = test::random_tensor(shape, DType::F64, 4);
  Ctx ctx;
  ctx.seed = 1;
  Tensor y = d->forward(x, ctx);
  Tensor dx = d->backward_input(dy, ctx);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double mask_scale = y.at(i) / x.at(i);  // 0 or 1/(1-p)
    EXPECT_TRUE(mask_scale == 0.0 || std::fabs(mask_scale - 1 / (1 - p)) < 1e-12);
    EXPECT_NEAR(dx.at(i), dy.at(i) * mask_scale, 1e-12);
  }
  EXPECT_THROW(d->backward_input(dy, ctx), Error) << "backward releases the slot";
}

TEST(Dropout, FiniteDifferences) {
  auto unit = test::wrap(named_dropout(0.3));
  Tensor x = test::random_tensor({2, 3, 4, 2}, DType::F64, 8);
  EXPECT_TRUE(test::check_layer_gradients(*unit, x));
}

TEST(Dropout, IdentityInEvalAndForZeroP) {
  Tensor x = test::random_tensor({2, 3, 8}, DType::F32, 9);
  x.set_binary(false);
  Tensor dy = test::random_tensor({2, 3, 8}, DType::F32, 10);
  {
    auto d = named_dropout(0.5);
    Ctx ctx;
    ctx.training = false;
    Tensor y = d->forward(x, ctx);
    Tensor dx = d->backward_input(dy, ctx);
    for (int64_t i = 0; i < x.numel(); ++i) {
      EXPECT_EQ(y.at(i), x.at(i));
      EXPECT_EQ(dx.at(i), dy.at(i));
    }
  }
  {
    auto d = named_dropout(0.0);
    Ctx ctx;
    Tensor spikes = Tensor::full({2, 3, 8}, 1.0, DType::F32);
    spikes.set_binary(true);
    Tensor y = d->forward(spikes, ctx);
    EXPECT_TRUE(y.is_binary()) << "identity keeps the binary flag";
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.at(i), 1.0);
    Tensor dx = d->backward_input(dy, ctx);
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(dx.at(i), dy.at(i));
  }
}

TEST(Dropout, RejectsBadProbability) {
  EXPECT_THROW(Dropout(-0.1), Error);
  EXPECT_THROW(Dropout(1.5), Error);
  EXPECT_EQ(Dropout(0.25).type(), "dropout");
}
