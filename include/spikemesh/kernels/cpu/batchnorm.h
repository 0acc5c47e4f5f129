// batchnorm.h — CPU kernels for batch normalisation over a tensor viewed as
// [outer, C, inner] (outer = T·N, inner = spatial size; 1 for [T, N, C] inputs).
//
// Invariants:
//  * Every reduction is per channel, accumulated in double, in an order fixed by the
//    shape alone (fixed-size row chunks summed in chunk order), so results do not depend
//    on the number of OpenMP threads.
//  * Per-channel coefficients are passed as double; element-wise passes compute in the
//    tensor's scalar type T (float or double) and never write their inputs.
#pragma once
#include <cstdint>

namespace sm::cpu {

struct BnShape {
  int64_t outer = 1;     // T·N
  int64_t channels = 1;  // C
  int64_t inner = 1;     // product of spatial dims (H·W, L, or 1)
  int64_t count() const { return outer * inner; }  // elements per channel
};

// Per channel c: sum[c] = Σ (x - shift[c]), sumsq[c] = Σ (x - shift[c])², over outer and
// inner. `shift` (any value close to the mean, e.g. the running mean) keeps the
// single-pass variance accurate. x: [outer, C, inner]; sum, sumsq: [C].
template <typename T>
void bn_shifted_moments(const T* x, const BnShape& s, const double* shift, double* sum,
                        double* sumsq);

// y = (x - center[c]) · scale[c] + offset[c]. x, y: [outer, C, inner] (y may not alias x).
template <typename T>
void bn_normalize(const T* x, const BnShape& s, const double* center, const double* scale,
                  const double* offset, T* y);

// Per channel: sum_dy[c] = Σ dy, sum_dy_xc[c] = Σ dy · (x - center[c]).
// dy, x: [outer, C, inner]; outputs [C]. `x` is whichever tensor the layer saved: its input
// (center = μ) or its output y (center = β, and the caller divides by the scale).
template <typename T>
void bn_backward_moments(const T* dy, const T* x, const BnShape& s, const double* center,
                         double* sum_dy, double* sum_dy_xc);

// dx = a[c] · dy + b[c] · (x - center[c]) + d[c]. Training BN backward is
//   a = γ·istd, b = -γ·istd³·Σdy(x-μ)/n, d = -γ·istd·Σdy/n, center = μ;
// eval BN backward is a = γ·istd, b = d = 0. x may be null when b is all zero.
// From the saved output y instead of x: pass y, center = β and b divided by the scale
// γ·istd (x - μ = (y - β)/(γ·istd)).
template <typename T>
void bn_backward_input(const T* dy, const T* x, const BnShape& s, const double* center,
                       const double* a, const double* b, const double* d, T* dx);

}  // namespace sm::cpu
