// maxpool3s2_avx512.h — the AVX-512 max pooling of kernel 3, stride 2, padding 1 behind
// pool.cpp's maxpool2d_forward and maxpool2d_forward_normalized (f32, u8 offsets): the same
// outputs and window offsets, bit for bit, as their general kernels.
#pragma once
#include <cstdint>

#include "spikemesh/kernels/cpu/pool.h"

namespace sm::cpu {

// Pools x [P, H, W] into y and argmax [P, Ho, Wo] and returns true, or returns false and does
// nothing: no AVX-512 kernels (isa.h), another window, or planes narrower than 16 columns.
// scale null: x is pooled as it is; else plane p is read as fma(x − center[c], scale[c],
// offset[c]) in f32, c = p mod channels (maxpool2d_forward_normalized).
bool maxpool3s2_forward_avx512(const float* x, const PoolGeom& g, int64_t channels, const double* center,
                               const double* scale, const double* offset, float* y, uint8_t* argmax);

}  // namespace sm::cpu
