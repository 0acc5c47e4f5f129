// tensor_cuda.h — the few element-wise device operations the Tensor class itself needs
// (fill, dtype conversion). Include only from code compiled when SPIKEMESH_HAVE_CUDA is
// defined. All pointers are device pointers; work is enqueued on `stream` (asynchronous)
// of the current device.
//
// Conversion rounds to nearest even (float -> bf16/f16 as __float2bfloat16_rn/__float2half_rn;
// f64 -> bf16/f16 directly from double); integer destinations truncate like static_cast.
#pragma once
#ifndef SPIKEMESH_HAVE_CUDA
#error "core/tensor_cuda.h is only for CUDA builds"
#endif
#include <cuda_runtime_api.h>

#include <cstdint>

#include "spikemesh/core/dtype.h"

namespace sm {
namespace cuda {

// dst[0..n) = value converted to dt.
void fill(void* dst, DType dt, int64_t n, double value, cudaStream_t stream);

// dst[i] = convert(src[i]) for i < n; src and dst must not overlap (unless from == to).
void convert(const void* src, DType from, void* dst, DType to, int64_t n, cudaStream_t stream);

// Mixed precision: grad[i] *= inv_scale (f32 or f64 grads) and, when any element of the
// result is not finite, *found_nonfinite = 1 (device int; never reset here).
void unscale_and_check(void* grad, DType dt, int64_t n, double inv_scale, int* found_nonfinite,
                       cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
