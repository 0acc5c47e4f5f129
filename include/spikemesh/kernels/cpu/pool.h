// pool.h — CPU 2-d max and average pooling over planes [P, H, W] (P = T·N·C), PyTorch
// semantics: floor mode, Ho = (H + 2·pad - k) / stride + 1; max pads with -inf (padding
// never wins), avg counts the padding (count_include_pad = true: divisor k·k).
//
// Invariants: planes are independent (OpenMP over planes); max pooling records for every
// output the offset of its winner inside the k×k window (kh·k + kw; first maximum in
// row-major window order wins, NaN wins and propagates), as u8 when k·k <= 256 and i32
// otherwise; backward scatters through those offsets, summing where windows overlap.
#pragma once
#include <cstdint>

namespace sm::cpu {

struct PoolGeom {
  int64_t planes = 1;  // P = T·N·C
  int64_t h = 1, w = 1;
  int kernel = 2, stride = 2, padding = 0;
  int64_t out_h() const { return (h + 2 * padding - kernel) / stride + 1; }
  int64_t out_w() const { return (w + 2 * padding - kernel) / stride + 1; }
};

// x: [P, H, W] -> y: [P, Ho, Wo], argmax: [P, Ho, Wo] window offsets.
// Idx is uint8_t (k·k <= 256) or int32_t.
template <typename T, typename Idx>
void maxpool2d_forward(const T* x, const PoolGeom& g, T* y, Idx* argmax);

// dx: [P, H, W] (fully overwritten) from dy: [P, Ho, Wo] and the saved window offsets.
template <typename T, typename Idx>
void maxpool2d_backward(const T* dy, const Idx* argmax, const PoolGeom& g, T* dx);

// Max pooling of a batch norm's output that is never written (the fused epilogue,
// layers/fused_epilogue.h): plane p, channel c = p mod channels, is read as
// fma(x − center[c], scale[c], offset[c]) in T — bitwise bn_normalize's output — one plane at a
// time into a per-thread buffer, then pooled exactly as maxpool2d_forward pools it (same y, same
// offsets). x: [P, H, W] the batch norm's input.
template <typename T, typename Idx>
void maxpool2d_forward_normalized(const T* x, const PoolGeom& g, int64_t channels, const double* center,
                                  const double* scale, const double* offset, T* y, Idx* argmax);

// The batch norm's backward sums from the pooled gradient (what bn_backward_moments would read
// from the scattered dx): per channel c, over the outputs o of its planes, Σ dy[o] and
// Σ dy[o]·(x[winner of o] − center[c]), in double; per plane first, then the planes of a channel
// in order (the same bits for any thread count). sum_dy, sum_dy_xc: [channels], overwritten.
template <typename T, typename Idx>
void maxpool2d_bn_grad_sums(const T* dy, const Idx* argmax, const T* x, const PoolGeom& g, int64_t channels,
                            const double* center, double* sum_dy, double* sum_dy_xc);

// y[p, i, j] = Σ_window x / (k·k), padding counted as zeros.
template <typename T>
void avgpool2d_forward(const T* x, const PoolGeom& g, T* y);

// dx (fully overwritten) = Σ over windows containing the pixel of dy / (k·k).
template <typename T>
void avgpool2d_backward(const T* dy, const PoolGeom& g, T* dx);

}  // namespace sm::cpu
