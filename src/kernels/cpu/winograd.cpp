// winograd.cpp — own Winograd F(2×2, 3×3) and F(4×4, 3×3) convolutions (winograd.h): weight
// transform, then per block of tiles the input transform, one GEMM over channels per
// transformed position (16 or 36) and the output transform. The tiling, the blocks and the
// GEMMs are shared; each variant has its own transforms.
#include "spikemesh/kernels/cpu/winograd.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/cpu/gemm.h"

namespace sm::cpu {
namespace {

constexpr int64_t kMaxBlock = 256;  // tiles per block, at most

// The 3×3 filter of the convolution being computed, output channel o, input channel i.
// transposed: the backward-data filter — w [ins, outs, 3, 3] rotated by 180°, axes swapped.
struct Filter {
  const float* w;
  int64_t outs, ins;  // channels of the convolution computed
  bool transposed;
  double tap(int64_t o, int64_t i, int a, int b) const {
    return transposed ? w[(i * outs + o) * 9 + (2 - a) * 3 + (2 - b)] : w[(o * ins + i) * 9 + a * 3 + b];
  }
};

// The transformed filters, one matrix [outs, ins] per position, each packed for the GEMM
// (gemm.h: packed once per call, used by every block of tiles).
struct Transformed {
  int64_t plane;
  std::vector<float> data;
  Transformed(int positions, int64_t outs, int64_t ins)
      : plane(packed_a_size(outs, ins)), data(static_cast<size_t>(positions * plane)) {}
  const float* position(int p) const { return data.data() + p * plane; }
};

// U [n², outs, ins]: U[r·n+s][o][i] = (G·f·Gᵀ)[r][s] for the n×3 matrix G, computed in double
// and rounded once. Per output channel and run of up to kChunk input channels (inside one
// reduction block of the packed layout, where consecutive input channels lie gemm_pack_rows()
// apart), the taps are gathered and both products run over the run's channels at once.
template <int n>
Transformed transform_filters(const Filter& f, const double (&G)[n][3]) {
  constexpr int64_t kChunk = 64;
  static_assert(kGemmKc % kChunk == 0, "a run of input channels stays inside one reduction block");
  Transformed U(n * n, f.outs, f.ins);
  const int64_t mr = gemm_pack_rows();
#pragma omp parallel for schedule(static) if (f.outs * f.ins > 4096)
  for (int64_t o = 0; o < f.outs; ++o) {
    for (int64_t i0 = 0; i0 < f.ins; i0 += kChunk) {
      const int64_t len = std::min(kChunk, f.ins - i0), at = packed_a_index(f.outs, f.ins, o, i0);
      double taps[3][3][kChunk], t[n][3][kChunk];  // f, G·f
      for (int64_t k = 0; k < len; ++k)
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) taps[a][b][k] = f.tap(o, i0 + k, a, b);
      for (int r = 0; r < n; ++r)
        for (int b = 0; b < 3; ++b)
          for (int64_t k = 0; k < len; ++k)
            t[r][b][k] = G[r][0] * taps[0][b][k] + G[r][1] * taps[1][b][k] + G[r][2] * taps[2][b][k];
      for (int r = 0; r < n; ++r)  // (G·f)·Gᵀ
        for (int c = 0; c < n; ++c) {
          float* u = U.data.data() + (r * n + c) * U.plane + at;
          for (int64_t k = 0; k < len; ++k)
            u[k * mr] = static_cast<float>(t[r][0][k] * G[c][0] + t[r][1][k] * G[c][1] + t[r][2][k] * G[c][2]);
        }
    }
  }
  return U;
}

// F(2×2, 3×3): G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1], Aᵀ = [1 1 1 0; 0 1 −1 −1].
constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
constexpr float kAt2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
Transformed transform_filters_f2(const Filter& f) { return transform_filters(f, kG2); }

// The tiles of a convolution: m×m output tiles (m 2 or 4), row-major per sample, samples in
// order; each reads an (m+2)×(m+2) input patch, and has (m+2)² transformed positions.
struct Tiling {
  int64_t batch, ins, outs, height, width, pad, out_h, out_w, m, tiles_h, tiles_w;
  int64_t count() const { return batch * tiles_h * tiles_w; }
  int positions() const { return static_cast<int>((m + 2) * (m + 2)); }
};

// Tiles per block: V [positions, ins, block] and M [positions, outs, block] together at most about 4 MB,
// and small enough that every thread gets about four blocks; a multiple of the GEMM's
// 16-column micro-tile, 32–256. The rounding does not depend on it: each output sums the
// same products in the same order whatever block its tile is in (the GEMM reduces every C
// element over the channels in one fixed order, gemm.h), so neither does it depend on the
// thread count.
int64_t block_tiles(const Tiling& t) {
  const int64_t fit = (int64_t{1} << 20) / (t.positions() * (t.ins + t.outs));
  const int64_t share = (t.count() + 4 * omp_get_max_threads() - 1) / (4 * omp_get_max_threads());
  return std::clamp<int64_t>(std::min(fit / 16 * 16, (share + 15) / 16 * 16), 32, kMaxBlock);
}

// A run of consecutive tiles in one row of tiles: tiles j0 … j0+len−1 of the block are the
// tile columns tw0 … tw0+len−1 of tile row th of sample n. The transforms work on whole runs
// so that their loops run over contiguous tiles (vectorised), not tile by tile.
struct Run {
  int64_t j0, len, n, th, tw0;
};

// The runs of the block of `count` tiles starting at tile `first` (at most kMaxBlock tiles).
int64_t runs_of(const Tiling& t, int64_t first, int64_t count, Run* runs) {
  const int64_t per_sample = t.tiles_h * t.tiles_w;
  int64_t n_runs = 0;
  for (int64_t j = 0; j < count;) {
    const int64_t p = first + j, in_sample = p % per_sample, tw = in_sample % t.tiles_w;
    const int64_t len = std::min(count - j, t.tiles_w - tw);
    runs[n_runs++] = Run{j, len, p / per_sample, in_sample / t.tiles_w, tw};
    j += len;
  }
  return n_runs;
}

// The columns [col0, col0 + cols) of row `row` of a plane (height × width): in place where
// they lie inside it, else copied into `scratch` with zeros outside the plane (lo, hi: the
// part inside, relative to col0).
const float* input_row(const Tiling& t, const float* plane, int64_t row, int64_t col0, int64_t cols, int64_t lo,
                       int64_t hi, float* scratch) {
  if (row >= 0 && row < t.height && lo == 0 && hi == cols) return plane + row * t.width + col0;
  if (row < 0 || row >= t.height) {
    std::fill(scratch, scratch + cols, 0.0f);
    return scratch;
  }
  std::fill(scratch, scratch + lo, 0.0f);
  std::copy(plane + row * t.width + col0 + lo, plane + row * t.width + col0 + hi, scratch + lo);
  std::fill(scratch + hi, scratch + cols, 0.0f);
  return scratch;
}

// V[p][i][j] = (Bᵀ·d·B)[p] of input channel i's 4×4 patch of tile j (zero outside the plane),
// Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1]; position p's plane starts at V + p·step, rows ld.
// Per run and channel: the row combinations Bᵀ·d over the run's input columns, then the column
// combinations of each tile from the even and odd columns.
void transform_inputs_f2(const Tiling& t, const float* x, const Run* runs, int64_t n_runs, int64_t ld,
                         int64_t step, float* V) {
  constexpr int64_t kCols = 2 * kMaxBlock + 2;
  float rows[4][kCols], s[4][kCols], even[kMaxBlock + 1], odd[kMaxBlock + 1];
  for (int64_t r = 0; r < n_runs; ++r) {
    const Run& run = runs[r];
    const int64_t cols = 2 * run.len + 2, col0 = 2 * run.tw0 - t.pad, row0 = 2 * run.th - t.pad;
    const int64_t lo = std::clamp<int64_t>(-col0, 0, cols), hi = std::clamp<int64_t>(t.width - col0, lo, cols);
    for (int64_t i = 0; i < t.ins; ++i) {
      const float* plane = x + (run.n * t.ins + i) * t.height * t.width;
      const float *r0 = input_row(t, plane, row0, col0, cols, lo, hi, rows[0]),
                  *r1 = input_row(t, plane, row0 + 1, col0, cols, lo, hi, rows[1]),
                  *r2 = input_row(t, plane, row0 + 2, col0, cols, lo, hi, rows[2]),
                  *r3 = input_row(t, plane, row0 + 3, col0, cols, lo, hi, rows[3]);
      for (int64_t c = 0; c < cols; ++c) {  // Bᵀ·d
        s[0][c] = r0[c] - r2[c];
        s[1][c] = r1[c] + r2[c];
        s[2][c] = r2[c] - r1[c];
        s[3][c] = r1[c] - r3[c];
      }
      for (int a = 0; a < 4; ++a) {  // (Bᵀ·d)·B: tile k reads columns 2k … 2k+3
        for (int64_t k = 0; k <= run.len; ++k) {
          even[k] = s[a][2 * k];
          odd[k] = s[a][2 * k + 1];
        }
        float* v0 = V + (a * 4) * step + i * ld + run.j0;
        float* v1 = v0 + step;
        float* v2 = v1 + step;
        float* v3 = v2 + step;
        for (int64_t k = 0; k < run.len; ++k) {
          v0[k] = even[k] - even[k + 1];
          v1[k] = odd[k] + even[k + 1];
          v2[k] = even[k + 1] - odd[k];
          v3[k] = odd[k] - odd[k + 1];
        }
      }
    }
  }
}

// Output channel o of a run's tiles into y: out holds the m output rows of the run (row a at
// out + a·out_ld, m·len columns); rows and columns past the output's edge are dropped.
void store_run(const Tiling& t, const Run& run, int64_t o, const float* out, int64_t out_ld, float* y) {
  const int64_t row0 = t.m * run.th, col0 = t.m * run.tw0, cols = std::min(t.m * run.len, t.out_w - col0);
  float* dst = y + (run.n * t.outs + o) * t.out_h * t.out_w + col0;
  for (int64_t a = 0; a < t.m && row0 + a < t.out_h; ++a)
    std::copy(out + a * out_ld, out + a * out_ld + cols, dst + (row0 + a) * t.out_w);
}

// y's 2×2 tiles of output channel o = Aᵀ·M·A (+ bias), Aᵀ = [1 1 1 0; 0 1 −1 −1]; the parts
// past the output's edge are dropped. Per run and channel, over the run's tiles at once.
void transform_outputs_f2(const Tiling& t, const float* M, const float* bias, const Run* runs, int64_t n_runs,
                          int64_t ld, int64_t step, float* y) {
  float s[2][4][kMaxBlock], out[2][2 * kMaxBlock];
  for (int64_t r = 0; r < n_runs; ++r) {
    const Run& run = runs[r];
    for (int64_t o = 0; o < t.outs; ++o) {
      const float b = bias ? bias[o] : 0.0f;
      const float* m = M + o * ld + run.j0;
      for (int c = 0; c < 4; ++c) {  // Aᵀ·M
        const float *m0 = m + c * step, *m1 = m + (4 + c) * step, *m2 = m + (8 + c) * step, *m3 = m + (12 + c) * step;
        for (int64_t k = 0; k < run.len; ++k) {
          s[0][c][k] = m0[k] + m1[k] + m2[k];
          s[1][c][k] = m1[k] - m2[k] - m3[k];
        }
      }
      for (int a = 0; a < 2; ++a)  // (Aᵀ·M)·A, the two output columns of each tile interleaved
        for (int64_t k = 0; k < run.len; ++k) {
          out[a][2 * k] = s[a][0][k] + s[a][1][k] + s[a][2][k] + b;
          out[a][2 * k + 1] = s[a][1][k] - s[a][2][k] - s[a][3][k] + b;
        }
      store_run(t, run, o, out[0], 2 * kMaxBlock, y);
    }
  }
}

// ---- F(4×4, 3×3) (Lavin & Gray 2016): 6×6 patches, 36 positions ---------------------------
// Bᵀ = [4 0 −5 0 1 0; 0 −4 −4 1 1 0; 0 4 −4 −1 1 0; 0 −2 −1 2 1 0; 0 2 −1 −2 1 0; 0 4 0 −5 0 1],
// G = [¼ 0 0; −⅙ −⅙ −⅙; −⅙ ⅙ −⅙; 1/24 1/12 ⅙; 1/24 −1/12 ⅙; 0 0 1],
// Aᵀ = [1 1 1 1 1 0; 0 1 −1 2 −2 0; 0 1 1 4 4 0; 0 1 −1 8 −8 1]. Their entries reach 8, so the
// f32 error is larger than F(2, 3)'s (about oneDNN's F(4×4, 3×3)'s; tested against the naive
// double reference).

constexpr double kG4[6][3] = {{0.25, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                              {-1.0 / 6, 1.0 / 6, -1.0 / 6}, {1.0 / 24, 1.0 / 12, 1.0 / 6},
                              {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
constexpr float kAt4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
Transformed transform_filters_f4(const Filter& f) { return transform_filters(f, kG4); }

// out[0..5] = Bᵀ·(d0..d5): the row (or column) combinations of the input transform.
inline void b_transpose(float d0, float d1, float d2, float d3, float d4, float d5, float* out, int64_t stride) {
  out[0] = 4.0f * d0 - 5.0f * d2 + d4;
  out[stride] = -4.0f * d1 - 4.0f * d2 + d3 + d4;
  out[2 * stride] = 4.0f * d1 - 4.0f * d2 - d3 + d4;
  out[3 * stride] = -2.0f * d1 - d2 + 2.0f * d3 + d4;
  out[4 * stride] = 2.0f * d1 - d2 - 2.0f * d3 + d4;
  out[5 * stride] = 4.0f * d1 - 5.0f * d3 + d5;
}

// V[p][i][j] = (Bᵀ·d·B)[p] of input channel i's 6×6 patch of tile j (zero outside the plane),
// as transform_inputs_f2: per run and channel the row combinations over the run's columns, then
// each tile's column combinations from columns 4k … 4k+5.
void transform_inputs_f4(const Tiling& t, const float* x, const Run* runs, int64_t n_runs, int64_t ld,
                         int64_t step, float* V) {
  constexpr int64_t kCols = 4 * kMaxBlock + 2;
  float rows[6][kCols], s[6][kCols];
  for (int64_t r = 0; r < n_runs; ++r) {
    const Run& run = runs[r];
    const int64_t cols = 4 * run.len + 2, col0 = 4 * run.tw0 - t.pad, row0 = 4 * run.th - t.pad;
    const int64_t lo = std::clamp<int64_t>(-col0, 0, cols), hi = std::clamp<int64_t>(t.width - col0, lo, cols);
    for (int64_t i = 0; i < t.ins; ++i) {
      const float* plane = x + (run.n * t.ins + i) * t.height * t.width;
      const float* d[6];
      for (int a = 0; a < 6; ++a) d[a] = input_row(t, plane, row0 + a, col0, cols, lo, hi, rows[a]);
      for (int64_t c = 0; c < cols; ++c)  // Bᵀ·d
        b_transpose(d[0][c], d[1][c], d[2][c], d[3][c], d[4][c], d[5][c], &s[0][c], kCols);
      for (int a = 0; a < 6; ++a) {  // (Bᵀ·d)·B: tile k reads columns 4k … 4k+5
        float* v = V + (a * 6) * step + i * ld + run.j0;
        const float* sa = s[a];
        for (int64_t k = 0; k < run.len; ++k) {
          const float* e = sa + 4 * k;
          b_transpose(e[0], e[1], e[2], e[3], e[4], e[5], v + k, step);
        }
      }
    }
  }
}

// y's 4×4 tiles of output channel o = Aᵀ·M·A (+ bias); the parts past the output's edge are
// dropped. Per run and channel, over the run's tiles at once.
void transform_outputs_f4(const Tiling& t, const float* M, const float* bias, const Run* runs, int64_t n_runs,
                          int64_t ld, int64_t step, float* y) {
  float s[4][6][kMaxBlock], out[4][4 * kMaxBlock];
  for (int64_t r = 0; r < n_runs; ++r) {
    const Run& run = runs[r];
    for (int64_t o = 0; o < t.outs; ++o) {
      const float b = bias ? bias[o] : 0.0f;
      const float* m = M + o * ld + run.j0;
      for (int c = 0; c < 6; ++c) {  // Aᵀ·M
        const float *m0 = m + c * step, *m1 = m + (6 + c) * step, *m2 = m + (12 + c) * step,
                    *m3 = m + (18 + c) * step, *m4 = m + (24 + c) * step, *m5 = m + (30 + c) * step;
        for (int64_t k = 0; k < run.len; ++k) {
          const float p = m1[k] + m2[k], q = m1[k] - m2[k], u = m3[k] + m4[k], w = m3[k] - m4[k];
          s[0][c][k] = m0[k] + p + u;
          s[1][c][k] = q + 2.0f * w;
          s[2][c][k] = p + 4.0f * u;
          s[3][c][k] = q + 8.0f * w + m5[k];
        }
      }
      for (int a = 0; a < 4; ++a)  // (Aᵀ·M)·A, the four output columns of each tile interleaved
        for (int64_t k = 0; k < run.len; ++k) {
          const float p = s[a][1][k] + s[a][2][k], q = s[a][1][k] - s[a][2][k], u = s[a][3][k] + s[a][4][k],
                      w = s[a][3][k] - s[a][4][k];
          out[a][4 * k] = s[a][0][k] + p + u + b;
          out[a][4 * k + 1] = q + 2.0f * w + b;
          out[a][4 * k + 2] = p + 4.0f * u + b;
          out[a][4 * k + 3] = q + 8.0f * w + s[a][5][k] + b;
        }
      store_run(t, run, o, out[0], 4 * kMaxBlock, y);
    }
  }
}

// A per-thread buffer that only grows (steady state: no page faults).
float* thread_buffer(int which, size_t n) {
  thread_local std::vector<float> buffers[2];
  if (buffers[which].size() < n) buffers[which].resize(n);
  return buffers[which].data();
}

// One Winograd variant: its tile edge and its three transforms.
struct Variant {
  int64_t m;
  Transformed (*filters)(const Filter&);
  void (*inputs)(const Tiling&, const float*, const Run*, int64_t, int64_t, int64_t, float*);
  void (*outputs)(const Tiling&, const float*, const float*, const Run*, int64_t, int64_t, int64_t, float*);
};

// The convolution of x [batch, ins, height, width] with the filters f, padding t.pad, into
// y [batch, outs, out_h, out_w]. Collective over nothing; OpenMP over blocks of tiles.
void convolve(const Variant& v, const Tiling& t, const Filter& f, const float* x, const float* bias, float* y) {
  const Transformed U = v.filters(f);  // [positions, outs, ins], packed
  const int positions = t.positions();
  const int64_t tiles = t.count(), per_block = block_tiles(t);
  const int64_t blocks = (tiles + per_block - 1) / per_block;
  // The positions' planes sit one cache line apart in the cache's sets: with power-of-two
  // strides the transforms' streams would all fall into one set (4K aliasing, 3x slower).
  const int64_t v_step = t.ins * per_block + 16, m_step = t.outs * per_block + 16;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t first = blk * per_block, count = std::min(per_block, tiles - first);
    float* V = thread_buffer(0, static_cast<size_t>(positions * v_step));  // [positions, ins, block] (+ a skew)
    float* M = thread_buffer(1, static_cast<size_t>(positions * m_step));  // [positions, outs, block] (+ a skew)
    Run runs[kMaxBlock];
    const int64_t n_runs = runs_of(t, first, count, runs);
    v.inputs(t, x, runs, n_runs, per_block, v_step, V);
    for (int p = 0; p < positions; ++p)  // M[p] [outs, count] = U[p] [outs, ins] · V[p] [ins, count]
      gemm_packed_a(t.outs, count, t.ins, U.position(p), V + p * v_step, per_block, 1, M + p * m_step, per_block,
                    false);
    v.outputs(t, M, bias, runs, n_runs, per_block, m_step, y);
  }
}

Tiling tiling_of(int64_t batch, int64_t ins, int64_t outs, int64_t height, int64_t width, int64_t pad, int64_t m) {
  Tiling t{batch, ins, outs, height, width, pad, height + 2 * pad - 2, width + 2 * pad - 2, m, 0, 0};
  t.tiles_h = (t.out_h + m - 1) / m;
  t.tiles_w = (t.out_w + m - 1) / m;
  return t;
}

const Variant kF2{2, transform_filters_f2, transform_inputs_f2, transform_outputs_f2};
const Variant kF4{4, transform_filters_f4, transform_inputs_f4, transform_outputs_f4};

void forward(const Variant& v, const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  SM_CHECK(winograd_f2_applies(g), "Winograd F(m×m, 3×3) needs a 3x3 stride-1 convolution with padding 0-2");
  convolve(v, tiling_of(g.batch, g.in_channels, g.out_channels, g.height, g.width, g.padding, v.m),
           Filter{w, g.out_channels, g.in_channels, false}, x, bias, y);
}

void backward_data(const Variant& v, const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  SM_CHECK(winograd_f2_applies(g), "Winograd F(m×m, 3×3) needs a 3x3 stride-1 convolution with padding 0-2");
  convolve(v, tiling_of(g.batch, g.out_channels, g.in_channels, g.out_height(), g.out_width(), 2 - g.padding, v.m),
           Filter{w, g.in_channels, g.out_channels, true}, dy, nullptr, dx);
}


// ---- Weight gradient: ∂L/∂U per position = Σ over tiles (A·dy·Aᵀ) ⊙ V, then ∂L/∂w = Gᵀ·∂L/∂U·G ----

// Aᵀ's entry (a, c) of F(m×m, 3×3), a compile-time constant in the loops below.
template <int m>
constexpr float a_transposed(int a, int c) {
  if constexpr (m == 2) return kAt2[a][c];
  else return kAt4[a][c];
}

// Y[p][o][j] = (A·d·Aᵀ)[p] of output channel o's m×m gradient tile j (zero past the output's
// edge); position p's plane starts at Y + p·step, rows ld. The block's tiles are gathered
// element by element (d[a][b][j]), then both combinations run over all of them at once.
template <int m>
void transform_grads(const Tiling& t, const float* dy, const Run* runs, int64_t n_runs, int64_t count, int64_t o,
                     int64_t ld, int64_t step, float* Y) {
  constexpr int n = m + 2;
  float d[m][m][kMaxBlock], c[m][n][kMaxBlock];
  for (int64_t r = 0; r < n_runs; ++r) {
    const Run& run = runs[r];
    const float* plane = dy + (run.n * t.outs + o) * t.out_h * t.out_w;
    for (int a = 0; a < m; ++a) {
      const int64_t row = m * run.th + a;
      for (int64_t k = 0; k < run.len; ++k)
        for (int b = 0; b < m; ++b) {
          const int64_t col = m * (run.tw0 + k) + b;
          d[a][b][run.j0 + k] = row < t.out_h && col < t.out_w ? plane[row * t.out_w + col] : 0.0f;
        }
    }
  }
#pragma GCC unroll 4
  for (int a = 0; a < m; ++a)  // d·Aᵀ
#pragma GCC unroll 6
    for (int cc = 0; cc < n; ++cc)
      for (int64_t j = 0; j < count; ++j) {
        float sum = 0.0f;
#pragma GCC unroll 4
        for (int b = 0; b < m; ++b) sum += a_transposed<m>(b, cc) * d[a][b][j];
        c[a][cc][j] = sum;
      }
#pragma GCC unroll 6
  for (int rr = 0; rr < n; ++rr)  // A·(d·Aᵀ)
#pragma GCC unroll 6
    for (int cc = 0; cc < n; ++cc) {
      float* y = Y + (rr * n + cc) * step + o * ld;
      for (int64_t j = 0; j < count; ++j) {
        float sum = 0.0f;
#pragma GCC unroll 4
        for (int a = 0; a < m; ++a) sum += a_transposed<m>(a, rr) * c[a][cc][j];
        y[j] = sum;
      }
    }
}

// dw [outs, ins, 3, 3] += ∂L/∂w of y = x ⋆ w (tiling t of the forward), by blocks of kGemmKc
// tiles in order: both transforms split over the block's runs, then per position
// dU[p] [outs, ins] (+)= Y[p] [outs, block] · V[p]ᵀ [block, ins], positions split over threads.
// A block of exactly the GEMM's reduction block adds to dU as one product over all tiles would
// (gemm.h), so the sums never depend on the thread count. Collective over nothing.
template <int m>
void weight_gradient(const Tiling& t, const float* x, const float* dy, const double (&G)[m + 2][3], const Variant& v,
                     float* dw) {
  constexpr int n = m + 2, positions = n * n;
  static_assert(kGemmKc <= kMaxBlock, "a block of tiles is one reduction block");
  const int64_t per_block = kGemmKc, tiles = t.count(), plane = t.outs * t.ins;
  const int64_t v_step = t.ins * per_block + 16, y_step = t.outs * per_block + 16;  // skewed (see convolve)
  const std::unique_ptr<float[]> V(new float[positions * v_step]), Y(new float[positions * y_step]),
      dU(new float[positions * plane]);  // every element read is written first
  Run runs[kMaxBlock];
  for (int64_t first = 0; first < tiles; first += per_block) {
    const int64_t count = std::min(per_block, tiles - first), n_runs = runs_of(t, first, count, runs);
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
      for (int64_t r = 0; r < n_runs; ++r) v.inputs(t, x, runs + r, 1, per_block, v_step, V.get());
#pragma omp for schedule(static)
      for (int64_t o = 0; o < t.outs; ++o)
        transform_grads<m>(t, dy, runs, n_runs, count, o, per_block, y_step, Y.get());
#pragma omp for schedule(static)
      for (int p = 0; p < positions; ++p)
        gemm<float>(t.outs, t.ins, count, Y.get() + p * y_step, per_block, 1, V.get() + p * v_step, 1, per_block,
                    dU.get() + p * plane, t.ins, first > 0);
    }
  }
  constexpr int64_t kChunk = 64;
#pragma omp parallel for schedule(static) if (plane > 4096)
  for (int64_t oi0 = 0; oi0 < plane; oi0 += kChunk) {  // Gᵀ·dU·G in double, rounded once, added to dw
    const int64_t len = std::min(kChunk, plane - oi0);
    double t3[n][3][kChunk];  // dU·G
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < 3; ++b) {
        for (int64_t k = 0; k < len; ++k) t3[r][b][k] = 0;
        for (int cc = 0; cc < n; ++cc) {
          const float* u = dU.get() + (r * n + cc) * plane + oi0;
          for (int64_t k = 0; k < len; ++k) t3[r][b][k] += static_cast<double>(u[k]) * G[cc][b];
        }
      }
    for (int64_t k = 0; k < len; ++k)
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
          double sum = 0;
          for (int r = 0; r < n; ++r) sum += G[r][a] * t3[r][b][k];
          float& w = dw[(oi0 + k) * 9 + a * 3 + b];
          w = static_cast<float>(w + sum);
        }
  }
}

template <int m>
void backward_weights(const Conv2dGeometry& g, const float* x, const float* dy, const double (&G)[m + 2][3],
                      const Variant& v, float* dw, float* dbias) {
  SM_CHECK(winograd_f2_applies(g), "Winograd F(m×m, 3×3) needs a 3x3 stride-1 convolution with padding 0-2");
  weight_gradient<m>(tiling_of(g.batch, g.in_channels, g.out_channels, g.height, g.width, g.padding, m), x, dy, G, v, dw);
  if (dbias) channel_bias_grad<float>(g.batch, g.out_channels, g.out_height() * g.out_width(), dy, dbias);
}

}  // namespace

bool winograd_f2_applies(const Conv2dGeometry& g) {
  return g.kernel == 3 && g.stride == 1 && g.padding >= 0 && g.padding <= 2 && g.out_height() >= 1 &&
         g.out_width() >= 1;
}

void conv2d_forward_winograd_f2(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  forward(kF2, g, x, w, bias, y);
}

void conv2d_backward_data_winograd_f2(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  backward_data(kF2, g, dy, w, dx);
}

void conv2d_forward_winograd_f4(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  forward(kF4, g, x, w, bias, y);
}

void conv2d_backward_data_winograd_f4(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  backward_data(kF4, g, dy, w, dx);
}

void conv2d_backward_weights_winograd_f2(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                         float* dbias) {
  backward_weights<2>(g, x, dy, kG2, kF2, dw, dbias);
}

void conv2d_backward_weights_winograd_f4(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                         float* dbias) {
  backward_weights<4>(g, x, dy, kG4, kF4, dw, dbias);
}

}  // namespace sm::cpu
