// test_gpu_dropout.cpp — the device Philox generator and the time-shared dropout kernels
// against core/rng.h and kernels/cpu/dropout.h: raw Philox words, the uniform draw, the keep
// mask (bit for bit, odd N·F, several p, steps past 2^32, sample offsets) and the masked
// scaling (f32 exact, bf16/f16 2e-2, in place). The host-evaluated Philox check runs without
// a GPU (it exercises the very __host__ __device__ code the kernels use).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "test_gpu_util.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cpu/dropout.h"
#include "spikemesh/kernels/cuda/dropout.h"

namespace sm {
namespace {

using gpu_test::DeviceArray;

TEST(GpuDropout, HostPhiloxMatchesCounterRng) {
  // No GPU needed: the kernels' Philox and key derivation, evaluated on the host.
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xFFFFFFFFFFFFull}) {
    for (const std::string purpose : {"dropout/features.3", "poisson", "x"}) {
      const CounterRng rng(seed, purpose);
      const cuda::PhiloxKey key = cuda::philox_key(seed, hash_name(purpose));
      for (uint64_t i : {0ull, 1ull, 77ull, (1ull << 32) + 5ull})
        for (uint32_t a : {0u, 3u, 0xFFFFFFFFu})
          for (uint32_t b : {0u, 1000u})
            ASSERT_EQ(cuda::philox_uniform_host(key, i, a, b), rng.uniform(i, a, b))
                << "seed " << seed << " purpose " << purpose << " i " << i << " a " << a << " b " << b;
    }
  }
}

TEST(GpuDropout, DevicePhiloxWordsMatchCpu) {
  SM_SKIP_WITHOUT_GPU();
  const int64_t n = 1000;
  std::vector<uint32_t> counters(4 * n);
  const CounterRng src(5, "test/counters");
  for (int64_t i = 0; i < n; ++i) {
    const Philox4 r = src.bits(static_cast<uint64_t>(i));
    for (int w = 0; w < 4; ++w) counters[4 * i + w] = r[w];
  }
  const cuda::PhiloxKey key = cuda::philox_key(123, hash_name("dropout/x"));
  DeviceArray<uint32_t> d_c(counters), d_out(4 * n);
  cuda::philox4x32_cuda(d_c.get(), n, key, d_out.get(), nullptr);
  const std::vector<uint32_t> out = d_out.download();
  for (int64_t i = 0; i < n; ++i) {
    const Philox4 want = philox4x32({counters[4 * i], counters[4 * i + 1], counters[4 * i + 2], counters[4 * i + 3]},
                                    {key.k0, key.k1});
    for (int w = 0; w < 4; ++w) ASSERT_EQ(out[4 * i + w], want[w]) << "counter " << i << " word " << w;
  }
}

TEST(GpuDropout, MaskMatchesCpuBitForBit) {
  SM_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t N, F;
  };
  for (const Case k : {Case{5, 147}, Case{1, 1}, Case{3, 5}, Case{64, 1000}, Case{7, 4096}})
    for (double p : {0.0, 0.1, 0.5, 0.9, 1.0})
      for (int64_t step : {int64_t(0), int64_t(7), (int64_t(1) << 32) + 3})
        for (int64_t offset : {int64_t(0), int64_t(1000)}) {
          const uint64_t seed = 17;
          const std::string name = "dropout/features.4";
          const CounterRng rng(seed, name);
          std::vector<uint8_t> want(cpu::dropout_mask_bytes(k.N, k.F));
          cpu::dropout_draw_mask(rng, p, static_cast<uint32_t>(step), offset, k.N, k.F, want.data());
          DeviceArray<uint8_t> d_bits(want.size());
          cuda::dropout_draw_mask_cuda(cuda::philox_key(seed, hash_name(name)), p, static_cast<uint32_t>(step),
                                       offset, k.N, k.F, d_bits.get(), nullptr);
          ASSERT_EQ(d_bits.download(), want) << "N=" << k.N << " F=" << k.F << " p=" << p << " step=" << step
                                             << " offset=" << offset;
        }
}

template <typename S>
void check_apply(int64_t T, int64_t N, int64_t F, double p, uint64_t seed) {
  SCOPED_TRACE(std::string(gpu_test::type_name<S>()) + " T=" + std::to_string(T) + " N=" + std::to_string(N) +
               " F=" + std::to_string(F));
  const CounterRng rng(seed, "dropout/d");
  std::vector<uint8_t> bits(cpu::dropout_mask_bytes(N, F));
  cpu::dropout_draw_mask(rng, p, 3, 0, N, F, bits.data());
  const std::vector<S> x_s = gpu_test::to_storage<S>(gpu_test::random_floats(T * N * F, seed, -2.0, 2.0));
  const std::vector<float> x = gpu_test::to_floats(x_s);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  std::vector<float> y_cpu(x.size());
  cpu::dropout_apply<float>(x.data(), bits.data(), T, N, F, scale, y_cpu.data());

  DeviceArray<uint8_t> d_bits(bits);
  DeviceArray<S> d_x(x_s), d_y(x.size());
  cuda::dropout_apply_cuda<S>(d_x.get(), d_bits.get(), T, N, F, scale, d_y.get(), nullptr);
  const double rtol = sizeof(S) == 4 ? 0.0 : 2e-2;
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_y.download()), y_cpu, rtol, "y"));
  cuda::dropout_apply_cuda<S>(d_x.get(), d_bits.get(), T, N, F, scale, d_x.get(), nullptr);  // in place
  EXPECT_TRUE(gpu_test::all_close(gpu_test::to_floats(d_x.download()), y_cpu, rtol, "y in place"));
}

TEST(GpuDropout, ApplyMatchesCpu) {
  SM_SKIP_WITHOUT_GPU();
  uint64_t seed = 40;
  for (int64_t T : {1, 4})
    for (int64_t N : {1, 3, 16})
      for (int64_t F : {1, 147, 1000}) {
        check_apply<float>(T, N, F, 0.3, seed += 10);
        check_apply<__nv_bfloat16>(T, N, F, 0.5, seed += 10);
        check_apply<__half>(T, N, F, 0.2, seed += 10);
        if (HasFatalFailure()) return;
      }
}

}  // namespace
}  // namespace sm

#else  // !SPIKEMESH_HAVE_CUDA

TEST(GpuDropout, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
