// float_bits.h (core) — the bits of an IEEE binary32 and the bfloat16 <-> binary32
// conversions on raw bits, shared by the host dtype conversion (core/tensor.cpp) and the
// comm's host reductions (comm/reduce_local.cpp).
// Invariant: float_to_bf16_bits rounds to nearest even and keeps a NaN a (quiet) NaN;
// round_float_to_half rounds to the nearest IEEE half (ties to even, as numpy's
// npy_float_to_half and the F16C instructions), subnormals and overflow to infinity included.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace sm {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_bits_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// f rounded to the nearest IEEE binary16 value, returned as a float (exact).
inline float round_float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  const uint32_t sign = x & 0x80000000u, absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return f;                   // Inf, NaN
  if (absx < 0x38800000u) {                            // below 2^-14: a multiple of 2^-24
    const float units = std::nearbyint(bits_to_float(absx) * 16777216.0f);  // the default mode: ties to even
    return bits_to_float(sign | float_to_bits(units * 5.9604645e-8f));
  }
  const uint32_t rem = absx & 0x1fffu;                 // the 13 bits a half drops
  uint32_t kept = absx & ~0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (kept & 0x2000u))) kept += 0x2000u;  // a carry moves into the exponent
  if (kept >= 0x477ff000u) return bits_to_float(sign | 0x7f800000u);          // above 65504: infinity
  return bits_to_float(sign | kept);
}

}  // namespace sm
