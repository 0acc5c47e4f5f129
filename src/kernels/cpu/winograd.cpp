// winograd.cpp — own Winograd F(2×2, 3×3) convolution (winograd.h): weight transform, then per
// block of tiles the input transform, 16 GEMMs over channels and the output transform.
#include "spikemesh/kernels/cpu/winograd.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/cpu/gemm.h"

namespace sm::cpu {
namespace {

constexpr int kPositions = 16;     // the 4×4 transformed positions of a tile
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

// U [16, outs, ins]: U[r·4+s][o][i] = (G·f·Gᵀ)[r][s], G = [1 0 0; ½ ½ ½; ½ −½ ½; 0 0 1],
// computed in double and rounded once.
std::vector<float> transform_filters(const Filter& f) {
  std::vector<float> U(static_cast<size_t>(kPositions * f.outs * f.ins));
  const int64_t plane = f.outs * f.ins;
#pragma omp parallel for schedule(static) if (plane > 4096)
  for (int64_t o = 0; o < f.outs; ++o) {
    for (int64_t i = 0; i < f.ins; ++i) {
      double t[4][3];  // G·f
      for (int b = 0; b < 3; ++b) {
        const double f0 = f.tap(o, i, 0, b), f1 = f.tap(o, i, 1, b), f2 = f.tap(o, i, 2, b);
        t[0][b] = f0;
        t[1][b] = 0.5 * (f0 + f1 + f2);
        t[2][b] = 0.5 * (f0 - f1 + f2);
        t[3][b] = f2;
      }
      for (int r = 0; r < 4; ++r) {  // (G·f)·Gᵀ
        const double u[4] = {t[r][0], 0.5 * (t[r][0] + t[r][1] + t[r][2]), 0.5 * (t[r][0] - t[r][1] + t[r][2]), t[r][2]};
        for (int s = 0; s < 4; ++s) U[(r * 4 + s) * plane + o * f.ins + i] = static_cast<float>(u[s]);
      }
    }
  }
  return U;
}

// The tiles of a convolution: 2×2 output tiles, row-major per sample, samples in order.
struct Tiling {
  int64_t batch, ins, outs, height, width, pad, out_h, out_w, tiles_h, tiles_w;
  int64_t count() const { return batch * tiles_h * tiles_w; }
};

// Tiles per block: V [16, ins, block] and M [16, outs, block] together at most about 4 MB,
// and small enough that every thread gets about four blocks; a multiple of the GEMM's
// 16-column micro-tile, 32–256. The rounding does not depend on it: each output sums the
// same products in the same order whatever block its tile is in (the GEMM reduces every C
// element over the channels in one fixed order, gemm.h), so neither does it depend on the
// thread count.
int64_t block_tiles(const Tiling& t) {
  const int64_t fit = (int64_t{1} << 20) / (kPositions * (t.ins + t.outs));
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

// V[p][i][j] = (Bᵀ·d·B)[p] of input channel i's 4×4 patch of tile j (zero outside the plane),
// Bᵀ = [1 0 −1 0; 0 1 1 0; 0 −1 1 0; 0 1 0 −1]; position p's plane starts at V + p·step, rows ld.
// Per run and channel: the row combinations Bᵀ·d over the run's input columns, then the column
// combinations of each tile from the even and odd columns.
void transform_inputs(const Tiling& t, const float* x, const Run* runs, int64_t n_runs, int64_t ld, int64_t step,
                      float* V) {
  constexpr int64_t kCols = 2 * kMaxBlock + 2;
  float rows[4][kCols], s[4][kCols], even[kMaxBlock + 1], odd[kMaxBlock + 1];
  for (int64_t r = 0; r < n_runs; ++r) {
    const Run& run = runs[r];
    const int64_t cols = 2 * run.len + 2, col0 = 2 * run.tw0 - t.pad, row0 = 2 * run.th - t.pad;
    const int64_t lo = std::clamp<int64_t>(-col0, 0, cols), hi = std::clamp<int64_t>(t.width - col0, lo, cols);
    for (int64_t i = 0; i < t.ins; ++i) {
      const float* plane = x + (run.n * t.ins + i) * t.height * t.width;
      const float* row_of[4];  // the run's four input rows: in place, or copied with zeros outside the plane
      for (int a = 0; a < 4; ++a) {
        const int64_t row = row0 + a;
        if (row >= 0 && row < t.height && lo == 0 && hi == cols) {
          row_of[a] = plane + row * t.width + col0;
          continue;
        }
        float* dst = rows[a];
        row_of[a] = dst;
        if (row < 0 || row >= t.height) {
          std::fill(dst, dst + cols, 0.0f);
          continue;
        }
        std::fill(dst, dst + lo, 0.0f);
        std::copy(plane + row * t.width + col0 + lo, plane + row * t.width + col0 + hi, dst + lo);
        std::fill(dst + hi, dst + cols, 0.0f);
      }
      const float *r0 = row_of[0], *r1 = row_of[1], *r2 = row_of[2], *r3 = row_of[3];
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

// y's 2×2 tiles of output channel o = Aᵀ·M·A (+ bias), Aᵀ = [1 1 1 0; 0 1 −1 −1]; the parts
// past the output's edge are dropped. Per run and channel, over the run's tiles at once.
void transform_outputs(const Tiling& t, const float* M, const float* bias, const Run* runs, int64_t n_runs,
                       int64_t ld, int64_t step, float* y) {
  float s[2][4][kMaxBlock], out[2][2 * kMaxBlock];
  for (int64_t r = 0; r < n_runs; ++r) {
    const Run& run = runs[r];
    const int64_t row0 = 2 * run.th, col0 = 2 * run.tw0, cols = std::min(2 * run.len, t.out_w - col0);
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
      float* dst = y + (run.n * t.outs + o) * t.out_h * t.out_w + col0;
      for (int a = 0; a < 2 && row0 + a < t.out_h; ++a) std::copy(out[a], out[a] + cols, dst + (row0 + a) * t.out_w);
    }
  }
}

// A per-thread buffer that only grows (steady state: no page faults).
float* thread_buffer(int which, size_t n) {
  thread_local std::vector<float> buffers[2];
  if (buffers[which].size() < n) buffers[which].resize(n);
  return buffers[which].data();
}

// The convolution of x [batch, ins, height, width] with the filters f, padding t.pad, into
// y [batch, outs, out_h, out_w]. Collective over nothing; OpenMP over blocks of tiles.
void convolve(const Tiling& t, const Filter& f, const float* x, const float* bias, float* y) {
  const std::vector<float> U = transform_filters(f);  // [16, outs, ins]
  const int64_t tiles = t.count(), per_block = block_tiles(t);
  const int64_t blocks = (tiles + per_block - 1) / per_block;
  // The 16 positions' planes sit one cache line apart in the cache's sets: with power-of-two
  // strides the transforms' 16 streams would all fall into one set (4K aliasing, 3x slower).
  const int64_t v_step = t.ins * per_block + 16, m_step = t.outs * per_block + 16;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t first = blk * per_block, count = std::min(per_block, tiles - first);
    float* V = thread_buffer(0, static_cast<size_t>(kPositions * v_step));  // [16, ins, block] (+ a skew)
    float* M = thread_buffer(1, static_cast<size_t>(kPositions * m_step));  // [16, outs, block] (+ a skew)
    Run runs[kMaxBlock];
    const int64_t n_runs = runs_of(t, first, count, runs);
    transform_inputs(t, x, runs, n_runs, per_block, v_step, V);
    for (int p = 0; p < kPositions; ++p)  // M[p] [outs, count] = U[p] [outs, ins] · V[p] [ins, count]
      gemm<float>(t.outs, count, t.ins, U.data() + p * t.outs * t.ins, t.ins, 1, V + p * v_step, per_block, 1,
                  M + p * m_step, per_block, false);
    transform_outputs(t, M, bias, runs, n_runs, per_block, m_step, y);
  }
}

Tiling tiling_of(int64_t batch, int64_t ins, int64_t outs, int64_t height, int64_t width, int64_t pad) {
  Tiling t{batch, ins, outs, height, width, pad, height + 2 * pad - 2, width + 2 * pad - 2, 0, 0};
  t.tiles_h = (t.out_h + 1) / 2;
  t.tiles_w = (t.out_w + 1) / 2;
  return t;
}

}  // namespace

bool winograd_f2_applies(const Conv2dGeometry& g) {
  return g.kernel == 3 && g.stride == 1 && g.padding >= 0 && g.padding <= 2 && g.out_height() >= 1 &&
         g.out_width() >= 1;
}

void conv2d_forward_winograd_f2(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  SM_CHECK(winograd_f2_applies(g), "Winograd F(2x2,3x3) needs a 3x3 stride-1 convolution with padding 0-2");
  convolve(tiling_of(g.batch, g.in_channels, g.out_channels, g.height, g.width, g.padding),
           Filter{w, g.out_channels, g.in_channels, false}, x, bias, y);
}

void conv2d_backward_data_winograd_f2(const Conv2dGeometry& g, const float* dy, const float* w, float* dx) {
  SM_CHECK(winograd_f2_applies(g), "Winograd F(2x2,3x3) needs a 3x3 stride-1 convolution with padding 0-2");
  convolve(tiling_of(g.batch, g.out_channels, g.in_channels, g.out_height(), g.out_width(), 2 - g.padding),
           Filter{w, g.in_channels, g.out_channels, true}, dy, nullptr, dx);
}

}  // namespace sm::cpu
