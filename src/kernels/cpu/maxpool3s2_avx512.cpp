// maxpool3s2_avx512.cpp — max pooling of kernel 3, stride 2, padding 1 (Spikformer's stem) in
// AVX-512 registers, f32 with u8 window offsets, optionally reading a batch norm's output
// through its normalisation (maxpool3s2_avx512.h).
//
// Separable: per plane, every input row is normalised into an L1 row and reduced over each
// window's three columns (its winner and column), then each output row reduces its three
// input rows' results the same way. Invariant: the winner is the one of the row-major scan of
// pool.cpp — the first NaN if any, else the first maximum; padding never wins — because the
// first NaN / first maximum of the 3×3 window is the first NaN / first maximum among the rows'
// own, taken in row order. Values and offsets are bitwise those of maxpool2d_forward(_normalized).
#include "maxpool3s2_avx512.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "max_pool_winner.h"
#include "spikemesh/kernels/cpu/isa.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SM_HAVE_AVX512_POOL 1
#include <immintrin.h>
#else
#define SM_HAVE_AVX512_POOL 0
#endif

namespace sm::cpu {

#if SM_HAVE_AVX512_POOL
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw")
namespace {

constexpr int64_t kLanes = 16;

// takes_over (max_pool_winner.h) per lane.
inline __mmask16 takes_over16(__m512 v, __m512 best) {
  const __mmask16 nan_over_number = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q);
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | nan_over_number;
}

// One input row as the pooling reads it: fma(x − m, a, o) (bn_normalize's arithmetic), or x
// itself when not normalised.
struct RowInput {
  bool normalise = false;
  float m = 0, a = 1, o = 0;
  void read(const float* x, int64_t W, float* out) const {
    if (!normalise) {
      std::copy(x, x + W, out);
      return;
    }
    const __m512 vm = _mm512_set1_ps(m), va = _mm512_set1_ps(a), vo = _mm512_set1_ps(o);
    int64_t i = 0;
    for (; i + kLanes <= W; i += kLanes)
      _mm512_storeu_ps(out + i, _mm512_fmadd_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), va, vo));
    for (; i < W; ++i) out[i] = std::fma(x[i] - m, a, o);
  }
};

// Window j of a row: columns 2j − 1 + b for b in [0, 3) inside [0, W), the first one first.
inline void row_window_scalar(const float* row, int64_t W, int64_t j, float* best_out, int32_t* col_out) {
  const int64_t c0 = 2 * j - 1;
  const int64_t b0 = std::max<int64_t>(0, -c0), b1 = std::min<int64_t>(3, W - c0);
  float best = row[c0 + b0];
  int32_t col = static_cast<int32_t>(b0);
  for (int64_t b = b0 + 1; b < b1; ++b) {
    const float v = row[c0 + b];
    if (takes_over(v, best)) best = v, col = static_cast<int32_t>(b);
  }
  *best_out = best;
  *col_out = col;
}

// Every window of a row (readable to W + 34; best and col hold Wo + 16): its winner and column.
// Groups of 16 windows from window 1 while their first lies inside the row (columns 2j − 1 …
// 2j + 1 < W); lanes past that are recomputed by the scalar pass after them (window 0 too).
void row_windows(const float* row, int64_t W, int64_t Wo, float* best, int32_t* col) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
  const int64_t inside = (W - 2) / 2;  // the last window whose three columns lie inside
  for (int64_t j = 1; j <= inside; j += kLanes) {
    const float* p = row + 2 * j - 1;  // column 2j − 1; reads p[0, 34)
    const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + kLanes);
    const __m512 lo2 = _mm512_loadu_ps(p + 2), hi2 = _mm512_loadu_ps(p + 2 + kLanes);
    __m512 b = _mm512_permutex2var_ps(lo, even, hi);
    __m512i c = _mm512_setzero_si512();
    const __m512 v1 = _mm512_permutex2var_ps(lo, odd, hi);
    const __mmask16 t1 = takes_over16(v1, b);
    b = _mm512_mask_mov_ps(b, t1, v1);
    c = _mm512_mask_mov_epi32(c, t1, one);
    const __m512 v2 = _mm512_permutex2var_ps(lo2, even, hi2);
    const __mmask16 t2 = takes_over16(v2, b);
    b = _mm512_mask_mov_ps(b, t2, v2);
    c = _mm512_mask_mov_epi32(c, t2, two);
    _mm512_storeu_ps(best + j, b);
    _mm512_storeu_si512(col + j, c);
  }
  row_window_scalar(row, W, 0, best, col);
  for (int64_t j = std::max<int64_t>(1, inside + 1); j < Wo; ++j) row_window_scalar(row, W, j, best + j, col + j);
}

// Output row i from the row results of input rows 2i − 1 + a (those inside [0, H)): the first
// NaN / first maximum in row order; offset a·3 + column.
void output_row(const float* best_rows, const int32_t* col_rows, int64_t ld, int64_t H, int64_t Wo, int64_t i,
                float* y, uint8_t* argmax) {
  const int64_t r0 = 2 * i - 1;
  for (int64_t j = 0; j < Wo; j += kLanes) {
    const __mmask16 live = static_cast<__mmask16>(Wo - j >= kLanes ? 0xFFFF : (1u << (Wo - j)) - 1);
    __m512 best = _mm512_setzero_ps();
    __m512i off = _mm512_setzero_si512();
    bool first = true;
    for (int a = 0; a < 3; ++a) {
      const int64_t r = r0 + a;
      if (r < 0 || r >= H) continue;
      const __m512 v = _mm512_loadu_ps(best_rows + r * ld + j);
      const __m512i o = _mm512_add_epi32(_mm512_loadu_si512(col_rows + r * ld + j), _mm512_set1_epi32(3 * a));
      if (first) {
        best = v, off = o, first = false;
        continue;
      }
      const __mmask16 t = takes_over16(v, best);
      best = _mm512_mask_mov_ps(best, t, v);
      off = _mm512_mask_mov_epi32(off, t, o);
    }
    _mm512_mask_storeu_ps(y + j, live, best);
    _mm512_mask_cvtepi32_storeu_epi8(argmax + j, live, off);
  }
}

}  // namespace

bool maxpool3s2_forward_avx512(const float* x, const PoolGeom& g, int64_t channels, const double* center,
                               const double* scale, const double* offset, float* y, uint8_t* argmax) {
  if (!avx512_kernels() || g.kernel != 3 || g.stride != 2 || g.padding != 1 || g.w < kLanes) return false;
  const int64_t H = g.h, W = g.w, Ho = g.out_h(), Wo = g.out_w();
  const int64_t ld = (Wo + 2 * kLanes - 1) / kLanes * kLanes;  // row results: Wo + 16 and more, whole vectors
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t p = 0; p < g.planes; ++p) {
    thread_local std::vector<float> row, best;  // the row read [W + 34]; row results [H, ld]
    thread_local std::vector<int32_t> col;
    row.resize(static_cast<size_t>(W + 2 * kLanes + 2));
    best.resize(static_cast<size_t>(H * ld));
    col.resize(best.size());
    RowInput in;
    if (scale) {
      const int64_t c = p % channels;
      in = RowInput{true, static_cast<float>(center[c]), static_cast<float>(scale[c]), static_cast<float>(offset[c])};
    }
    const float* xp = x + p * H * W;
    int64_t next = 0;  // the next input row to reduce
    for (int64_t i = 0; i < Ho; ++i) {
      for (; next <= std::min(2 * i + 1, H - 1); ++next) {
        in.read(xp + next * W, W, row.data());
        row_windows(row.data(), W, Wo, best.data() + next * ld, col.data() + next * ld);
      }
      output_row(best.data(), col.data(), ld, H, Wo, i, y + (p * Ho + i) * Wo, argmax + (p * Ho + i) * Wo);
    }
  }
  return true;
}
#pragma GCC pop_options

#else

bool maxpool3s2_forward_avx512(const float*, const PoolGeom&, int64_t, const double*, const double*, const double*,
                               float*, uint8_t*) {
  return false;
}

#endif

}  // namespace sm::cpu
