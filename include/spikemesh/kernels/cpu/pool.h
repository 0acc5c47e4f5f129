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

// y[p, i, j] = Σ_window x / (k·k), padding counted as zeros.
template <typename T>
void avgpool2d_forward(const T* x, const PoolGeom& g, T* y);

// dx (fully overwritten) = Σ over windows containing the pixel of dy / (k·k).
template <typename T>
void avgpool2d_backward(const T* dy, const PoolGeom& g, T* dx);

}  // namespace sm::cpu
