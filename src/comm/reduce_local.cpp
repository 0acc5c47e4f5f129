// reduce_local.cpp — ordered host reductions (sum / avg / max) over p contributions, for
// every dtype the comm supports, and the half-precision conversions.
#include "reduce_local.h"

#include <algorithm>
#include <cmath>
#include "spikemesh/core/error.h"
#include "spikemesh/core/float_bits.h"

namespace sm::comm_detail {

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      mant &= 0x3ffu;
      x = sign | (static_cast<uint32_t>(112 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return bits_to_float(x);
}

uint16_t float_to_half(float f) {
  const uint32_t x = float_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {                                              // half subnormal or zero
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t hm = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (hm & 1u))) ++hm;
    return static_cast<uint16_t>(sign | hm);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry rounds up to the next binade / inf
  return static_cast<uint16_t>(h);
}

float bf16_to_float(uint16_t b) { return bf16_bits_to_float(b); }
uint16_t float_to_bf16(float f) { return float_to_bf16_bits(f); }

namespace {

constexpr int64_t kBlock = 512;          // elements per accumulator block
constexpr int64_t kParallelMin = 1 << 16;  // below this, one thread

// Calls block(i0, len) for the kBlock-element blocks [i0, i0 + len) of [0, n), split
// between OpenMP threads when n is large.
template <typename Block>
void for_each_block(int64_t n, Block block) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t i0 = b * kBlock;
    block(i0, std::min(kBlock, n - i0));
  }
}

inline float id_f(float v) { return v; }
inline double id_d(double v) { return v; }
inline float h_load(uint16_t v) { return half_to_float(v); }
inline uint16_t h_store(float v) { return float_to_half(v); }
inline float b_load(uint16_t v) { return bf16_to_float(v); }
inline uint16_t b_store(float v) { return float_to_bf16(v); }

// Floating types stored as S, accumulated as A (float for f32/bf16/f16, double for f64).
template <typename S, typename A, A (*Load)(S), S (*Store)(A)>
void reduce_float(const void* const* srcs, int p, int64_t n, ReduceOp op, S* dst) {
  for_each_block(n, [&](int64_t i0, int64_t len) {
    A acc[kBlock];
    const S* s0 = static_cast<const S*>(srcs[0]) + i0;
    for (int64_t j = 0; j < len; ++j) acc[j] = Load(s0[j]);
    for (int k = 1; k < p; ++k) {
      const S* sk = static_cast<const S*>(srcs[k]) + i0;
      if (op == ReduceOp::Max) {
        for (int64_t j = 0; j < len; ++j) {
          A v = Load(sk[j]);
          acc[j] = (std::isnan(v) || v > acc[j]) ? v : acc[j];
        }
      } else {
        for (int64_t j = 0; j < len; ++j) acc[j] += Load(sk[j]);
      }
    }
    if (op == ReduceOp::Avg)
      for (int64_t j = 0; j < len; ++j) acc[j] = acc[j] / static_cast<A>(p);
    for (int64_t j = 0; j < len; ++j) dst[i0 + j] = Store(acc[j]);
  });
}

// Integers: u8/i32 accumulate exactly in int64; i64 in uint64 (wrapping). Sums wrap to T.
template <typename T>
void reduce_int(const void* const* srcs, int p, int64_t n, ReduceOp op, T* dst) {
  for_each_block(n, [&](int64_t i0, int64_t len) {
    uint64_t acc[kBlock];
    const T* s0 = static_cast<const T*>(srcs[0]) + i0;
    for (int64_t j = 0; j < len; ++j) acc[j] = static_cast<uint64_t>(static_cast<int64_t>(s0[j]));
    for (int k = 1; k < p; ++k) {
      const T* sk = static_cast<const T*>(srcs[k]) + i0;
      if (op == ReduceOp::Max) {
        for (int64_t j = 0; j < len; ++j)
          if (static_cast<int64_t>(sk[j]) > static_cast<int64_t>(acc[j]))
            acc[j] = static_cast<uint64_t>(static_cast<int64_t>(sk[j]));
      } else {
        for (int64_t j = 0; j < len; ++j) acc[j] += static_cast<uint64_t>(static_cast<int64_t>(sk[j]));
      }
    }
    for (int64_t j = 0; j < len; ++j) {
      int64_t v = static_cast<int64_t>(acc[j]);
      if (op == ReduceOp::Avg) v /= p;
      dst[i0 + j] = static_cast<T>(v);
    }
  });
}

}  // namespace

void reduce_ordered(const void* const* srcs, int p, int64_t n, DType dt, ReduceOp op, void* dst) {
  SM_CHECK(p >= 1 && n >= 0, "reduce_ordered p=" << p << " n=" << n);
  switch (dt) {
    case DType::F32: reduce_float<float, float, id_f, id_f>(srcs, p, n, op, static_cast<float*>(dst)); break;
    case DType::F64: reduce_float<double, double, id_d, id_d>(srcs, p, n, op, static_cast<double*>(dst)); break;
    case DType::F16: reduce_float<uint16_t, float, h_load, h_store>(srcs, p, n, op, static_cast<uint16_t*>(dst)); break;
    case DType::BF16: reduce_float<uint16_t, float, b_load, b_store>(srcs, p, n, op, static_cast<uint16_t*>(dst)); break;
    case DType::U8: reduce_int(srcs, p, n, op, static_cast<uint8_t*>(dst)); break;
    case DType::I32: reduce_int(srcs, p, n, op, static_cast<int32_t*>(dst)); break;
    case DType::I64: reduce_int(srcs, p, n, op, static_cast<int64_t*>(dst)); break;
  }
}

}  // namespace sm::comm_detail
