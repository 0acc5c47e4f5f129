// test_augment.cpp — `--augment` (data/augment_spec.h, data/augment.h): parsing and its
// errors; each sample's result depends only on (seed, epoch, its index) — the same alone or in
// any batch, at 1 or 3 threads; steps that fire with P 1 do what they say on a hand-made
// sample; mixing's soft targets. The full geometry and every draw are checked against the
// independent numpy reference by tests/e2e/augment.sh.
#include <gtest/gtest.h>
#include <omp.h>

#include <numeric>

#include "spikemesh/core/error.h"
#include "spikemesh/data/augment.h"

namespace sm {
namespace {

DatasetInfo events_info(int64_t T, int64_t H, int64_t W) {
  DatasetInfo i;
  i.path = "events.h5";
  i.layout = "NTCHW";
  i.num_classes = 4;
  i.T = static_cast<int>(T);
  i.sample_shape = {T, 2, H, W};
  i.stored_name = "u8";
  i.train_size = 100;
  return i;
}

Tensor counts(int64_t n, const DatasetInfo& info, uint64_t seed) {
  Shape s = info.sample_shape;
  s.insert(s.begin(), n);
  Tensor x = Tensor::empty(s, DType::F32);
  uint64_t z = seed;
  for (int64_t i = 0; i < x.numel(); ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    x.data<float>()[i] = static_cast<float>((z >> 60) % 4);
  }
  return x;
}

TEST(AugmentSpec, ParsesDefaultsAndCanonicalText) {
  const AugmentSpec s = parse_augment_spec(" hflip , roll:0.25:3,cutmix ");
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].op, AugmentOp::HFlip);
  EXPECT_EQ(s.steps[0].p, 0.5);
  EXPECT_EQ(s.steps[1].magnitude, 3);
  EXPECT_EQ(s.steps[2].magnitude, 1.0);
  EXPECT_TRUE(s.mixes());
  EXPECT_EQ(s.canonical_text(), "hflip:0.5,roll:0.25:3,cutmix:0.5:1");
  EXPECT_EQ(parse_augment_spec(s.canonical_text()).canonical_text(), s.canonical_text());
  EXPECT_TRUE(parse_augment_spec("none").empty());
  EXPECT_TRUE(parse_augment_spec("").empty());
}

TEST(AugmentSpec, RefusesBadSteps) {
  for (const char* bad : {"flip", "hflip:2", "hflip:0.5:3", "roll:0.5:0", "roll:0.5:1.5", "rotate:0.5:200",
                          "mixup,hflip", "hflip,,roll", "dropevent:0.5:1.5", "translate:x"})
    EXPECT_THROW(parse_augment_spec(bad), Error) << bad;
}

TEST(Augment, EachSampleDependsOnlyOnSeedEpochAndIndex) {
  const DatasetInfo info = events_info(3, 9, 11);
  const Augmenter aug(parse_augment_spec("hflip,vflip,roll:0.5:3,rotate:0.7:40,cutout:0.5:4,timeshift:0.5:1,"
                                         "jitter:0.5:2,dropevent:0.5:0.3"),
                      info, 17);
  const std::vector<int64_t> idx{5, 9, 42, 77, 3, 60};
  const Tensor base = counts(6, info, 1);
  const int64_t F = base.numel() / 6;
  Tensor whole = base.clone();
  const int threads = omp_get_max_threads();
  omp_set_num_threads(3);
  aug.transform(whole, idx, 2, false);
  omp_set_num_threads(1);
  for (size_t i = 0; i < idx.size(); ++i) {  // alone, in reverse order, on one thread
    Tensor one = Tensor::empty({1, 3, 2, 9, 11}, DType::F32);
    std::copy(base.data<float>() + i * F, base.data<float>() + (i + 1) * F, one.data<float>());
    aug.transform(one, {idx[i]}, 2, false);
    for (int64_t q = 0; q < F; ++q) ASSERT_EQ(one.data<float>()[q], whole.data<float>()[i * F + q]) << i << " " << q;
  }
  omp_set_num_threads(threads);
  Tensor other_epoch = base.clone(), other_seed = base.clone();
  aug.transform(other_epoch, idx, 3, false);
  Augmenter(aug.spec(), info, 18).transform(other_seed, idx, 2, false);
  auto same = [&](const Tensor& a, const Tensor& b) {
    return std::equal(a.data<float>(), a.data<float>() + a.numel(), b.data<float>());
  };
  EXPECT_FALSE(same(whole, other_epoch));
  EXPECT_FALSE(same(whole, other_seed));
}

TEST(Augment, StepsThatAlwaysFireDoWhatTheySay) {
  const DatasetInfo info = events_info(2, 3, 4);
  const Tensor x = counts(1, info, 9);
  const int64_t F = x.numel();
  auto run = [&](const char* spec) {
    Tensor y = x.clone();
    Augmenter(parse_augment_spec(spec), info, 1).transform(y, {7}, 0, false);
    return y;
  };
  const Tensor h = run("hflip:1"), v = run("vflip:1"), hh = run("hflip:1,hflip:1"), none = run("hflip:0,rotate:0");
  for (int64_t p = 0; p < 4; ++p)  // [T 2, C 2] planes of [3, 4]
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t q = p * 12 + i * 4 + j;
        EXPECT_EQ(h.data<float>()[q], x.data<float>()[p * 12 + i * 4 + (3 - j)]);
        EXPECT_EQ(v.data<float>()[q], x.data<float>()[p * 12 + (2 - i) * 4 + j]);
      }
  for (int64_t q = 0; q < F; ++q) {
    EXPECT_EQ(hh.data<float>()[q], x.data<float>()[q]);
    EXPECT_EQ(none.data<float>()[q], x.data<float>()[q]);
  }
  const Tensor dropped = run("dropevent:1:1"), kept = run("dropevent:1:0");
  for (int64_t q = 0; q < F; ++q) {
    EXPECT_EQ(dropped.data<float>()[q], 0.0f);
    EXPECT_EQ(kept.data<float>()[q], x.data<float>()[q]);
  }
}

TEST(Augment, MixingGivesSoftTargetsThatSumToOne) {
  const DatasetInfo info = events_info(2, 8, 8);
  const Augmenter aug(parse_augment_spec("mixup:0.5:0.8,cutmix:1:1"), info, 4);
  std::vector<int64_t> idx(40);
  std::iota(idx.begin(), idx.end(), 10);
  const std::vector<MixDraw> draws = aug.mix_draws(idx, 1);
  Tensor x = counts(40, info, 2), px = counts(40, info, 3);  // every sample mixes: a partner row each
  Tensor y = Tensor::empty({40}, DType::I64), py = Tensor::empty({40}, DType::I64);
  for (int64_t i = 0; i < 40; ++i) y.data<int64_t>()[i] = i % 4, py.data<int64_t>()[i] = (i + 1) % 4;
  AugmentRecord rec;
  const Tensor t = aug.mix(x, px, py, draws, y, &rec);
  for (int64_t i = 0; i < 40; ++i) {
    ASSERT_GE(draws[static_cast<size_t>(i)].partner, 0);  // cutmix fires with P 1 when mixup does not
    ASSERT_LT(draws[static_cast<size_t>(i)].partner, info.train_size);
    double sum = 0;
    for (int64_t k = 0; k < 4; ++k) sum += t.data<double>()[i * 4 + k];
    EXPECT_NEAR(sum, 1.0, 1e-15);
    ASSERT_EQ(rec[static_cast<size_t>(i)].size(), 1u);
    const double lam = rec[static_cast<size_t>(i)][0].v[1];
    EXPECT_EQ(t.data<double>()[i * 4 + i % 4], lam);
  }
}

// Two dropevent steps draw independently (each keeps half: a quarter stays, not a half), and a
// tiny Beta shape gives lam near 0 or 1, not the 0.5 of two underflowed gammas.
TEST(Augment, RepeatedStepsDrawAfreshAndTinyBetaShapesStayAtTheEnds) {
  const DatasetInfo info = events_info(2, 9, 11);
  Tensor x = Tensor::empty({1, 2, 2, 9, 11}, DType::F32);
  x.fill(3.0);
  Augmenter(parse_augment_spec("dropevent:1:0.5,dropevent:1:0.5"), info, 1).transform(x, {4}, 0, false);
  double kept = 0;
  for (int64_t q = 0; q < x.numel(); ++q) kept += x.data<float>()[q];
  const double events = 3.0 * static_cast<double>(x.numel());  // 1188: a quarter is 297 +- 15
  EXPECT_GT(kept, 0.18 * events);
  EXPECT_LT(kept, 0.32 * events);
  const Augmenter mix(parse_augment_spec("mixup:1:0.001"), info, 3);
  std::vector<int64_t> idx(64);
  std::iota(idx.begin(), idx.end(), 0);
  Tensor a = counts(64, info, 5), b = counts(64, info, 6), y = Tensor::zeros({64}, DType::I64);
  AugmentRecord rec;
  mix.mix(a, b, y, mix.mix_draws(idx, 0), y, &rec);  // P 1: every sample mixes, a partner row each
  for (const auto& r : rec) {
    ASSERT_EQ(r.size(), 1u);
    EXPECT_TRUE(r[0].v[1] < 0.01 || r[0].v[1] > 0.99) << r[0].v[1];
  }
}

TEST(Augment, RefusesStepsTheDataCannotTake) {
  DatasetInfo img;
  img.path = "img.h5";
  img.layout = "NCHW";
  img.sample_shape = {1, 28, 28};
  img.stored_name = "u8";
  img.x_scale = 1.0 / 255;
  img.num_classes = 10;
  img.train_size = 10;
  EXPECT_THROW(Augmenter(parse_augment_spec("timeshift"), img, 1), Error);
  EXPECT_THROW(Augmenter(parse_augment_spec("dropevent"), img, 1), Error);
  DatasetInfo resized = events_info(2, 48, 48);
  resized.resized = true;  // u8 frames resized at import: interpolated, not counts
  EXPECT_THROW(Augmenter(parse_augment_spec("dropevent"), resized, 1), Error);
  EXPECT_NO_THROW(Augmenter(parse_augment_spec("dropevent"), events_info(2, 48, 48), 1));
  EXPECT_NO_THROW(Augmenter(parse_augment_spec("hflip,rotate,mixup"), img, 1));
}

}  // namespace
}  // namespace sm
