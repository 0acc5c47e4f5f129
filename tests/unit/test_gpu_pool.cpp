// test_gpu_pool.cpp — CUDA max / avg pooling against the CPU kernels (kernels/cpu/pool.h):
// outputs, saved window offsets (u8 and i32) and gathered input gradients, for k2s2 and
// general windows (overlapping, padded, odd H = W = 7), ties, -inf and NaN, f32 / bf16 / f16.
// f32 results must be equal (same operations in the same order); bf16/f16 within 2e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/kernels/cpu/pool.h"
#include "spikemesh/kernels/cuda/pool.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

struct PoolCase {
  int64_t planes, h, w;
  int k, stride, pad;
};

const PoolCase kCases[] = {
    {6, 8, 8, 2, 2, 0},     // the common fast path on the CPU
    {9, 7, 7, 2, 2, 0},     // odd H = W: the last row/column is in no window
    {3, 7, 7, 3, 1, 1},     // overlapping windows with padding
    {4, 7, 5, 3, 2, 1},     // non-square, stride 2, padding
    {2, 9, 9, 4, 3, 2},     // padding = k/2
    {5, 32, 32, 2, 2, 0},   // many planes of a CIFAR-size map
    {1, 17, 17, 17, 1, 0},  // k·k = 289 > 256 (i32 offsets only)
};

cpu::PoolGeom geom(const PoolCase& c) {
  cpu::PoolGeom g;
  g.planes = c.planes;
  g.h = c.h;
  g.w = c.w;
  g.kernel = c.k;
  g.stride = c.stride;
  g.padding = c.pad;
  return g;
}

std::string case_name(const PoolCase& c) {
  return "P=" + std::to_string(c.planes) + " " + std::to_string(c.h) + "x" + std::to_string(c.w) +
         " k=" + std::to_string(c.k) + " s=" + std::to_string(c.stride) + " p=" + std::to_string(c.pad);
}

// Inputs with ties (values on a coarse grid), plus a few -inf and NaN when asked.
std::vector<float> pool_input(size_t n, uint64_t seed, bool specials) {
  std::vector<float> x = gpu_test::random_floats(n, seed, -4.0, 4.0);
  for (float& v : x) v = std::round(v * 2.0f) / 2.0f;  // many equal values: tie-breaking
  if (specials && n > 20) {
    x[3] = -std::numeric_limits<float>::infinity();
    x[n / 2] = std::numeric_limits<float>::quiet_NaN();
    x[n - 5] = std::numeric_limits<float>::infinity();
  }
  return x;
}

template <typename S, typename Idx>
void check_max(const PoolCase& pc, uint64_t seed, bool specials) {
  SCOPED_TRACE(case_name(pc) + " " + gpu_test::type_name<S>() + (sizeof(Idx) == 1 ? " u8" : " i32") +
               (specials ? " inf/nan" : ""));
  const cpu::PoolGeom g = geom(pc);
  const int64_t n_in = g.planes * g.h * g.w, n_out = g.planes * g.out_h() * g.out_w();
  const std::vector<S> x_s = gpu_test::to_storage<S>(pool_input(n_in, seed, specials));
  const std::vector<S> dy_s = gpu_test::to_storage<S>(gpu_test::random_floats(n_out, seed + 1, -1.0, 1.0));
  const std::vector<float> x = gpu_test::to_floats(x_s), dy = gpu_test::to_floats(dy_s);

  std::vector<float> y_cpu(n_out), dx_cpu(n_in);
  std::vector<Idx> arg_cpu(n_out);
  cpu::maxpool2d_forward<float, Idx>(x.data(), g, y_cpu.data(), arg_cpu.data());
  cpu::maxpool2d_backward<float, Idx>(dy.data(), arg_cpu.data(), g, dx_cpu.data());

  DeviceArray<S> d_x(x_s), d_dy(dy_s), d_y(n_out), d_dx(n_in);
  DeviceArray<Idx> d_arg(n_out);
  cuda::maxpool2d_forward_cuda<S, Idx>(d_x.get(), g, d_y.get(), d_arg.get(), nullptr);
  cuda::maxpool2d_backward_cuda<S, Idx>(d_dy.get(), d_arg.get(), g, d_dx.get(), nullptr);

  // The maximum is one of the inputs: exact in every storage type.
  const std::vector<float> y = gpu_test::to_floats(d_y.download());
  for (int64_t i = 0; i < n_out; ++i) {
    const bool both_nan = std::isnan(y[i]) && std::isnan(y_cpu[i]);
    ASSERT_TRUE(both_nan || y[i] == y_cpu[i]) << "y at " << i << ": " << y[i] << " vs " << y_cpu[i];
  }
  EXPECT_EQ(d_arg.download(), arg_cpu) << "window offsets";
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_dx.download()), dx_cpu,
                                  sizeof(S) == 4 ? 0.0 : 2e-2, "dx", sizeof(S) == 4 ? 0.0 : 1.0));
}

template <typename S>
void check_avg(const PoolCase& pc, uint64_t seed) {
  SCOPED_TRACE(case_name(pc) + " " + gpu_test::type_name<S>());
  const cpu::PoolGeom g = geom(pc);
  const int64_t n_in = g.planes * g.h * g.w, n_out = g.planes * g.out_h() * g.out_w();
  const std::vector<S> x_s = gpu_test::to_storage<S>(gpu_test::random_floats(n_in, seed, -2.0, 2.0));
  const std::vector<S> dy_s = gpu_test::to_storage<S>(gpu_test::random_floats(n_out, seed + 1, -1.0, 1.0));
  const std::vector<float> x = gpu_test::to_floats(x_s), dy = gpu_test::to_floats(dy_s);

  std::vector<float> y_cpu(n_out), dx_cpu(n_in);
  cpu::avgpool2d_forward<float>(x.data(), g, y_cpu.data());
  cpu::avgpool2d_backward<float>(dy.data(), g, dx_cpu.data());

  DeviceArray<S> d_x(x_s), d_dy(dy_s), d_y(n_out), d_dx(n_in);
  cuda::avgpool2d_forward_cuda<S>(d_x.get(), g, d_y.get(), nullptr);
  cuda::avgpool2d_backward_cuda<S>(d_dy.get(), g, d_dx.get(), nullptr);
  const double rtol = sizeof(S) == 4 ? 1e-6 : 2e-2;
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_y.download()), y_cpu, rtol, "y"));
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_dx.download()), dx_cpu, rtol, "dx"));
}

TEST(GpuPool, MaxPoolMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 10;
  for (const PoolCase& pc : kCases) {
    for (bool specials : {false, true}) {
      if (pc.k * pc.k <= 256) check_max<float, uint8_t>(pc, seed += 10, specials);
      check_max<float, int32_t>(pc, seed += 10, specials);
      check_max<__nv_bfloat16, int32_t>(pc, seed += 10, specials);
      if (pc.k * pc.k <= 256) check_max<__half, uint8_t>(pc, seed += 10, specials);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(GpuPool, AvgPoolMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 500;
  for (const PoolCase& pc : kCases) {
    check_avg<float>(pc, seed += 10);
    check_avg<__nv_bfloat16>(pc, seed += 10);
    check_avg<__half>(pc, seed += 10);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuPool, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
