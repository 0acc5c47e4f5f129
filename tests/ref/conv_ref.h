// conv_ref.h — naive double-precision 2-D convolution (tests only): the textbook loops,
// written independently of the production kernels (no im2col, no GEMM, no blocking).
// Layouts: x [N, Cin, H, W], w [Cout, Cin, K, K], bias [Cout] (empty = none),
// y [N, Cout, Ho, Wo], Ho = (H + 2p − K) / s + 1.
#pragma once
#include <cstdint>
#include <vector>

namespace sm::ref {

struct ConvRefShape {
  int64_t n, cin, h, w, cout, k, stride, pad;
  int64_t ho() const { return (h + 2 * pad - k) / stride + 1; }
  int64_t wo() const { return (w + 2 * pad - k) / stride + 1; }
};

std::vector<double> conv2d_forward(const ConvRefShape& s, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& bias);
// dx = ∂(Σ y·dy)/∂x
std::vector<double> conv2d_backward_data(const ConvRefShape& s, const std::vector<double>& dy,
                                         const std::vector<double>& w);
// dw = ∂(Σ y·dy)/∂w  (fresh, not accumulated)
std::vector<double> conv2d_backward_weights(const ConvRefShape& s, const std::vector<double>& x,
                                            const std::vector<double>& dy);
// dbias[c] = Σ dy[n, c, :, :]
std::vector<double> conv2d_backward_bias(const ConvRefShape& s, const std::vector<double>& dy);

}  // namespace sm::ref
