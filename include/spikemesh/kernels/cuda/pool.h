// pool.h (kernels/cuda) — 2-d max and average pooling on the GPU, matching kernels/cpu/pool.h
// exactly: planes [P = T·N·C, H, W], floor mode, Ho = (H + 2·pad - k)/stride + 1; max pads
// with -inf (padding never wins), first maximum in row-major window order wins, NaN wins and
// propagates; the winner's window offset (kh·k + kw) is saved as uint8_t (k·k <= 256) or
// int32_t; avg counts the padding (divisor k·k). Include only when SPIKEMESH_HAVE_CUDA.
//
// Backward passes GATHER (one thread per dx element, windows visited in the CPU's (i, j)
// order): every dx element is written exactly once, no atomics, deterministic.
// T = float, __nv_bfloat16 or __half (arithmetic f32). Device pointers; async on `stream`.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "spikemesh/kernels/cpu/pool.h"

namespace sm {
namespace cuda {

// x: [P, H, W] -> y: [P, Ho, Wo], argmax: [P, Ho, Wo] window offsets. Idx: uint8_t or int32_t.
template <typename T, typename Idx>
void maxpool2d_forward_cuda(const T* x, const cpu::PoolGeom& g, T* y, Idx* argmax,
                            cudaStream_t stream);

// dx: [P, H, W] (fully overwritten) from dy: [P, Ho, Wo] and the saved window offsets.
template <typename T, typename Idx>
void maxpool2d_backward_cuda(const T* dy, const Idx* argmax, const cpu::PoolGeom& g, T* dx,
                             cudaStream_t stream);

// y[p, i, j] = Σ_window x / (k·k), padding counted as zeros.
template <typename T>
void avgpool2d_forward_cuda(const T* x, const cpu::PoolGeom& g, T* y, cudaStream_t stream);

// dx (fully overwritten) = Σ over windows containing the pixel of dy / (k·k).
template <typename T>
void avgpool2d_backward_cuda(const T* dy, const cpu::PoolGeom& g, T* dx, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
