// test_gpu_elementwise.cpp — the CUDA element-wise kernels (add, in-place add, scale, fill,
// casts f32 <-> bf16 <-> f16) against plain host loops on the same values: f32 results
// exact, bf16/f16 results equal to the host's round-to-nearest-even of the f32 result.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cuda/elementwise.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;
using gpu_test::from_float;
using gpu_test::to_float;

// Host expectation: the f32 result rounded to S and back.
template <typename S>
float rounded(float v) {
  return to_float(from_float<S>(v));
}

template <typename S>
void check_arith(int64_t n, uint64_t seed) {
  SCOPED_TRACE(std::string(gpu_test::type_name<S>()) + " n=" + std::to_string(n));
  const std::vector<S> a_s = gpu_test::to_storage<S>(gpu_test::random_floats(n, seed, -3.0, 3.0));
  const std::vector<S> b_s = gpu_test::to_storage<S>(gpu_test::random_floats(n, seed + 1, -3.0, 3.0));
  const std::vector<float> a = gpu_test::to_floats(a_s), b = gpu_test::to_floats(b_s);
  const double s = -0.3;
  std::vector<float> want_add(n), want_scale(n);
  for (int64_t i = 0; i < n; ++i) {
    want_add[i] = rounded<S>(a[i] + b[i]);
    want_scale[i] = rounded<S>(a[i] * static_cast<float>(s));
  }
  DeviceArray<S> d_a(a_s), d_b(b_s), d_out(n);
  cuda::add_cuda<S>(d_a.get(), d_b.get(), d_out.get(), n, nullptr);
  EXPECT_EQ(gpu_test::to_floats(d_out.download()), want_add) << "add";
  cuda::scale_cuda<S>(d_a.get(), s, d_out.get(), n, nullptr);
  EXPECT_EQ(gpu_test::to_floats(d_out.download()), want_scale) << "scale";
  cuda::add_inplace_cuda<S>(d_a.get(), d_b.get(), n, nullptr);
  EXPECT_EQ(gpu_test::to_floats(d_a.download()), want_add) << "add in place";
  cuda::scale_cuda<S>(d_b.get(), 2.0, d_b.get(), n, nullptr);  // aliasing
  std::vector<float> want_b2(n);
  for (int64_t i = 0; i < n; ++i) want_b2[i] = rounded<S>(b[i] * 2.0f);
  EXPECT_EQ(gpu_test::to_floats(d_b.download()), want_b2) << "scale in place";
  cuda::fill_cuda<S>(d_out.get(), 0.1, n, nullptr);
  EXPECT_EQ(gpu_test::to_floats(d_out.download()), std::vector<float>(n, rounded<S>(0.1f))) << "fill";
}

template <typename Src, typename Dst>
void check_cast(int64_t n, uint64_t seed) {
  SCOPED_TRACE(std::string(gpu_test::type_name<Src>()) + " -> " + gpu_test::type_name<Dst>() + " n=" +
               std::to_string(n));
  const std::vector<Src> in = gpu_test::to_storage<Src>(gpu_test::random_floats(n, seed, -100.0, 100.0));
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = rounded<Dst>(to_float(in[i]));
  DeviceArray<Src> d_in(in);
  DeviceArray<Dst> d_out(n);
  cuda::cast_cuda<Src, Dst>(d_in.get(), d_out.get(), n, nullptr);
  EXPECT_EQ(gpu_test::to_floats(d_out.download()), want);
}

TEST(GpuElementwise, ArithmeticMatchesHost) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 10;
  for (int64_t n : {1, 33, 1000, 300007}) {
    check_arith<float>(n, seed += 10);
    check_arith<__nv_bfloat16>(n, seed += 10);
    check_arith<__half>(n, seed += 10);
  }
}

TEST(GpuElementwise, CastsRoundToNearestEven) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (int64_t n : {1, 1000, 65537}) {
    check_cast<float, __nv_bfloat16>(n, seed += 10);
    check_cast<float, __half>(n, seed += 10);
    check_cast<__nv_bfloat16, float>(n, seed += 10);
    check_cast<__half, float>(n, seed += 10);
    check_cast<__nv_bfloat16, __half>(n, seed += 10);
    check_cast<__half, __nv_bfloat16>(n, seed += 10);
    check_cast<float, float>(n, seed += 10);
  }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuElementwise, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
