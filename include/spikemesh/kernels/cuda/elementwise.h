// elementwise.h (kernels/cuda) — small element-wise GPU kernels: add, in-place add, scale,
// fill and dtype casts (f32 <-> bf16 / f16). Arithmetic in f32 (round to nearest even on
// store). n may be 0 (no launch). Include only when SPIKEMESH_HAVE_CUDA is defined.
// T = float, __nv_bfloat16 or __half. Device pointers; async on `stream`.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sm {
namespace cuda {

// out = a + b (out may alias a or b).
template <typename T>
void add_cuda(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);

// acc += x.
template <typename T>
void add_inplace_cuda(T* acc, const T* x, int64_t n, cudaStream_t stream);

// out = x·s (out may alias x; s rounded to f32).
template <typename T>
void scale_cuda(const T* x, double s, T* out, int64_t n, cudaStream_t stream);

// x[i] = value (rounded to T).
template <typename T>
void fill_cuda(T* x, double value, int64_t n, cudaStream_t stream);

// out[i] = Dst(in[i]) for (Src, Dst) in {f32, bf16, f16}² (via f32; f32 -> bf16/f16 rounds
// to nearest even). in and out must not overlap unless they are the same type.
template <typename Src, typename Dst>
void cast_cuda(const Src* in, Dst* out, int64_t n, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
