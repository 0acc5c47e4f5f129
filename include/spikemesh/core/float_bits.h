// float_bits.h (core) — the bits of an IEEE binary32 and the bfloat16 <-> binary32
// conversions on raw bits, shared by the host dtype conversion (core/tensor.cpp) and the
// comm's host reductions (comm/reduce_local.cpp).
// Invariant: float_to_bf16_bits rounds to nearest even and keeps a NaN a (quiet) NaN.
#pragma once
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

}  // namespace sm
