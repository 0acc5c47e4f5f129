// test_loss.cpp — "mean_ce" and "rate_mse" against the naive reference (tests/ref/loss_ref)
// and central finite differences of the loss value; accuracy tie-breaking; numerical
// stability; input errors (bad labels, unknown names).
#include <gtest/gtest.h>

#include <cmath>

#include "../ref/loss_ref.h"
#include "gradient_check.h"
#include "spikemesh/layers/loss.h"

namespace sm {
namespace {

std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

Tensor labels_tensor(const std::vector<int64_t>& l) {
  Tensor t = Tensor::empty({static_cast<int64_t>(l.size())}, DType::I64);
  for (size_t i = 0; i < l.size(); ++i) t.data<int64_t>()[i] = l[i];
  return t;
}

using RefFn = ref::LossRef (*)(const std::vector<double>&, int64_t, int64_t, int64_t,
                               const std::vector<int64_t>&);

void check_against_reference(const std::string& name, RefFn ref_fn) {
  const int64_t T = 3, N = 5, K = 7;
  const std::vector<int64_t> labels{0, 6, 3, 3, 1};
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-13 : 1e-6;
    Tensor out = test::random_tensor({T, N, K}, dt, 3, -2, 2);
    auto loss = make_loss(name);
    EXPECT_EQ(loss->name(), name);
    LossResult r = loss->forward(out, labels_tensor(labels));
    ref::LossRef want = ref_fn(vec(out), T, N, K, labels);
    EXPECT_NEAR(r.loss, want.loss, tol * (1 + std::fabs(want.loss))) << name;
    EXPECT_EQ(r.correct, want.correct) << name;
    EXPECT_EQ(r.count, N);
    Tensor g = loss->backward(0.25);
    ASSERT_EQ(g.shape(), out.shape());
    ASSERT_EQ(g.dtype(), dt);
    for (int64_t i = 0; i < g.numel(); ++i)
      ASSERT_NEAR(g.at(i), 0.25 * want.grad[i], tol) << name << " grad " << i;
  }
}

TEST(Loss, MeanCrossEntropyMatchesReference) { check_against_reference("mean_ce", ref::mean_ce_ref); }
TEST(Loss, RateMseMatchesReference) { check_against_reference("rate_mse", ref::rate_mse_ref); }

// Central differences of the reported loss against backward(1) for every element.
TEST(Loss, GradientsMatchFiniteDifferences) {
  for (const char* name : {"mean_ce", "rate_mse"}) {
    const int64_t T = 2, N = 3, K = 4;
    const std::vector<int64_t> labels{2, 0, 3};
    Tensor out = test::random_tensor({T, N, K}, DType::F64, 4, -1.5, 1.5);
    auto loss = make_loss(name);
    loss->forward(out, labels_tensor(labels));
    Tensor g = loss->backward();
    const double eps = 1e-6;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double orig = out.at(i);
      out.data<double>()[i] = orig + eps;
      const double lp = make_loss(name)->forward(out, labels_tensor(labels)).loss;
      out.data<double>()[i] = orig - eps;
      const double lm = make_loss(name)->forward(out, labels_tensor(labels)).loss;
      out.data<double>()[i] = orig;
      EXPECT_NEAR(g.at(i), (lp - lm) / (2 * eps), 1e-8) << name << " element " << i;
    }
  }
}

// Soft targets (mixing augmentations): a one-hot target gives the hard loss; a mixed target
// lam·onehot(a) + (1-lam)·onehot(b) gives lam·L(a) + (1-lam)·L(b) for cross-entropy (linear in
// the target) and its gradient matches central differences for both losses.
TEST(Loss, SoftTargetsMatchHardLabelsAndFiniteDifferences) {
  const int64_t T = 2, N = 3, K = 4;
  const std::vector<int64_t> a{2, 0, 3}, b{1, 0, 2};
  const double lam[] = {0.3, 0.9, 0.55};
  Tensor out = test::random_tensor({T, N, K}, DType::F64, 5, -1.5, 1.5);
  Tensor onehot = Tensor::zeros({N, K}, DType::F64), mixed = Tensor::zeros({N, K}, DType::F64);
  for (int64_t r = 0; r < N; ++r) {
    onehot.data<double>()[r * K + a[r]] = 1.0;
    mixed.data<double>()[r * K + a[r]] += lam[r];
    mixed.data<double>()[r * K + b[r]] += 1.0 - lam[r];
  }
  for (const char* name : {"mean_ce", "rate_mse"}) {
    const LossResult hard = make_loss(name)->forward(out, labels_tensor(a));
    const LossResult soft = make_loss(name)->forward(out, labels_tensor(a), 0, onehot);
    EXPECT_NEAR(soft.loss, hard.loss, 1e-14) << name;
    EXPECT_EQ(soft.correct, hard.correct) << name;
    auto loss = make_loss(name);
    loss->forward(out, labels_tensor(a), 0, mixed);
    Tensor g = loss->backward();
    const double eps = 1e-6;
    for (int64_t i = 0; i < out.numel(); ++i) {
      const double orig = out.at(i);
      out.data<double>()[i] = orig + eps;
      const double lp = make_loss(name)->forward(out, labels_tensor(a), 0, mixed).loss;
      out.data<double>()[i] = orig - eps;
      const double lm = make_loss(name)->forward(out, labels_tensor(a), 0, mixed).loss;
      out.data<double>()[i] = orig;
      EXPECT_NEAR(g.at(i), (lp - lm) / (2 * eps), 1e-8) << name << " element " << i;
    }
  }
  // cross-entropy is linear in the target: per sample lam·CE(a) + (1-lam)·CE(b)
  double want = 0;
  for (int64_t r = 0; r < N; ++r) {
    Tensor one = Tensor::empty({T, 1, K}, DType::F64);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) one.data<double>()[t * K + k] = out.at((t * N + r) * K + k);
    want += lam[r] * make_loss("mean_ce")->forward(one, labels_tensor({a[r]})).loss +
            (1 - lam[r]) * make_loss("mean_ce")->forward(one, labels_tensor({b[r]})).loss;
  }
  EXPECT_NEAR(make_loss("mean_ce")->forward(out, labels_tensor(a), 0, mixed).loss, want / N, 1e-13);
}

TEST(Loss, AccuracyUsesMeanOverTimeAndFirstMaximum) {
  // Mean over T of sample 0 is [1, 1, 0] (tie: class 0 wins), sample 1 is [0, 0.5, 1].
  Tensor out = Tensor::empty({2, 2, 3}, DType::F64);
  const double v[] = {2, 0, 0, 0, 1, 0,   // t = 0
                      0, 2, 0, 0, 0, 2};  // t = 1
  for (int i = 0; i < 12; ++i) out.data<double>()[i] = v[i];
  auto loss = make_loss("mean_ce");
  EXPECT_EQ(loss->forward(out, labels_tensor({0, 2})).correct, 2);
  EXPECT_EQ(loss->forward(out, labels_tensor({1, 2})).correct, 1);
  EXPECT_EQ(loss->forward(out, labels_tensor({1, 1})).correct, 0);
  EXPECT_EQ(make_loss("rate_mse")->forward(out, labels_tensor({0, 2})).correct, 2);
}

// Per-class counts (evaluation): off by default; when on, per class the samples and the correct
// ones by the same argmax as `correct` (sums equal correct and count), for both losses.
TEST(Loss, PerClassCountsSumToCorrectAndCount) {
  Tensor out = Tensor::empty({2, 3, 3}, DType::F64);  // means: [1, 1, 0], [0, 0.5, 1], [0.5, 0, 0]
  const double v[] = {2, 0, 0, 0, 1, 0, 1, 0, 0,   // t = 0
                      0, 2, 0, 0, 0, 2, 0, 0, 0};  // t = 1
  for (int i = 0; i < 18; ++i) out.data<double>()[i] = v[i];
  for (const char* name : {"mean_ce", "rate_mse"}) {
    auto loss = make_loss(name);
    EXPECT_TRUE(loss->forward(out, labels_tensor({0, 2, 2})).class_count.empty()) << name;
    loss->set_per_class(true);
    const LossResult r = loss->forward(out, labels_tensor({0, 2, 2}));
    EXPECT_EQ(r.class_count, (std::vector<int64_t>{1, 0, 2})) << name;
    EXPECT_EQ(r.class_correct, (std::vector<int64_t>{1, 0, 1})) << name;  // sample 2 predicts class 0
    EXPECT_EQ(r.correct, 2) << name;
  }
}

// Logits whose exp overflows double: the loss stays finite and matches the long-double ref.
TEST(Loss, CrossEntropyIsStableForLargeLogits) {
  Tensor out = test::random_tensor({2, 3, 4}, DType::F64, 5, 790, 800);
  const std::vector<int64_t> labels{1, 2, 3};
  auto loss = make_loss("mean_ce");
  LossResult r = loss->forward(out, labels_tensor(labels));
  ref::LossRef want = ref::mean_ce_ref(vec(out), 2, 3, 4, labels);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, want.loss, 1e-9);
  Tensor g = loss->backward();
  for (int64_t i = 0; i < g.numel(); ++i) ASSERT_NEAR(g.at(i), want.grad[i], 1e-12);
}

TEST(Loss, LabelOutOfRangeIsAnInputError) {
  Tensor out = Tensor::zeros({2, 2, 10}, DType::F32);
  for (int64_t bad : {10, -1}) {
    try {
      make_loss("mean_ce")->forward(out, labels_tensor({3, bad}));
      FAIL() << "label " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Input);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("label " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("10 classes"), std::string::npos) << msg;
    }
  }
}

// Two microbatches in flight: both forwards (slots 0 and 1), then the backwards in the other
// order give exactly what one microbatch after the other gives; backward releases its slot.
TEST(Loss, MicrobatchSlotsKeepEachForward) {
  for (const char* name : {"mean_ce", "rate_mse"})
    for (DType dt : {DType::F64, DType::F32}) {
      const Tensor a = test::random_tensor({3, 4, 5}, dt, 41, -2, 2), b = test::random_tensor({3, 2, 5}, dt, 42, -2, 2);
      const Tensor la = labels_tensor({0, 4, 2, 2}), lb = labels_tensor({1, 3});
      auto seq = make_loss(name);
      const LossResult ra = seq->forward(a, la);
      const Tensor ga = seq->backward(0.5);
      const LossResult rb = seq->forward(b, lb);
      const Tensor gb = seq->backward(0.25);

      auto slotted = with_cuda_support(make_loss(name));  // host tensors: the inner loss, same slots
      EXPECT_EQ(slotted->forward(a, la, 0).loss, ra.loss) << name;
      EXPECT_EQ(slotted->forward(b, lb, 1).loss, rb.loss) << name;
      const Tensor gb2 = slotted->backward(0.25, 1), ga2 = slotted->backward(0.5, 0);
      EXPECT_EQ(vec(ga2), vec(ga)) << name << " " << dtype_name(dt);
      EXPECT_EQ(vec(gb2), vec(gb)) << name << " " << dtype_name(dt);
      EXPECT_THROW(slotted->backward(1.0, 0), Error) << "slot 0 was released";
    }
}

TEST(Loss, UnknownNameListsValidOnes) {
  try {
    make_loss("hinge");
    FAIL() << "unknown loss accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("hinge"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mean_ce"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rate_mse"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace sm
