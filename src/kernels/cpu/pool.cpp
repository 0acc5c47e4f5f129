// pool.cpp — CPU max/avg pooling kernels (see kernels/cpu/pool.h). OpenMP over planes;
// a fast path for the common kernel 2, stride 2, no padding; general windows otherwise.
#include "spikemesh/kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sm::cpu {
namespace {

bool is_k2s2(const PoolGeom& g) { return g.kernel == 2 && g.stride == 2 && g.padding == 0; }

}  // namespace

// v replaces best: larger, or the first NaN (NaN then propagates).
template <typename T>
inline bool takes_over(T v, T best) {
  return (v > best) | ((v != v) & (best == best));
}

template <typename T, typename Idx>
void maxpool2d_forward(const T* x, const PoolGeom& g, T* y, Idx* argmax) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel, st = g.stride, pad = g.padding;
  if (is_k2s2(g)) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      for (int64_t i = 0; i < Ho; ++i) {
        const T* r0 = x + (p * H + 2 * i) * W;
        const T* r1 = r0 + W;
        T* yr = y + (p * Ho + i) * Wo;
        Idx* ar = argmax + (p * Ho + i) * Wo;
        for (int64_t j = 0; j < Wo; ++j) {  // window order a b / c d, first maximum wins
          const T a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
          const bool tb = takes_over(b, a);
          T best = tb ? b : a;
          int off = tb ? 1 : 0;
          const bool tc = takes_over(c, best);
          best = tc ? c : best;
          off = tc ? 2 : off;
          const bool td = takes_over(d, best);
          yr[j] = td ? d : best;
          ar[j] = static_cast<Idx>(td ? 3 : off);
        }
      }
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * H * W;
    T* yp = y + p * Ho * Wo;
    Idx* ap = argmax + p * Ho * Wo;
    for (int64_t i = 0; i < Ho; ++i) {
      const int64_t h0 = i * st - pad;
      const int64_t kh0 = std::max<int64_t>(0, -h0), kh1 = std::min<int64_t>(k, H - h0);
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t w0 = j * st - pad;
        const int64_t kw0 = std::max<int64_t>(0, -w0), kw1 = std::min<int64_t>(k, W - w0);
        // Start at the first real element (padding never wins, even against -inf).
        int64_t best_off = kh0 * k + kw0;
        T best = xp[(h0 + kh0) * W + w0 + kw0];
        for (int64_t a = kh0; a < kh1; ++a) {
          const T* row = xp + (h0 + a) * W + w0;
          for (int64_t b = kw0; b < kw1; ++b) {
            const T v = row[b];
            if (takes_over(v, best)) {
              best = v;
              best_off = a * k + b;
            }
          }
        }
        yp[i * Wo + j] = best;
        ap[i * Wo + j] = static_cast<Idx>(best_off);
      }
    }
  }
}

template <typename T, typename Idx>
void maxpool2d_backward(const T* dy, const Idx* argmax, const PoolGeom& g, T* dx) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel, st = g.stride, pad = g.padding;
  if (is_k2s2(g)) {  // windows tile the image: every dx element is written once
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      for (int64_t i = 0; i < (H + 1) / 2; ++i) {
        T* x0 = dx + (p * H + 2 * i) * W;
        T* x1 = x0 + W;
        if (i >= Ho) {  // odd H: the last row is in no window
          std::fill(x0, x0 + W, T(0));
          continue;
        }
        const T* gr = dy + (p * Ho + i) * Wo;
        const Idx* ar = argmax + (p * Ho + i) * Wo;
#pragma omp simd
        for (int64_t j = 0; j < Wo; ++j) {
          const T v = gr[j];
          const int a = ar[j];
          x0[2 * j] = a == 0 ? v : T(0);
          x0[2 * j + 1] = a == 1 ? v : T(0);
          x1[2 * j] = a == 2 ? v : T(0);
          x1[2 * j + 1] = a == 3 ? v : T(0);
        }
        for (int64_t c = 2 * Wo; c < W; ++c) x0[c] = x1[c] = T(0);
      }
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* xp = dx + p * H * W;
    const T* gp = dy + p * Ho * Wo;
    const Idx* ap = argmax + p * Ho * Wo;
    std::fill(xp, xp + H * W, T(0));
    for (int64_t i = 0; i < Ho; ++i) {
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t off = ap[i * Wo + j];
        const int64_t hh = i * st - pad + off / k, ww = j * st - pad + off % k;
        xp[hh * W + ww] += gp[i * Wo + j];
      }
    }
  }
}

template <typename T>
void avgpool2d_forward(const T* x, const PoolGeom& g, T* y) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel, st = g.stride, pad = g.padding;
  const T divisor = static_cast<T>(k * k);
  if (is_k2s2(g)) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      for (int64_t i = 0; i < Ho; ++i) {
        const T* r0 = x + (p * H + 2 * i) * W;
        const T* r1 = r0 + W;
        T* yr = y + (p * Ho + i) * Wo;
#pragma omp simd
        for (int64_t j = 0; j < Wo; ++j)
          yr[j] = (r0[2 * j] + r0[2 * j + 1] + r1[2 * j] + r1[2 * j + 1]) * T(0.25);
      }
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * H * W;
    T* yp = y + p * Ho * Wo;
    for (int64_t i = 0; i < Ho; ++i) {
      const int64_t h0 = i * st - pad;
      const int64_t a0 = std::max<int64_t>(0, h0), a1 = std::min<int64_t>(H, h0 + k);
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t w0 = j * st - pad;
        const int64_t b0 = std::max<int64_t>(0, w0), b1 = std::min<int64_t>(W, w0 + k);
        T sum = 0;
        for (int64_t a = a0; a < a1; ++a)
          for (int64_t b = b0; b < b1; ++b) sum += xp[a * W + b];
        yp[i * Wo + j] = sum / divisor;
      }
    }
  }
}

template <typename T>
void avgpool2d_backward(const T* dy, const PoolGeom& g, T* dx) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel, st = g.stride, pad = g.padding;
  const T divisor = static_cast<T>(k * k);
  if (is_k2s2(g)) {  // windows tile the image: every dx element is written once
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      for (int64_t i = 0; i < (H + 1) / 2; ++i) {
        T* x0 = dx + (p * H + 2 * i) * W;
        if (i >= Ho) {  // odd H: the last row is in no window
          std::fill(x0, x0 + W, T(0));
          continue;
        }
        T* x1 = x0 + W;
        const T* gr = dy + (p * Ho + i) * Wo;
#pragma omp simd
        for (int64_t j = 0; j < Wo; ++j) {
          const T v = gr[j] * T(0.25);
          x0[2 * j] = v;
          x0[2 * j + 1] = v;
          x1[2 * j] = v;
          x1[2 * j + 1] = v;
        }
        for (int64_t c = 2 * Wo; c < W; ++c) x0[c] = x1[c] = T(0);
      }
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    T* xp = dx + p * H * W;
    const T* gp = dy + p * Ho * Wo;
    std::fill(xp, xp + H * W, T(0));
    for (int64_t i = 0; i < Ho; ++i) {
      const int64_t h0 = i * st - pad;
      const int64_t a0 = std::max<int64_t>(0, h0), a1 = std::min<int64_t>(H, h0 + k);
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t w0 = j * st - pad;
        const int64_t b0 = std::max<int64_t>(0, w0), b1 = std::min<int64_t>(W, w0 + k);
        const T v = gp[i * Wo + j] / divisor;
        for (int64_t a = a0; a < a1; ++a)
          for (int64_t b = b0; b < b1; ++b) xp[a * W + b] += v;
      }
    }
  }
}

#define SM_POOL_INSTANTIATE(T)                                                              \
  template void maxpool2d_forward<T, uint8_t>(const T*, const PoolGeom&, T*, uint8_t*);    \
  template void maxpool2d_forward<T, int32_t>(const T*, const PoolGeom&, T*, int32_t*);  \
  template void maxpool2d_backward<T, uint8_t>(const T*, const uint8_t*, const PoolGeom&, T*); \
  template void maxpool2d_backward<T, int32_t>(const T*, const int32_t*, const PoolGeom&, T*); \
  template void avgpool2d_forward<T>(const T*, const PoolGeom&, T*);                       \
  template void avgpool2d_backward<T>(const T*, const PoolGeom&, T*);
SM_POOL_INSTANTIATE(float)
SM_POOL_INSTANTIATE(double)
#undef SM_POOL_INSTANTIATE

}  // namespace sm::cpu
