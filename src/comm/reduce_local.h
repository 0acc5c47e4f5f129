// reduce_local.h — host-side element reductions used by the MPI back end, and the
// half-precision conversions they need. Internal to src/comm/.
// Invariant: reduce_ordered combines contributions strictly in the order k = 0, 1, ..., p-1
// (bf16/f16 accumulate in f32 and round once; u8/i32 accumulate in i64), so every rank that
// reduces the same bytes gets the same bits.
#pragma once
#include <cstdint>

#include "spikemesh/comm/comm.h"
#include "spikemesh/core/dtype.h"

namespace sm::comm_detail {

// srcs[k] points at rank k's contribution of n elements; dst gets [n]. dst may alias any
// srcs[k] (elements are reduced block by block into a local accumulator, then stored).
// Large reductions are split over OpenMP threads by element: the order per element is
// still 0..p-1, so the bits do not depend on the thread count.
void reduce_ordered(const void* const* srcs, int p, int64_t n, DType dt, ReduceOp op, void* dst);

// IEEE binary16 and bfloat16 <-> binary32, round to nearest even; NaN stays NaN.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

}  // namespace sm::comm_detail
