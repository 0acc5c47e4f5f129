// philox.cuh (kernels/cuda, internal) — Philox4x32-10 on the device, the same function as
// core/rng.cpp's philox4x32 (Salmon et al., SC'11), and CounterRng::uniform's 53-bit draw.
// Invariant: for equal (counter, key) it returns the CPU's words bit for bit (pure 32-bit
// integer arithmetic; the uniform is an exact integer times 2^-53).
#pragma once
#include <cstdint>

namespace sm {
namespace cuda {
namespace detail {

struct Philox4Words {
  uint32_t w[4];
};

__host__ __device__ __forceinline__ Philox4Words philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2,
                                                              uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// CounterRng::uniform(i, a, b) under key (k0, k1): [0, 1) with 53 bits.
__host__ __device__ __forceinline__ double philox_uniform(uint64_t i, uint32_t a, uint32_t b,
                                                          uint32_t k0, uint32_t k1) {
  const Philox4Words r = philox4x32_10(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), a, b, k0, k1);
  const uint64_t x = (static_cast<uint64_t>(r.w[0]) << 21) ^ (r.w[1] >> 11);  // 53 bits
  return static_cast<double>(x & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace detail
}  // namespace cuda
}  // namespace sm
