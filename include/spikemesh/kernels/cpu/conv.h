// conv.h — 2-D convolution kernels on the CPU (square kernel, equal stride and zero padding
// on both axes, no dilation/groups), as PyTorch's Conv2d computes it.
//
// Layouts (contiguous, row-major): x [batch, Cin, H, W], w [Cout, Cin, K, K], bias [Cout],
// y [batch, Cout, Ho, Wo] with Ho = (H + 2·pad − K) / stride + 1 (floor), likewise Wo.
// Time-major activations [T, N, C, H, W] are passed as batch = T·N.
//
// Contracts shared by every variant:
//  forward            y overwritten; bias may be nullptr.
//  backward_data      dx overwritten (dx = ∂L/∂x given dy).
//  backward_weights   dw += ∂L/∂w; dbias += ∂L/∂bias (dbias may be nullptr). Accumulates.
//
// Variants:
//  conv2d_*           the production entry: float -> oneDNN (primitives cached per shape,
//                     blocked layouts with reorders where faster), double -> im2col.
//  conv2d_*_im2col    own code (im2col + the blocked GEMM of gemm.h), float and double.
//                     Deterministic: bitwise identical for any OpenMP thread count (samples
//                     or C tiles are split between threads, never a reduction).
//  conv2d_*_dnnl      oneDNN, float only.
#pragma once
#include <cstdint>
#include <memory>

namespace sm::cpu {

struct Conv2dGeometry {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel = 1, stride = 1, padding = 0;

  int64_t out_height() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * padding - kernel) / stride + 1; }
  int64_t input_numel() const { return batch * in_channels * height * width; }
  int64_t output_numel() const { return batch * out_channels * out_height() * out_width(); }
  int64_t weight_numel() const { return out_channels * in_channels * kernel * kernel; }
  double flops() const {  // multiply-adds x 2 of one pass (forward, data or weights)
    return 2.0 * static_cast<double>(output_numel()) * in_channels * kernel * kernel;
  }
};

// Production entry points (float: oneDNN, double: im2col).
template <typename T>
void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y);
template <typename T>
void conv2d_backward_data(const Conv2dGeometry& g, const T* dy, const T* w, T* dx);
template <typename T>
void conv2d_backward_weights(const Conv2dGeometry& g, const T* x, const T* dy, T* dw, T* dbias);

// Own deterministic im2col + GEMM implementation.
template <typename T>
void conv2d_forward_im2col(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y);
template <typename T>
void conv2d_backward_data_im2col(const Conv2dGeometry& g, const T* dy, const T* w, T* dx);
template <typename T>
void conv2d_backward_weights_im2col(const Conv2dGeometry& g, const T* x, const T* dy, T* dw,
                                    T* dbias);

// 1×1 convolution over channels of tokens (Conv1d k=1): x [batch, Cin, L], w [Cout, Cin],
// bias [Cout], y [batch, Cout, L]; same contracts as above. float: forward and backward data
// as one oneDNN batched matmul (w broadcast over the batch), weights as one oneDNN matmul per
// sample adding into dw in sample order; double: the own im2col path.
template <typename T>
void conv1x1_forward(int64_t batch, int64_t cin, int64_t cout, int64_t len, const T* x, const T* w,
                     const T* bias, T* y);
template <typename T>
void conv1x1_backward_data(int64_t batch, int64_t cin, int64_t cout, int64_t len, const T* dy,
                           const T* w, T* dx);
template <typename T>
void conv1x1_backward_weights(int64_t batch, int64_t cin, int64_t cout, int64_t len, const T* x,
                              const T* dy, T* dw, T* dbias);

// oneDNN (float).
void conv2d_forward_dnnl(const Conv2dGeometry& g, const float* x, const float* w,
                         const float* bias, float* y);
void conv2d_backward_data_dnnl(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);
// The three passes through oneDNN's Winograd F(4×4, 3×3) kernels (AVX-512 CPUs; 3×3 stride
// 1); direct where oneDNN has none. Fewer multiplies, a larger f32 error than direct (the
// transforms' rounding): tests/unit/test_conv.cpp bounds it. conv2d_winograd_available says
// whether this CPU and geometry get the Winograd kernel (probed once per geometry).
void conv2d_forward_winograd_dnnl(const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                                  float* y);
void conv2d_backward_data_winograd_dnnl(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);
void conv2d_backward_weights_winograd_dnnl(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                           float* dbias);
bool conv2d_winograd_available(const Conv2dGeometry& g);
void conv2d_backward_weights_dnnl(const Conv2dGeometry& g, const float* x, const float* dy,
                                  float* dw, float* dbias);
// The weight gradient (as conv2d_backward_weights_dnnl, or its Winograd form when `winograd`)
// of spikes kept as bits (bitpack.h: pack_bits of x [batch, Cin, H, W]), unpacked straight into
// the primitive's channel-blocked input — no plain copy and no conversion. The same bits as
// unpacking first. False, nothing done, where that layout is not nChw16c / nChw8c or Cin or
// H·W do not fit it (bitpack.h: unpack_bits_channel_blocked): the caller unpacks instead.
bool conv2d_backward_weights_bits_dnnl(const Conv2dGeometry& g, const uint8_t* x_bits, const float* dy, float* dw,
                                       float* dbias, bool winograd);

// While one lives on the calling thread, that thread's oneDNN convolutions convert an output
// gradient dy to their blocked layout once for two passes: a backward-data call keeps each
// converted dy (keyed by the caller's pointer and the layout: per chunk of samples), and the
// backward-weights call on the same dy takes it instead of converting again (the VGG's
// backward converts ~110 MB less per step). For one layer's backward — input gradient, then
// weight gradient on the same dy; its owner guarantees that no dy passed in changes while it
// lives. Conversions not taken are freed with it. Scopes nest (the innermost one is used).
class DyLayoutReuse {
 public:
  DyLayoutReuse();
  ~DyLayoutReuse();
  DyLayoutReuse(const DyLayoutReuse&) = delete;
  DyLayoutReuse& operator=(const DyLayoutReuse&) = delete;
  struct Kept;  // onednn_conv.cpp

 private:
  std::unique_ptr<Kept> kept_;
  Kept* outer_;
};

}  // namespace sm::cpu
