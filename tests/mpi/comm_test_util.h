// comm_test_util.h — element access for every dtype (independent of src/comm's own
// conversions) and the known test data of the comm tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "spikemesh/core/tensor.h"

namespace sm::test {

// Exact encodings for values representable in the format (the tests only use such values).
inline uint16_t exact_bf16(double v) {
  float f = static_cast<float>(v);
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<uint16_t>(x >> 16);  // exact when the low 16 bits are zero
}
inline double from_bf16(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
// binary16 of a normal or zero value with <= 11 significant bits.
inline uint16_t exact_f16(double v) {
  if (v == 0) return std::signbit(v) ? 0x8000 : 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  int e;
  double m = std::frexp(std::fabs(v), &e);  // v = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 15;                     // v = (2m) * 2^(e-1)
  auto mant = static_cast<uint16_t>(std::lround((2 * m - 1) * 1024));
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}
inline double from_f16(uint16_t h) {
  int exp = (h >> 10) & 31, mant = h & 1023;
  double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return (h & 0x8000) ? -v : v;
}

inline void set_elem(Tensor& t, int64_t i, double v) {
  void* p = t.raw();
  switch (t.dtype()) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = exact_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = exact_f16(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
  }
}
inline double get_elem(const Tensor& t, int64_t i) {
  const void* p = t.raw();
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return from_bf16(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return from_f16(static_cast<const uint16_t*>(p)[i]);
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

// Known data: small non-negative integers, exact in every dtype, sums over <= 8 ranks < 256.
inline double known_value(int rank, int64_t i) { return static_cast<double>((i * 7 + rank * 3) % 11 + rank); }

inline bool is_float(DType dt) { return dt == DType::F32 || dt == DType::F64 || dt == DType::BF16 || dt == DType::F16; }

constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8};

}  // namespace sm::test
