// winograd.h — own Winograd F(2×2, 3×3) and F(4×4, 3×3) convolutions on the CPU (f32), for the
// dense 3×3 stride-1 passes on CPUs where oneDNN has no Winograd kernel (it has one only with
// AVX-512): F(2, 3) for the forward, F(4, 3) for the input gradient. Same layouts and
// contracts as conv.h.
//
// Method (Lavin & Gray 2016): the output is cut into 2×2 tiles, each read as a 4×4 input
// patch; U = G·g·Gᵀ per filter, V = Bᵀ·d·B per patch, then for each of the 16 transformed
// positions one GEMM M = U·V over channels (the own deterministic GEMM of gemm.h), and
// Y = Aᵀ·M·A per tile. 16 multiplies per 2×2 outputs per channel pair instead of 36.
//
// Invariants: tiles are processed in blocks, one block per task, each output written by
// exactly one task; every output sums the same products in the same order whatever the block
// size, so the result is bitwise the same for every OpenMP thread count. The f32 error stays
// near the direct kernel's (F(2, 3)'s transforms have entries of magnitude ≤ 1): ConvWinogradOwn
// in tests/unit/test_conv.cpp bounds it against the naive double reference.
#pragma once
#include "spikemesh/kernels/cpu/conv.h"

namespace sm::cpu {

// Whether the own Winograd kernels take g: 3×3, stride 1, padding 0–2.
bool winograd_f2_applies(const Conv2dGeometry& g);
// y [batch, Cout, Ho, Wo] = x ⋆ w (+ bias; bias may be nullptr). y overwritten.
void conv2d_forward_winograd_f2(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
// dx [batch, Cin, H, W] = ∂L/∂x given dy: the same kernel on dy with w rotated by 180° and its
// channel axes swapped, padding 2 − pad. dx overwritten.
void conv2d_backward_data_winograd_f2(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);

// The same with F(4×4, 3×3): 36 multiplies per 4×4 outputs per channel pair instead of 144
// (F(2, 3): 64), cheaper transforms per output, but entries up to 8 in its transforms, so
// about ten times F(2, 3)'s rounding — oneDNN's AVX-512 Winograd is this variant. Used for the
// input gradient, whose result feeds no threshold.
void conv2d_forward_winograd_f4(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_data_winograd_f4(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);

// dw [Cout, Cin, 3, 3] += ∂L/∂w (dbias += ∂L/∂bias when not nullptr) of the forward
// convolution x ⋆ w given dy: per transformed position the gradient tiles A·dy·Aᵀ times the
// input tiles Bᵀ·x·B summed over all tiles (one GEMM over the tiles per position), then
// Gᵀ·(that)·G per filter in double. The tiles are summed in blocks of the GEMM's reduction
// block, in order: bitwise the same at every thread count.
void conv2d_backward_weights_winograd_f2(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                         float* dbias);
void conv2d_backward_weights_winograd_f4(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                         float* dbias);

}  // namespace sm::cpu
