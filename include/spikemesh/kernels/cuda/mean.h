// mean.h (kernels/cuda) — the mean over the middle dim of [outer, D, inner] on the GPU and its
// backward, matching the Mean layer's CPU kernels (layers/mean.cpp) exactly in f32:
//   y[o, i] = (Σ_d x[o, d, i]) · (1/D)     (f32 sum in d order, then one multiply by f32 1/D)
//   dx[o, d, i] = dy[o, i] · (1/D)
// One thread per output element (forward: per (o, i), so each sum runs in the CPU's order;
// backward: per dx element): every element is written once, no atomics, deterministic.
// T = float, __nv_bfloat16 or __half (arithmetic f32, one rounding on store). Device
// pointers; async on `stream`; nothing is launched for an empty tensor. Include only when
// SPIKEMESH_HAVE_CUDA is defined.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sm {
namespace cuda {

// x: [outer, d, inner] -> y: [outer, inner]; d >= 1.
template <typename T>
void mean_forward_cuda(const T* x, int64_t outer, int64_t d, int64_t inner, T* y, cudaStream_t stream);

// dy: [outer, inner] -> dx: [outer, d, inner] (fully overwritten); d >= 1.
template <typename T>
void mean_backward_cuda(const T* dy, int64_t outer, int64_t d, int64_t inner, T* dx, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
