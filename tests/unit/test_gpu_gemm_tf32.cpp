// test_gpu_gemm_tf32.cpp — TF32 in cuBLAS GEMMs is really on under --matmul-fp32-precision tf32
// and really off under ieee (the default). A = 1 + 2^-12 everywhere is exact in fp32 and rounds
// to 1 in TF32 (10 mantissa bits); with B = 1 every element of C = A·B over k = 128 is
// 128 + 2^-5 exactly in IEEE fp32 (sums of exact multiples of 2^-12 below 2^12) and 128 when
// the inputs are rounded to TF32. Also: an explicit GemmOptions wins over the process setting.
#include <gtest/gtest.h>

#ifdef SPIKEMESH_HAVE_CUDA
#include <cmath>

#include "gpu_test_util.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/conv_policy.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"

namespace sm {
namespace {

// C = A·B on the GPU under `numerics` (and `opt`), m = n = k = 128; returns C on the host.
Tensor product(const GpuNumerics& numerics, const cuda::GemmOptions& opt) {
  const int64_t m = 128;
  const GpuNumerics before = gpu_numerics();
  set_gpu_numerics(numerics);
  const Tensor A = Tensor::full({m, m}, 1.0 + std::ldexp(1.0, -12), DType::F32, gputest::gpu());
  const Tensor B = Tensor::full({m, m}, 1.0, DType::F32, gputest::gpu());
  Tensor C = Tensor::zeros({m, m}, DType::F32, gputest::gpu());
  cuda::gemm(0, false, false, m, m, m, 1.0, A.raw(), m, B.raw(), m, DType::F32, 0.0, C.raw(), m, DType::F32, opt);
  Tensor host = C.to(Device::cpu());
  set_gpu_numerics(before);
  return host;
}

// How many elements equal `want` exactly.
int64_t count_equal(const Tensor& c, double want) {
  int64_t n = 0;
  for (int64_t i = 0; i < c.numel(); ++i) n += c.at(i) == want;
  return n;
}

}  // namespace

TEST(GpuGemm, Tf32FollowsTheMatmulPrecision) {
  SKIP_WITHOUT_GPU();
  const double exact = 128.0 + std::ldexp(1.0, -5), rounded = 128.0;
  GpuNumerics ieee, tf32;
  tf32.matmul_fp32 = Fp32Precision::TF32;
  const Tensor strict = product(ieee, {});
  EXPECT_EQ(count_equal(strict, exact), strict.numel()) << "ieee: every element exact, e.g. " << strict.at(0);
  const Tensor fast = product(tf32, {});
  EXPECT_EQ(count_equal(fast, rounded), fast.numel()) << "tf32: inputs rounded to TF32, e.g. " << fast.at(0);
  cuda::GemmOptions off;
  off.allow_tf32 = false;
  const Tensor forced = product(tf32, off);  // an explicit option wins
  EXPECT_EQ(count_equal(forced, exact), forced.numel()) << forced.at(0);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
