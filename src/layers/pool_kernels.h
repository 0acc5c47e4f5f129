// pool_kernels.h — the pooling operations behind Pool2d's one flow (pool.cpp), run on either
// device: pool.cpp dispatches the CPU kernels (kernels/cpu/pool.h, f32/f64), run_cuda
// (pool_cuda.cpp, CUDA builds) the CUDA ones (kernels/cuda/pool.h, f32/bf16/f16) with the same
// semantics. Window offsets of max pooling (`argmax`) are u8 when kernel² <= 256, else i32 —
// the same choice on both devices.
#pragma once
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cpu/pool.h"

namespace sm::pool_kernels {

enum class Op {
  MaxForward,   // in: x [P·H·W] -> out: y [P·Ho·Wo], argmax: the winner's window offset
  MaxBackward,  // in: dy [P·Ho·Wo], argmax -> out: dx [P·H·W]
  AvgForward,   // in: x -> out: y
  AvgBackward,  // in: dy -> out: dx
};

// Runs op over P = T·N·C planes on the CUDA device of `in` (CUDA builds only).
void run_cuda(Op op, const cpu::PoolGeom& g, const Tensor& in, Tensor& out, const Tensor& argmax);

}  // namespace sm::pool_kernels
