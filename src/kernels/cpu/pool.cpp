// pool.cpp — CPU max/avg pooling kernels (see kernels/cpu/pool.h). OpenMP over planes;
// a fast path for the common kernel 2, stride 2, no padding; general windows otherwise; max
// pooling of a batch norm's output read through its normalisation (the fused epilogue). The
// per-plane kernels open no thread team when called inside one (if !omp_in_parallel()).
#include "spikemesh/kernels/cpu/pool.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "max_pool_winner.h"
#include "maxpool3s2_avx512.h"

namespace sm::cpu {
namespace {

bool is_k2s2(const PoolGeom& g) { return g.kernel == 2 && g.stride == 2 && g.padding == 0; }

// The window of one output element clipped to the image: input rows h0 + [kh0, kh1) and
// columns w0 + [kw0, kw1), where (h0, w0) is its (possibly padded) top-left corner.
struct Window {
  int64_t h0, w0, kh0, kh1, kw0, kw1;
};

// General path: planes split between threads; for each plane p, begin(p) and then
// win(p, o, window) for its output elements o = i·Wo + j in row-major order.
template <class Begin, class PerWindow>
void for_each_window(const PoolGeom& g, Begin begin, PerWindow win) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel, st = g.stride, pad = g.padding;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    begin(p);
    for (int64_t i = 0; i < Ho; ++i) {
      const int64_t h0 = i * st - pad;
      const int64_t kh0 = std::max<int64_t>(0, -h0), kh1 = std::min<int64_t>(k, H - h0);
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t w0 = j * st - pad;
        const int64_t kw0 = std::max<int64_t>(0, -w0), kw1 = std::min<int64_t>(k, W - w0);
        win(p, i * Wo + j, Window{h0, w0, kh0, kh1, kw0, kw1});
      }
    }
  }
}

// Forward fast path (k=2, s=2, no padding): rows(o, r0, r1) computes output row
// o = p·Ho + i from input rows 2i (r0) and 2i+1 (r1) of plane p.
template <typename T, class RowPair>
void k2s2_forward(const PoolGeom& g, const T* x, RowPair rows) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h();
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    for (int64_t i = 0; i < Ho; ++i) {
      const T* r0 = x + (p * H + 2 * i) * W;
      rows(p * Ho + i, r0, r0 + W);
    }
  }
}

// Backward fast path (k=2, s=2: windows tile the image, so every dx element is written
// once): rows(o, x0, x1) fills columns [0, 2·Wo) of dx rows 2i (x0) and 2i+1 (x1) from
// output row o = p·Ho + i; the columns past 2·Wo and the last row of an odd H (in no
// window) are zeroed here.
template <typename T, class RowPair>
void k2s2_backward(const PoolGeom& g, T* dx, RowPair rows) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    for (int64_t i = 0; i < (H + 1) / 2; ++i) {
      T* x0 = dx + (p * H + 2 * i) * W;
      if (i >= Ho) {
        std::fill(x0, x0 + W, T(0));
        continue;
      }
      T* x1 = x0 + W;
      rows(p * Ho + i, x0, x1);
      for (int64_t c = 2 * Wo; c < W; ++c) x0[c] = x1[c] = T(0);
    }
  }
}

}  // namespace


#if defined(__AVX2__)
// Eight neighbouring stride-2 windows of kernel 3 whose columns lie inside the image, f32:
// rows[a] points at window row a's first element of the first window (columns [0, 18) are
// read), or is null where the row is padding (the top or bottom edge). The same row-major
// order, first real element first, and first-maximum / NaN rule as takes_over, in vector form.
inline void maxpool3s2_eight(const float* const rows[3], float* y, uint8_t* argmax) {
  __m256 best = _mm256_setzero_ps(), off = _mm256_setzero_ps();
  bool first = true;
  for (int a = 0; a < 3; ++a) {
    const float* row = rows[a];
    if (!row) continue;
    const __m256 lo = _mm256_loadu_ps(row), hi = _mm256_loadu_ps(row + 8);
    const __m256 lo2 = _mm256_loadu_ps(row + 2), hi2 = _mm256_loadu_ps(row + 10);
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    __m256 col[3];  // window columns 0, 1, 2 of the 8 windows: row[2j], row[2j+1], row[2j+2]
    col[0] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)), order);
    col[1] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)), order);
    col[2] = _mm256_permutevar8x32_ps(_mm256_shuffle_ps(lo2, hi2, _MM_SHUFFLE(2, 0, 2, 0)), order);
    for (int b = 0; b < 3; ++b) {
      const __m256 v = col[b];
      if (first) {
        best = v;
        off = _mm256_set1_ps(static_cast<float>(a * 3));
        first = false;
        continue;
      }
      const __m256 t = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ),
                                    _mm256_and_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), _mm256_cmp_ps(best, best, _CMP_ORD_Q)));
      best = _mm256_blendv_ps(best, v, t);
      off = _mm256_blendv_ps(off, _mm256_set1_ps(static_cast<float>(a * 3 + b)), t);
    }
  }
  _mm256_storeu_ps(y, best);
  alignas(32) int32_t o[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(o), _mm256_cvttps_epi32(off));
  for (int i = 0; i < 8; ++i) argmax[i] = static_cast<uint8_t>(o[i]);
}
#endif

// Kernel 3, any stride and padding: a window inside the image is 9 fixed offsets, taken in
// row-major order with the same first-maximum / NaN rule as the general path; windows that
// touch the padding are clipped as there. f32 stride 2 (Spikformer's stem) takes eight
// interior windows at a time in AVX2 registers.
template <typename T, typename Idx>
void maxpool3_forward(const PoolGeom& g, const T* x, T* y, Idx* argmax) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int64_t st = g.stride, pad = g.padding;
  const int64_t offs[9] = {0, 1, 2, W, W + 1, W + 2, 2 * W, 2 * W + 1, 2 * W + 2};
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    const T* xp = x + p * H * W;
    for (int64_t i = 0; i < Ho; ++i) {
      const int64_t h0 = i * st - pad;
      const int64_t kh0 = std::max<int64_t>(0, -h0), kh1 = std::min<int64_t>(3, H - h0);
      T* yr = y + (p * Ho + i) * Wo;
      Idx* ar = argmax + (p * Ho + i) * Wo;
#if defined(__AVX2__)
      // Eight windows at a time where their 18 columns lie inside the row (the rows of the
      // window that are padding left out); the last group of a row may overlap the one
      // before it (the same windows again, the same results): only the windows at the left
      // and right padding are left to the scalar loop below.
      int64_t j_vec = 0, j_end = 0;  // windows [j_vec, j_end) done in vector form
      if constexpr (std::is_same_v<T, float> && std::is_same_v<Idx, uint8_t>) {
        const int64_t j_first = (pad + st - 1) / st;          // first window with w0 ≥ 0
        const int64_t j_last = W + pad >= 18 ? (W - 18 + pad) / st : -1;  // last group start: w0 + 18 ≤ W
        if (st == 2 && j_last >= j_first) {
          const float* rows[3];
          for (int a = 0; a < 3; ++a) rows[a] = a >= kh0 && a < kh1 ? xp + (h0 + a) * W : nullptr;
          j_vec = j_first;
          j_end = std::min(Wo, j_last + 8);
          for (int64_t j = j_first;; j += 8) {
            const int64_t js = std::min(j, j_last);
            const float* at[3];
            for (int a = 0; a < 3; ++a) at[a] = rows[a] ? rows[a] + js * st - pad : nullptr;
            maxpool3s2_eight(at, yr + js, ar + js);
            if (js == j_last) break;
          }
        }
      }
#else
      const int64_t j_vec = 0, j_end = 0;
#endif
      for (int64_t j = 0; j < Wo; ++j) {
        if (j == j_vec && j_end > j_vec) {
          j = j_end - 1;
          continue;
        }
        const int64_t w0 = j * st - pad;
        const int64_t kw0 = std::max<int64_t>(0, -w0), kw1 = std::min<int64_t>(3, W - w0);
        if (kh0 == 0 && kh1 == 3 && kw0 == 0 && kw1 == 3) {
          const T* r = xp + h0 * W + w0;
          T best = r[0];
          int off = 0;
          for (int q = 1; q < 9; ++q) {
            const T v = r[offs[q]];
            const bool t = takes_over(v, best);
            best = t ? v : best;
            off = t ? q : off;
          }
          yr[j] = best;
          ar[j] = static_cast<Idx>(off);
          continue;
        }
        int64_t best_off = kh0 * 3 + kw0;  // the first real element (padding never wins)
        T best = xp[(h0 + kh0) * W + w0 + kw0];
        for (int64_t a = kh0; a < kh1; ++a)
          for (int64_t b = kw0; b < kw1; ++b) {
            const T v = xp[(h0 + a) * W + w0 + b];
            const bool t = takes_over(v, best);
            best = t ? v : best;
            best_off = t ? a * 3 + b : best_off;
          }
        yr[j] = best;
        ar[j] = static_cast<Idx>(best_off);
      }
    }
  }
}

template <typename T, typename Idx>
void maxpool2d_forward(const T* x, const PoolGeom& g, T* y, Idx* argmax) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel;
  if (is_k2s2(g)) {
    k2s2_forward(g, x, [&](int64_t o, const T* r0, const T* r1) {
      T* yr = y + o * Wo;
      Idx* ar = argmax + o * Wo;
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
    });
    return;
  }
  if (k == 3) {  // Spikformer's MaxPool2d(3, 2, 1): separable in AVX-512, else unrolled interior windows
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Idx, uint8_t>)
      if (maxpool3s2_forward_avx512(x, g, 1, nullptr, nullptr, nullptr, y, argmax)) return;
    maxpool3_forward(g, x, y, argmax);
    return;
  }
  for_each_window(g, [](int64_t) {}, [&](int64_t p, int64_t o, const Window& w) {
    const T* xp = x + p * H * W;
    // Start at the first real element (padding never wins, even against -inf).
    int64_t best_off = w.kh0 * k + w.kw0;
    T best = xp[(w.h0 + w.kh0) * W + w.w0 + w.kw0];
    for (int64_t a = w.kh0; a < w.kh1; ++a) {
      const T* row = xp + (w.h0 + a) * W + w.w0;
      for (int64_t b = w.kw0; b < w.kw1; ++b) {  // branch-free: float inputs make the
        const T v = row[b];                         // winner unpredictable
        const bool t = takes_over(v, best);
        best = t ? v : best;
        best_off = t ? a * k + b : best_off;
      }
    }
    y[p * Ho * Wo + o] = best;
    argmax[p * Ho * Wo + o] = static_cast<Idx>(best_off);
  });
}

template <typename T, typename Idx>
void maxpool2d_backward(const T* dy, const Idx* argmax, const PoolGeom& g, T* dx) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel;
  if (is_k2s2(g)) {
    k2s2_backward(g, dx, [&](int64_t o, T* x0, T* x1) {
      const T* gr = dy + o * Wo;
      const Idx* ar = argmax + o * Wo;
#pragma omp simd
      for (int64_t j = 0; j < Wo; ++j) {
        const T v = gr[j];
        const int a = ar[j];
        x0[2 * j] = a == 0 ? v : T(0);
        x0[2 * j + 1] = a == 1 ? v : T(0);
        x1[2 * j] = a == 2 ? v : T(0);
        x1[2 * j + 1] = a == 3 ? v : T(0);
      }
    });
    return;
  }
  // Overlapping windows: per plane, zero it and add each output's gradient at its winner, in
  // output order (a winner is always inside the image: its offset from the window's unclipped
  // corner is looked up, no clipping per window).
  std::vector<int64_t> step_of(static_cast<size_t>(k) * k);
  for (size_t off = 0; off < step_of.size(); ++off) step_of[off] = static_cast<int64_t>(off) / k * W + off % k;
  const int64_t st = g.stride, pad = g.padding;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    T* xp = dx + p * H * W;
    std::fill(xp, xp + H * W, T(0));
    const T* gp = dy + p * Ho * Wo;
    const Idx* ap = argmax + p * Ho * Wo;
    for (int64_t i = 0; i < Ho; ++i) {
      const int64_t corner = (i * st - pad) * W - pad;  // of window (i, 0), possibly in the padding
      for (int64_t j = 0; j < Wo; ++j) xp[corner + j * st + step_of[ap[i * Wo + j]]] += gp[i * Wo + j];
    }
  }
}

template <typename T, typename Idx>
void maxpool2d_forward_normalized(const T* x, const PoolGeom& g, int64_t channels, const double* center,
                                  const double* scale, const double* offset, T* y, Idx* argmax) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Idx, uint8_t>)
    if (maxpool3s2_forward_avx512(x, g, channels, center, scale, offset, y, argmax)) return;
  const int64_t plane = g.h * g.w, out = g.out_h() * g.out_w();
  PoolGeom one = g;
  one.planes = 1;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    thread_local std::vector<T> normalized;  // [H, W], this thread's plane
    normalized.resize(static_cast<size_t>(plane));
    const int64_t c = p % channels;
    const T m = static_cast<T>(center[c]), a = static_cast<T>(scale[c]), o = static_cast<T>(offset[c]);
    const T* xp = x + p * plane;
#pragma omp simd
    for (int64_t i = 0; i < plane; ++i) normalized[i] = std::fma(xp[i] - m, a, o);  // as bn_normalize
    maxpool2d_forward<T, Idx>(normalized.data(), one, y + p * out, argmax + p * out);  // inside: no new team
  }
}

template <typename T, typename Idx>
void maxpool2d_bn_grad_sums(const T* dy, const Idx* argmax, const T* x, const PoolGeom& g, int64_t channels,
                            const double* center, double* sum_dy, double* sum_dy_xc) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int k = g.kernel;
  // A window offset's distance in x from its window's top-left corner (u8 offsets: a table).
  std::vector<int64_t> step_of(std::is_same_v<Idx, uint8_t> ? static_cast<size_t>(k) * k : 0);
  for (size_t off = 0; off < step_of.size(); ++off) step_of[off] = static_cast<int64_t>(off) / k * W + off % k;
  std::vector<double> plane_dy(static_cast<size_t>(g.planes)), plane_dy_xc(static_cast<size_t>(g.planes));
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; ++p) {
    const double m = center[p % channels];
    const T* xp = x + p * H * W;
    const T* gp = dy + p * Ho * Wo;
    const Idx* ap = argmax + p * Ho * Wo;
    double s = 0.0, sx = 0.0;
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t off = ap[i * Wo + j];
        const double d = gp[i * Wo + j];
        const int64_t corner = (i * g.stride - g.padding) * W + j * g.stride - g.padding;
        const int64_t at = corner + (step_of.empty() ? off / k * W + off % k : step_of[off]);
        s += d;
        sx += d * (static_cast<double>(xp[at]) - m);
      }
    plane_dy[p] = s;
    plane_dy_xc[p] = sx;
  }
  std::fill(sum_dy, sum_dy + channels, 0.0);
  std::fill(sum_dy_xc, sum_dy_xc + channels, 0.0);
  for (int64_t p = 0; p < g.planes; ++p) {
    sum_dy[p % channels] += plane_dy[p];
    sum_dy_xc[p % channels] += plane_dy_xc[p];
  }
}

template <typename T>
void avgpool2d_forward(const T* x, const PoolGeom& g, T* y) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const T divisor = static_cast<T>(g.kernel * g.kernel);
  if (is_k2s2(g)) {
    k2s2_forward(g, x, [&](int64_t o, const T* r0, const T* r1) {
      T* yr = y + o * Wo;
#pragma omp simd
      for (int64_t j = 0; j < Wo; ++j)
        yr[j] = (r0[2 * j] + r0[2 * j + 1] + r1[2 * j] + r1[2 * j + 1]) * T(0.25);
    });
    return;
  }
  for_each_window(g, [](int64_t) {}, [&](int64_t p, int64_t o, const Window& w) {
    const T* xp = x + p * H * W;
    T sum = 0;
    for (int64_t a = w.h0 + w.kh0; a < w.h0 + w.kh1; ++a)
      for (int64_t b = w.w0 + w.kw0; b < w.w0 + w.kw1; ++b) sum += xp[a * W + b];
    y[p * Ho * Wo + o] = sum / divisor;
  });
}

template <typename T>
void avgpool2d_backward(const T* dy, const PoolGeom& g, T* dx) {
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const T divisor = static_cast<T>(g.kernel * g.kernel);
  if (is_k2s2(g)) {
    k2s2_backward(g, dx, [&](int64_t o, T* x0, T* x1) {
      const T* gr = dy + o * Wo;
#pragma omp simd
      for (int64_t j = 0; j < Wo; ++j) {
        const T v = gr[j] * T(0.25);
        x0[2 * j] = v;
        x0[2 * j + 1] = v;
        x1[2 * j] = v;
        x1[2 * j + 1] = v;
      }
    });
    return;
  }
  auto zero_plane = [&](int64_t p) { std::fill(dx + p * H * W, dx + (p + 1) * H * W, T(0)); };
  for_each_window(g, zero_plane, [&](int64_t p, int64_t o, const Window& w) {
    T* xp = dx + p * H * W;
    const T v = dy[p * Ho * Wo + o] / divisor;
    for (int64_t a = w.h0 + w.kh0; a < w.h0 + w.kh1; ++a)
      for (int64_t b = w.w0 + w.kw0; b < w.w0 + w.kw1; ++b) xp[a * W + b] += v;
  });
}

#define SM_POOL_INSTANTIATE(T)                                                              \
  template void maxpool2d_forward<T, uint8_t>(const T*, const PoolGeom&, T*, uint8_t*);    \
  template void maxpool2d_forward<T, int32_t>(const T*, const PoolGeom&, T*, int32_t*);  \
  template void maxpool2d_backward<T, uint8_t>(const T*, const uint8_t*, const PoolGeom&, T*); \
  template void maxpool2d_backward<T, int32_t>(const T*, const int32_t*, const PoolGeom&, T*); \
  template void maxpool2d_forward_normalized<T, uint8_t>(const T*, const PoolGeom&, int64_t, const double*,     \
                                                        const double*, const double*, T*, uint8_t*);         \
  template void maxpool2d_forward_normalized<T, int32_t>(const T*, const PoolGeom&, int64_t, const double*,     \
                                                        const double*, const double*, T*, int32_t*);         \
  template void maxpool2d_bn_grad_sums<T, uint8_t>(const T*, const uint8_t*, const T*, const PoolGeom&, int64_t, \
                                                   const double*, double*, double*);                        \
  template void maxpool2d_bn_grad_sums<T, int32_t>(const T*, const int32_t*, const T*, const PoolGeom&, int64_t, \
                                                   const double*, double*, double*);                        \
  template void avgpool2d_forward<T>(const T*, const PoolGeom&, T*);                       \
  template void avgpool2d_backward<T>(const T*, const PoolGeom&, T*);
SM_POOL_INSTANTIATE(float)
SM_POOL_INSTANTIATE(double)
#undef SM_POOL_INSTANTIATE

}  // namespace sm::cpu
