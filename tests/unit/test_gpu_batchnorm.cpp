// test_gpu_batchnorm.cpp — the CUDA batch-norm kernels against the CPU: the reduction
// primitives against kernels/cpu/batchnorm.h, and the whole GPU chain (moments → stats →
// normalize → recovery flag; backward moments → local grads → coefficients → dx → param
// grads) against the CPU BatchNorm layer (layers/batchnorm.cpp) in training and eval mode,
// with the saved output (recoverable) and the saved input (γ = 0 in one channel) paths.
// Shapes: C = 3 with H = W = 7, BatchNorm1d [T, N, C] and [T, N, C, L], several reduction
// chunks; f32 (1e-5) and bf16 / f16 activations (2e-2).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "gradient_check.h"
#include "spikemesh/kernels/cpu/batchnorm.h"
#include "spikemesh/kernels/cuda/batchnorm.h"
#include "spikemesh/layers/batchnorm.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

struct BnCase {
  Shape shape;  // [T, N, C, ...spatial]
  int spatial_dims;
};

const BnCase kCases[] = {
    {{2, 3, 3, 7, 7}, 2},     // C = 3, H = W = 7
    {{1, 1, 5, 4, 5}, 2},     // T = N = 1
    {{4, 100, 3, 7, 7}, 2},   // 400 rows of 49: several reduction chunks per channel
    {{3, 5, 17}, 1},          // BatchNorm1d on [T, N, C]
    {{2, 3, 4, 9}, 1},        // BatchNorm1d on [T, N, C, L]
    {{8, 64, 2, 128}, 1},     // long rows
};

cpu::BnShape bn_shape(const Shape& s) {
  cpu::BnShape b;
  b.outer = s[0] * s[1];
  b.channels = s[2];
  for (size_t i = 3; i < s.size(); ++i) b.inner *= s[i];
  return b;
}

std::string shape_name(const Shape& s) { return shape_str(s); }

std::vector<float> tensor_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(t.at(i));
  return v;
}

Tensor cpu_tensor(const Shape& shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

template <typename S>
void check_moments(const BnCase& k, uint64_t seed) {
  SCOPED_TRACE(shape_name(k.shape) + " " + gpu_test::type_name<S>());
  const cpu::BnShape s = bn_shape(k.shape);
  const int64_t n = s.outer * s.channels * s.inner, C = s.channels;
  const std::vector<S> x_s = gpu_test::to_storage<S>(gpu_test::random_floats(n, seed, 3.0, 5.0));
  const std::vector<S> dy_s = gpu_test::to_storage<S>(gpu_test::random_floats(n, seed + 1, -1.0, 1.0));
  const std::vector<float> x = gpu_test::to_floats(x_s), dy = gpu_test::to_floats(dy_s);
  const std::vector<float> shift = gpu_test::random_floats(C, seed + 2, 3.5, 4.5);
  const std::vector<double> center(shift.begin(), shift.end());

  std::vector<double> sum(C), sumsq(C), sdy(C), sdyx(C);
  cpu::bn_shifted_moments<float>(x.data(), s, center.data(), sum.data(), sumsq.data());
  cpu::bn_backward_moments<float>(dy.data(), x.data(), s, center.data(), sdy.data(), sdyx.data());

  DeviceArray<S> d_x(x_s), d_dy(dy_s);
  DeviceArray<float> d_shift(shift);
  DeviceArray<double> d_center(center), d_sum(C), d_sumsq(C), d_sdy(C), d_sdyx(C);
  cuda::bn_shifted_moments_cuda<S>(d_x.get(), s, d_shift.get(), d_sum.get(), d_sumsq.get(), nullptr);
  cuda::bn_backward_moments_cuda<S>(d_dy.get(), d_x.get(), s, d_center.get(), d_sdy.get(), d_sdyx.get(), nullptr);
  // Both sum the same values in double: differences are double rounding only.
  EXPECT_TRUE(gpu_test::all_close(d_sum.download(), sum, 1e-9, "sum"));
  EXPECT_TRUE(gpu_test::all_close(d_sumsq.download(), sumsq, 1e-9, "sumsq"));
  EXPECT_TRUE(gpu_test::all_close(d_sdy.download(), sdy, 1e-9, "sum dy"));
  EXPECT_TRUE(gpu_test::all_close(d_sdyx.download(), sdyx, 1e-9, "sum dy·(x - c)"));
}

TEST(GpuBatchNorm, MomentsMatchCpuKernels) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 10;
  for (const BnCase& k : kCases) {
    check_moments<float>(k, seed += 10);
    check_moments<__nv_bfloat16>(k, seed += 10);
    check_moments<__half>(k, seed += 10);
  }
}

// One forward + backward of the CPU layer and of the GPU chain on the same values.
template <typename S>
void check_layer(const BnCase& k, bool training, bool gamma_zero, uint64_t seed) {
  const std::string what = shape_name(k.shape) + " " + gpu_test::type_name<S>() +
                           (training ? " train" : " eval") + (gamma_zero ? " gamma0" : "");
  SCOPED_TRACE(what);
  const cpu::BnShape s = bn_shape(k.shape);
  const int64_t n = s.outer * s.channels * s.inner, C = s.channels;
  const double eps = 1e-5, momentum = 0.1;

  // Inputs rounded to the storage type, parameters and running statistics in f32.
  const std::vector<S> x_s = gpu_test::to_storage<S>(gpu_test::random_floats(n, seed, 1.0, 4.0));
  const std::vector<S> dy_s = gpu_test::to_storage<S>(gpu_test::random_floats(n, seed + 1, -1.0, 1.0));
  const std::vector<float> x = gpu_test::to_floats(x_s), dy = gpu_test::to_floats(dy_s);
  std::vector<float> gamma = gpu_test::random_floats(C, seed + 2, 0.5, 1.5);
  const std::vector<float> beta = gpu_test::random_floats(C, seed + 3, -0.5, 0.5);
  if (gamma_zero) gamma[0] = 0.0f;
  const std::vector<float> rm0 = gpu_test::random_floats(C, seed + 4, 2.0, 3.0);
  const std::vector<float> rv0 = gpu_test::random_floats(C, seed + 5, 0.5, 1.5);

  // CPU layer.
  BatchNormConfig cfg;
  cfg.num_features = static_cast<int>(C);
  cfg.spatial_dims = k.spatial_dims;
  cfg.eps = eps;
  cfg.momentum = momentum;
  auto unit = test::wrap(std::make_unique<BatchNorm>(cfg), DType::F32);
  auto ps = unit->params();
  auto bs = unit->buffers();
  std::copy(gamma.begin(), gamma.end(), ps[0]->value.data<float>());
  std::copy(beta.begin(), beta.end(), ps[1]->value.data<float>());
  std::copy(rm0.begin(), rm0.end(), bs[0]->value.data<float>());
  std::copy(rv0.begin(), rv0.end(), bs[1]->value.data<float>());
  unit->zero_grad();
  Ctx ctx;
  ctx.training = training;
  const Tensor y_cpu = unit->forward(cpu_tensor(k.shape, x), ctx);
  const Tensor dx_cpu = unit->backward_input(cpu_tensor(k.shape, dy), ctx);

  // GPU chain, composed as kernels/cuda/batchnorm.h describes.
  DeviceArray<S> d_x(x_s), d_dy(dy_s), d_y(n), d_dx(n);
  DeviceArray<float> d_gamma(gamma), d_beta(beta), d_rm(rm0), d_rv(rv0);
  DeviceArray<float> d_ggrad(std::vector<float>(C, 0.0f)), d_bgrad(std::vector<float>(C, 0.0f));
  DeviceArray<int64_t> d_tracked(std::vector<int64_t>{5});
  DeviceArray<double> d_sum(C), d_sumsq(C), d_mean(C), d_invstd(C), d_scale(C), d_ys(C), d_yo(C);
  DeviceArray<double> d_sdy(C), d_sdyx(C), d_dgamma(C), d_dbeta(C), d_b(C), d_d(C);
  DeviceArray<int> d_ok(1);
  const double count = static_cast<double>(s.outer * s.inner);
  if (training) {
    cuda::bn_shifted_moments_cuda<S>(d_x.get(), s, d_rm.get(), d_sum.get(), d_sumsq.get(), nullptr);
    cuda::bn_train_stats_cuda(d_sum.get(), d_sumsq.get(), count, C, eps, momentum, d_rm.get(), d_rv.get(),
                              d_tracked.get(), d_gamma.get(), d_mean.get(), d_invstd.get(), d_scale.get(),
                              nullptr);
  } else {
    cuda::bn_eval_stats_cuda(d_rm.get(), d_rv.get(), d_gamma.get(), C, eps, d_mean.get(), d_invstd.get(),
                             d_scale.get(), nullptr);
  }
  cuda::bn_normalize_cuda<S>(d_x.get(), s, d_mean.get(), d_scale.get(), d_beta.get(), d_y.get(), nullptr);
  cuda::bn_output_recovery_cuda(d_gamma.get(), d_beta.get(), d_scale.get(), C, d_ys.get(), d_yo.get(),
                                d_ok.get(), nullptr);
  const bool keep_output = d_ok.download()[0] == 1;
  EXPECT_EQ(keep_output, !gamma_zero) << "recoverability flag";
  const S* act = keep_output ? d_y.get() : d_x.get();
  const double* center = keep_output ? d_yo.get() : d_mean.get();
  const double* unscale = keep_output ? d_ys.get() : nullptr;
  cuda::bn_backward_moments_cuda<S>(d_dy.get(), act, s, center, d_sdy.get(), d_sdyx.get(), nullptr);
  cuda::bn_backward_local_cuda(d_sdy.get(), d_sdyx.get(), unscale, d_invstd.get(), C, d_dgamma.get(),
                               d_dbeta.get(), nullptr);
  cuda::bn_backward_coefficients_cuda(d_sdy.get(), d_sdyx.get(), d_scale.get(), d_invstd.get(), unscale,
                                      count, training, C, d_b.get(), d_d.get(), nullptr);
  cuda::bn_backward_input_cuda<S>(d_dy.get(), training ? act : nullptr, s, training ? center : nullptr,
                                  d_scale.get(), d_b.get(), d_d.get(), d_dx.get(), nullptr);
  cuda::bn_accumulate_param_grads_cuda(d_dgamma.get(), d_dbeta.get(), C, d_ggrad.get(), d_bgrad.get(),
                                       nullptr);

  const double rtol = gpu_test::storage_rtol<S>();
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_y.download()), tensor_floats(y_cpu), rtol, "y"));
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_dx.download()), tensor_floats(dx_cpu), rtol, "dx"));
  // Parameter gradients are sums over the whole batch of stored values: bf16 rounding of y
  // and dx averages out, f32 agrees to rounding.
  EXPECT_TRUE(gpu_test::all_close(d_ggrad.download(), tensor_floats(ps[0]->grad), rtol, "dgamma"));
  EXPECT_TRUE(gpu_test::all_close(d_bgrad.download(), tensor_floats(ps[1]->grad), rtol, "dbeta"));
  EXPECT_TRUE(gpu_test::all_close(d_rm.download(), tensor_floats(bs[0]->value), 1e-6, "running_mean"));
  EXPECT_TRUE(gpu_test::all_close(d_rv.download(), tensor_floats(bs[1]->value), 1e-6, "running_var"));
  EXPECT_EQ(d_tracked.download()[0], training ? 6 : 5) << "num_batches_tracked";
}

TEST(GpuBatchNorm, TrainingChainMatchesCpuLayerF32) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  for (const BnCase& k : kCases)
    for (bool gamma_zero : {false, true}) {
      check_layer<float>(k, true, gamma_zero, seed += 10);
      if (HasFatalFailure()) return;
    }
}

TEST(GpuBatchNorm, EvalChainMatchesCpuLayerF32) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 600;
  for (const BnCase& k : kCases)
    for (bool gamma_zero : {false, true}) {
      check_layer<float>(k, false, gamma_zero, seed += 10);
      if (HasFatalFailure()) return;
    }
}

TEST(GpuBatchNorm, Bf16AndF16ChainsMatchCpuLayer) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 900;
  for (const BnCase& k : kCases) {
    check_layer<__nv_bfloat16>(k, true, false, seed += 10);
    check_layer<__half>(k, true, true, seed += 10);
    check_layer<__nv_bfloat16>(k, false, false, seed += 10);
    if (HasFatalFailure()) return;
  }
}

TEST(GpuBatchNorm, RepeatedReductionIsBitwiseDeterministic) {
  SM_SKIP_WITHOUT_GPU();
  const BnCase k{{4, 100, 3, 7, 7}, 2};
  const cpu::BnShape s = bn_shape(k.shape);
  const int64_t n = s.outer * s.channels * s.inner, C = s.channels;
  DeviceArray<float> d_x(gpu_test::random_floats(n, 77, -3.0, 3.0));
  DeviceArray<double> d_a(C), d_b(C);
  std::vector<double> first;
  for (int rep = 0; rep < 3; ++rep) {
    cuda::bn_shifted_moments_cuda<float>(d_x.get(), s, nullptr, d_a.get(), d_b.get(), nullptr);
    std::vector<double> now = d_b.download();
    if (rep == 0) first = now;
    else EXPECT_EQ(now, first) << "repeat " << rep;
  }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuBatchNorm, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
