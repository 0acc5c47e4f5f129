// test_grad_clip.cpp — clip_grad_norm: the norm against a plain sum of squares, the PyTorch
// scaling rule (max_norm / (norm + 1e-6) when below 1), the group all-reduce, determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <memory>
#include <vector>

#include "spikemesh/optim/grad_clip.h"

namespace {

using sm::DType;
using sm::Param;
using sm::Tensor;
using Vec = std::vector<double>;

struct Grads {
  std::vector<std::unique_ptr<Param>> owned;
  void add(const sm::Shape& shape, const Vec& g, DType dt = DType::F64) {
    auto p = std::make_unique<Param>();
    p->name = "p" + std::to_string(owned.size());
    p->shape = p->local_shape = shape;
    p->value = Tensor::zeros(shape, dt);
    p->grad = Tensor::zeros(shape, dt);
    for (size_t i = 0; i < g.size(); ++i) {
      if (dt == DType::F64) p->grad.data<double>()[i] = g[i];
      else p->grad.data<float>()[i] = static_cast<float>(g[i]);
    }
    owned.push_back(std::move(p));
  }
  std::vector<Param*> ptrs() {
    std::vector<Param*> out;
    for (auto& p : owned) out.push_back(p.get());
    return out;
  }
  double at(size_t k, int64_t i) const { return owned[k]->grad.at(i); }
};

// g1 = [3, 4] (norm 5) and g2 = [[12], [0]] -> total norm sqrt(9 + 16 + 144) = 13.
void add_13(Grads& g, DType dt = DType::F64) {
  g.add({2}, {3.0, 4.0}, dt);
  g.add({2, 1}, {12.0, 0.0}, dt);
}

TEST(GradClip, NormOfAllGradsHandComputed) {
  Grads g;
  add_13(g);
  EXPECT_DOUBLE_EQ(sm::clip_grad_norm(g.ptrs(), 0.0), 13.0);
  EXPECT_EQ(g.at(0, 0), 3.0);  // max_norm 0: no clipping
  EXPECT_EQ(g.at(1, 0), 12.0);
}

TEST(GradClip, ScalesByMaxNormOverNormPlusEps) {
  for (DType dt : {DType::F64, DType::F32}) {
    Grads g;
    add_13(g, dt);
    EXPECT_DOUBLE_EQ(sm::clip_grad_norm(g.ptrs(), 6.5), 13.0);  // returns the norm before
    const double f = 6.5 / (13.0 + 1e-6);
    const double tol = dt == DType::F64 ? 1e-15 : 1e-6;
    EXPECT_NEAR(g.at(0, 0), 3.0 * f, tol);
    EXPECT_NEAR(g.at(0, 1), 4.0 * f, tol);
    EXPECT_NEAR(g.at(1, 0), 12.0 * f, 12 * tol);
    EXPECT_EQ(g.at(1, 1), 0.0);
    // The clipped grads have norm max_norm (up to the 1e-6 guard).
    EXPECT_NEAR(sm::clip_grad_norm(g.ptrs(), 0.0), 6.5, 1e-5);
  }
}

TEST(GradClip, NoScalingWhenBelowMaxNorm) {
  Grads g;
  add_13(g);
  EXPECT_DOUBLE_EQ(sm::clip_grad_norm(g.ptrs(), 13.5), 13.0);
  EXPECT_EQ(g.at(0, 0), 3.0);
  EXPECT_EQ(g.at(0, 1), 4.0);
  EXPECT_EQ(g.at(1, 0), 12.0);
  // Exactly at max_norm PyTorch still scales by max/(norm + 1e-6) < 1.
  EXPECT_DOUBLE_EQ(sm::clip_grad_norm(g.ptrs(), 13.0), 13.0);
  EXPECT_DOUBLE_EQ(g.at(1, 0), 12.0 * (13.0 / (13.0 + 1e-6)));
}

TEST(GradClip, RandomValuesMatchPlainSumOfSquares) {
  Grads g;
  Vec a(70000), b(5);  // a spans several norm blocks
  double sq = 0.0;
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37 * i) * 1e-2, sq += a[i] * a[i];
  for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0 + i, sq += b[i] * b[i];
  g.add({70000}, a);
  g.add({5}, b);
  const double norm = sm::clip_grad_norm(g.ptrs(), 1.0);
  EXPECT_NEAR(norm, std::sqrt(sq), 1e-12 * std::sqrt(sq));
  const double f = 1.0 / (norm + 1e-6);
  EXPECT_NEAR(g.at(0, 12345), a[12345] * f, 1e-16);
  EXPECT_NEAR(g.at(1, 4), 5.0 * f, 1e-15);
}

// A fake two-rank group whose other rank holds the same grads: the squared sum doubles.
class DoublingGroup : public sm::Collectives {
 public:
  int calls = 0;
  int size() const override { return 2; }
  int rank() const override { return 0; }
  void all_reduce_sum(Tensor& t) override {
    ++calls;
    ASSERT_EQ(t.numel(), 1);
    ASSERT_EQ(t.dtype(), DType::F64);
    t.data<double>()[0] *= 2.0;
  }
  void all_gather(const Tensor&, Tensor&) override { FAIL() << "clipping only all-reduces"; }
  void reduce_scatter_sum(const Tensor&, Tensor&) override { FAIL() << "clipping only all-reduces"; }
  void broadcast(Tensor&, int) override { FAIL() << "clipping only all-reduces"; }
};

TEST(GradClip, SquaredSumIsAllReducedOverGroup) {
  Grads g;
  add_13(g);
  DoublingGroup group;
  const double norm = sm::clip_grad_norm(g.ptrs(), 13.0, &group);
  EXPECT_EQ(group.calls, 1);
  EXPECT_DOUBLE_EQ(norm, 13.0 * std::sqrt(2.0));
  EXPECT_NEAR(g.at(0, 1), 4.0 * 13.0 / (norm + 1e-6), 1e-15);  // scaled by the global norm
}

TEST(GradClip, EmptyParamListHasZeroNorm) {
  EXPECT_EQ(sm::clip_grad_norm({}, 1.0), 0.0);
}

TEST(GradClip, NormDoesNotDependOnThreadCount) {
  Grads g;
  Vec a(200001);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.001 * i) + 1e-3 * std::cos(7.0 * i);
  g.add({200001}, a, DType::F32);
  const int saved = omp_get_max_threads();
  double norms[2];
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    norms[threads - 1] = sm::clip_grad_norm(g.ptrs(), 0.0);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(norms[0], norms[1]);
}

}  // namespace
