// test_gemm_options.cpp — which f32 GEMMs use TF32 (kernels/cuda/gemm_cublas.h), without a GPU:
// an explicit GemmOptions::allow_tf32 wins; unset (what the layers pass) follows the process's
// matmul fp32 precision (gpu_numerics(), set by --matmul-fp32-precision); default_gemm_options()
// makes that explicit. Built where CUDA headers are (the GEMMs' header needs them).
#include <gtest/gtest.h>

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/conv_policy.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"

namespace sm {

TEST(GemmOptions, UnsetFollowsTheMatmulPrecisionAndExplicitWins) {
  GpuNumerics ieee, tf32;
  tf32.matmul_fp32 = Fp32Precision::TF32;
  tf32.conv_fp32 = Fp32Precision::IEEE;
  ieee.conv_fp32 = Fp32Precision::TF32;  // the convolutions' precision does not leak into GEMMs
  cuda::GemmOptions unset, on, off;
  on.allow_tf32 = true;
  off.allow_tf32 = false;
  EXPECT_FALSE(cuda::gemm_allows_tf32(unset, ieee));
  EXPECT_TRUE(cuda::gemm_allows_tf32(unset, tf32));
  EXPECT_TRUE(cuda::gemm_allows_tf32(on, ieee));
  EXPECT_FALSE(cuda::gemm_allows_tf32(off, tf32));
}

TEST(GemmOptions, DefaultOptionsFollowTheProcessNumerics) {
  const GpuNumerics before = gpu_numerics();
  GpuNumerics n;
  n.matmul_fp32 = Fp32Precision::TF32;
  set_gpu_numerics(n);
  ASSERT_TRUE(cuda::default_gemm_options().allow_tf32.has_value());
  EXPECT_TRUE(*cuda::default_gemm_options().allow_tf32);
  n.matmul_fp32 = Fp32Precision::IEEE;
  set_gpu_numerics(n);
  EXPECT_FALSE(*cuda::default_gemm_options().allow_tf32);
  EXPECT_FALSE(cuda::GemmOptions{}.allow_tf32.has_value());  // a layer's {} defers to the process
  set_gpu_numerics(before);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
