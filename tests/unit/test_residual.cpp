// test_residual.cpp — the Residual composite (layers/sequential.h): y = x + body(x) with a
// body of BatchNorm2d then a shape-keeping AvgPool2d(3, 1, 1), checked against the naive
// references, and its gradients (dx and the BN parameters) by finite differences.
#include <gtest/gtest.h>

#include "../ref/bn_ref.h"
#include "../ref/pool_ref.h"
#include "gradient_check.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/sequential.h"

namespace sm {
namespace {

std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

std::unique_ptr<Unit> make_block(int C) {
  auto res = std::make_unique<Residual>();
  BatchNormConfig bc;
  bc.num_features = C;
  res->add(std::make_unique<BatchNorm>(bc));
  res->add(std::make_unique<AvgPool2d>(PoolConfig{3, 1, 1}));
  auto u = test::wrap(std::move(res));
  // Non-trivial affine parameters.
  auto ps = u->params();
  for (int c = 0; c < C; ++c) {
    test::detail::set(ps[0]->value, c, 0.5 + 0.25 * c);
    test::detail::set(ps[1]->value, c, -0.3 + 0.2 * c);
  }
  return u;
}

TEST(Residual, OutputIsInputPlusBody) {
  const int64_t T = 2, N = 2, C = 3, H = 4, W = 5;
  auto u = make_block(C);
  EXPECT_EQ(u->output_shape({C, H, W}), (Shape{C, H, W}));
  Tensor x = test::random_tensor({T, N, C, H, W}, DType::F64, 21, -1, 2);
  Ctx ctx;
  Tensor y = u->forward(x, ctx);
  ASSERT_EQ(y.shape(), x.shape());

  auto ps = u->params();
  auto bn = ref::bn_forward_train_ref(vec(x), T * N, C, H * W, vec(ps[0]->value), vec(ps[1]->value), 1e-5);
  ref::PoolRefGeom g;
  g.P = T * N * C;
  g.H = H;
  g.W = W;
  g.k = 3;
  g.stride = 1;
  g.pad = 1;
  std::vector<double> body, unused;
  ref::avgpool2d_ref(bn.y, g, std::vector<double>(g.P * g.Ho() * g.Wo(), 0.0), body, unused);
  const std::vector<double> got = vec(y), xs = vec(x);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], xs[i] + body[i], 1e-12) << i;
}

TEST(Residual, GradientCheck) {
  auto u = make_block(2);
  EXPECT_TRUE(test::check_layer_gradients(*u, test::random_tensor({2, 3, 2, 3, 4}, DType::F64, 22)));
}

TEST(Residual, RejectsShapeChangingBody) {
  auto res = std::make_unique<Residual>();
  res->add(std::make_unique<AvgPool2d>(PoolConfig{2, 2, 0}));
  try {
    res->output_shape({3, 4, 4});
    FAIL() << "shape-changing residual body accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
  }
}

}  // namespace
}  // namespace sm
