// spike_conv.cpp — the binary-input convolution of spike_conv.h: the spike bitmap, the
// per-pixel lists of active inputs, the forward (output-stationary over a tile of rows, one
// 64-channel register block at a time, its lists in segments whose weight rows stay near L1
// while every pixel of the tile adds them) and the weight gradient (one thread per input
// channel range, samples in order). The sums themselves are spike_conv_sums.inc, compiled for
// AVX2 and, with GCC, AVX-512 (chosen at run time).
#include "spikemesh/kernels/cpu/spike_conv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cpu/gemm.h"
#include "spikemesh/kernels/cpu/isa.h"

#if !defined(__AVX2__)
#error "spike_conv.cpp needs AVX2 (MARCH=x86-64-v3 or newer)"
#endif

namespace {  // each copy's loops stay in this file: no inline function shared across copies

// kSetBitIndices[b]: the positions of the set bits of byte b, ascending, one per byte (the
// AVX2 list builder widens them to 8 indices; bytes past the popcount are 0).
struct SetBitTable {
  uint64_t entry[256];
  constexpr SetBitTable() : entry() {
    for (int b = 0; b < 256; ++b) {
      int n = 0;
      for (int i = 0; i < 8; ++i)
        if (b >> i & 1) entry[b] |= static_cast<uint64_t>(i) << (8 * n++);
    }
  }
};
constexpr SetBitTable kSetBitTable{};
constexpr const uint64_t* kSetBitIndices = kSetBitTable.entry;

#define SM_SUMS_NS sums_avx2
#define SM_SUMS_AVX512 0
#include "spike_conv_sums.inc"
#undef SM_SUMS_NS
#undef SM_SUMS_AVX512

#if defined(__GNUC__) && !defined(__clang__)
#define SM_HAVE_AVX512_SUMS 1
#pragma GCC push_options
#pragma GCC target("avx512f")
#define SM_SUMS_NS sums_avx512
#define SM_SUMS_AVX512 1
#include "spike_conv_sums.inc"
#undef SM_SUMS_NS
#undef SM_SUMS_AVX512
#pragma GCC pop_options
#else
#define SM_HAVE_AVX512_SUMS 0
#endif

}  // namespace

namespace sm::cpu {
namespace {

constexpr int64_t kPad = 16;    // output channels are padded to a multiple of 16 (64-byte rows)
constexpr int64_t kBlock = 64;  // output channels per register block
constexpr int64_t kTile = 16;   // the re-layout passes' tile edge (divides kBlock)
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A matrix [rows, CoutP] kept as column blocks: block b (channels [64b, 64b + lanes)) is a
// contiguous [rows, lanes] piece, so one block's rows share no cache line with another's.
struct BlockedRows {
  int64_t rows = 0, coutp = 0;
  Tensor data;  // F32 [rows · CoutP]
  int64_t lanes(int64_t b0) const { return std::min(kBlock, coutp - b0); }
  float* block(int64_t b0) { return data.data<float>() + rows * b0; }
  const float* block(int64_t b0) const { return data.data<float>() + rows * b0; }
};

BlockedRows blocked_rows(int64_t rows, int64_t coutp) {
  BlockedRows m;
  m.rows = rows;
  m.coutp = coutp;
  m.data = Tensor::zeros({rows * coutp}, DType::F32);
  return m;
}

// out[p·out_stride + 0..lanes) = start[p·start_stride + 0..lanes) + Σ rows[idx[k]·lanes + 0..lanes)
// over pixel p's list, in segments (spike_conv_sums.inc's sum_segments: segment s of pixel p
// is idx[first[p·fs + s] .. first[p·fs + s + 1])); pairs: two pixels at a time, which pays
// where the rows come from near L1 (the forward's segments), not for the weight gradient's
// long lists over a chunk's output-gradient rows (L2; measured ~3 % slower).
void sum_segments(int64_t lanes, const float* start, int64_t start_stride, const float* rows, const int32_t* first,
                  int64_t fs, int64_t segs, const int32_t* idx, int64_t pixels, float* out, int64_t out_stride,
                  bool pairs) {
#if SM_HAVE_AVX512_SUMS
  if (avx512_kernels()) {
    sums_avx512::sum_segments_lanes(lanes, start, start_stride, rows, lanes, first, fs, segs, idx, pixels, out,
                                    out_stride, pairs);
    return;
  }
#endif
  sums_avx2::sum_segments_lanes(lanes, start, start_stride, rows, lanes, first, fs, segs, idx, pixels, out,
                                out_stride, pairs);
}

// ---- forward -----------------------------------------------------------------------------

struct SpikeBitmap {  // bits [batch, Hp, Wp, words]: bit c of pixel (h, w) = x[n, c, h−p, w−p] ≠ 0
  int64_t hp = 0, wp = 0, words = 0;
  Tensor bits;  // u64 stored in an I64 tensor
  const uint64_t* pixel(int64_t n, int64_t h, int64_t w) const {
    return reinterpret_cast<const uint64_t*>(bits.data<int64_t>()) + ((n * hp + h) * wp + w) * words;
  }
};

// A forward list segment: about kSegmentRows weight rows of one 64-channel block (64 KB), a
// whole number of (tap, 64-channel word) units. Measured (one thread, 15 % spikes, against
// unsegmented lists): 256→256 on 24×24 and 512→512 on 12×12 and 6×6 −12…−20 %, 64→128 on
// 48×48 even; 128 or 384 rows gave less.
constexpr int64_t kSegmentRows = 256;
struct Segments {
  int64_t unit_run = 1, count = 1;  // units per segment, segments per pixel
};
Segments list_segments(const Conv2dGeometry& g, int64_t words) {
  Segments s;
  s.unit_run = std::max<int64_t>(1, kSegmentRows / std::min<int64_t>(64, g.in_channels));
  s.count = (g.kernel * g.kernel * words + s.unit_run - 1) / s.unit_run;
  return s;
}

// The segmented lists of output rows [oh0, oh1) of sample n (spike_conv_sums.inc's
// tile_lists, in the registers sum_segments uses).
void tile_lists(const Conv2dGeometry& g, const SpikeBitmap& bm, const Segments& segs, int64_t n, int64_t oh0,
                int64_t oh1, int32_t* first, int32_t* offs) {
  const uint64_t* bits = bm.pixel(n, 0, 0);
#if SM_HAVE_AVX512_SUMS
  if (avx512_kernels()) {
    sums_avx512::tile_lists(bits, bm.wp, bm.words, g.kernel, g.stride, g.in_channels, oh0, oh1, g.out_width(),
                            segs.unit_run, first, offs);
    return;
  }
#endif
  sums_avx2::tile_lists(bits, bm.wp, bm.words, g.kernel, g.stride, g.in_channels, oh0, oh1, g.out_width(),
                        segs.unit_run, first, offs);
}

SpikeBitmap empty_bitmap(const Conv2dGeometry& g) {
  SpikeBitmap b;
  b.hp = g.height + 2 * g.padding;
  b.wp = g.width + 2 * g.padding;
  b.words = (g.in_channels + 63) / 64;
  b.bits = Tensor::zeros({g.batch, b.hp, b.wp, b.words}, DType::I64);
  return b;
}

// Calls f(i) for every set bit i in [0, len) of the bits starting at bit `first` of `b`
// (nbytes long; bits past the end read as 0), in ascending order.
template <typename F>
void for_each_set_bit(const uint8_t* b, int64_t nbytes, int64_t first, int64_t len, F&& f) {
  for (int64_t i = 0; i < len;) {
    const int64_t bit = first + i, byte = bit >> 3;
    uint64_t w = 0;
    std::memcpy(&w, b + byte, static_cast<size_t>(std::min<int64_t>(8, nbytes - byte)));
    const int64_t take = std::min<int64_t>(56, len - i);  // 64 − (bit & 7) ≥ 57 bits valid
    w = (w >> (bit & 7)) & ((uint64_t{1} << take) - 1);
    for (; w; w &= w - 1) f(i + __builtin_ctzll(w));
    i += take;
  }
}

// The bitmap of spike_bitmap from packed bits: only set bits are visited.
SpikeBitmap spike_bitmap_from_bits(const Conv2dGeometry& g, const uint8_t* xb) {
  SpikeBitmap b = empty_bitmap(g);
  uint64_t* bits = reinterpret_cast<uint64_t*>(b.bits.data<int64_t>());
  const int64_t C = g.in_channels, W = g.width, plane = g.height * g.width, p = g.padding;
  const int64_t nbytes = (g.batch * C * plane + 7) / 8;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.batch; ++n)  // one sample per thread at a time: threads never share a word
    for (int64_t c = 0; c < C; ++c) {
      const uint64_t bit = uint64_t{1} << (c & 63);
      uint64_t* sample = bits + (n * b.hp * b.wp) * b.words + (c >> 6);
      for_each_set_bit(xb, nbytes, (n * C + c) * plane, plane, [&](int64_t q) {
        sample[((q / W + p) * b.wp + q % W + p) * b.words] |= bit;
      });
    }
  return b;
}

SpikeBitmap spike_bitmap(const Conv2dGeometry& g, const float* x) {
  SpikeBitmap b = empty_bitmap(g);
  uint64_t* bits = reinterpret_cast<uint64_t*>(b.bits.data<int64_t>());
  const int64_t C = g.in_channels, H = g.height, W = g.width, p = g.padding;
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t n = 0; n < g.batch; ++n) {
    for (int64_t h = 0; h < H; ++h) {  // one padded row per (n, h): threads never share a word
      uint64_t* row = bits + ((n * b.hp + h + p) * b.wp + p) * b.words;
      for (int64_t c = 0; c < C; ++c) {
        const float* xr = x + ((n * C + c) * H + h) * W;
        const uint64_t bit = uint64_t{1} << (c & 63);
        uint64_t* word = row + (c >> 6);
        int64_t w = 0;
        for (; w + 8 <= W; w += 8) {  // 8 pixels per compare; set bits are rare
          const __m256 nz = _mm256_cmp_ps(_mm256_loadu_ps(xr + w), _mm256_setzero_ps(), _CMP_NEQ_UQ);
          for (unsigned m = static_cast<unsigned>(_mm256_movemask_ps(nz)); m; m &= m - 1)
            word[(w + __builtin_ctz(m)) * b.words] |= bit;
        }
        for (; w < W; ++w)
          if (xr[w] != 0.0f) word[w * b.words] |= bit;
      }
    }
  }
  return b;
}

// wt [K·K·Cin, CoutP] blocked: row (kh·K + kw)·Cin + ci holds w[:, ci, kh, kw] (zero-padded).
BlockedRows tap_major_weight(const Conv2dGeometry& g, const float* w, int64_t coutp) {
  const int64_t kk = g.kernel * g.kernel, C = g.in_channels, Cout = g.out_channels;
  BlockedRows wt = blocked_rows(kk * C, coutp);
  // Tiles of kTile output × kTile input channels: each reads kTile runs of kTile·K² floats and
  // writes kTile·K² rows of kTile floats (a tile never straddles a 64-channel block).
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t ci0 = 0; ci0 < C; ci0 += kTile)
    for (int64_t co0 = 0; co0 < Cout; co0 += kTile) {
      const int64_t b0 = co0 / kBlock * kBlock, lanes = wt.lanes(b0);
      float* dst = wt.block(b0);  // column co − b0 of the block
      for (int64_t co = co0; co < std::min(co0 + kTile, Cout); ++co)
        for (int64_t ci = ci0; ci < std::min(ci0 + kTile, C); ++ci)
          for (int64_t t = 0; t < kk; ++t) dst[(t * C + ci) * lanes + co - b0] = w[(co * C + ci) * kk + t];
    }
  return wt;
}

// dst[r·dst_stride + c] += src[c·src_stride + r] for r < rows, c < cols, in kTile × kTile
// tiles (each tile reads kTile runs of kTile floats from src and writes kTile runs to dst);
// one add per element.
void add_transposed(const float* src, int64_t src_stride, int64_t rows, int64_t cols, float* dst,
                    int64_t dst_stride) {
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(r0 + kTile, rows); ++r)
        for (int64_t c = c0; c < std::min(c0 + kTile, cols); ++c) dst[r * dst_stride + c] += src[c * src_stride + r];
}

// out[co·out_stride + ow] = tile[ow·ts + co] for co < channels, ow < wo: pixel-major tile
// back to NCHW, in 8×8 register transposes where whole.
void store_tile(const float* tile, int64_t ts, int64_t wo, int64_t channels, float* out, int64_t out_stride) {
  int64_t ow0 = 0;
  for (; ow0 + 8 <= wo; ow0 += 8) {
    int64_t c0 = 0;
    for (; c0 + 8 <= channels; c0 += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(tile + (ow0 + i) * ts + c0);  // row i: pixel ow0+i
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      // r[j] (j < 4): channel c0+j of pixels 0-3 | 4-7 in its low | high half, r[j+4] of pixels 4-7 ...
      for (int i = 0; i < 8; ++i) {
        const __m256 lo = r[i & 3], hi = r[(i & 3) + 4];
        const __m256 v = i < 4 ? _mm256_permute2f128_ps(lo, hi, 0x20) : _mm256_permute2f128_ps(lo, hi, 0x31);
        _mm256_storeu_ps(out + (c0 + i) * out_stride + ow0, v);
      }
    }
    for (; c0 < channels; ++c0)
      for (int64_t ow = ow0; ow < ow0 + 8; ++ow) out[c0 * out_stride + ow] = tile[ow * ts + c0];
  }
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t ow = ow0; ow < wo; ++ow) out[c * out_stride + ow] = tile[ow * ts + c];
}

// Per-thread scratch, carved from one tensor of the caching allocator that the calling
// thread allocates (worker threads never allocate).
struct ForwardScratch {
  int32_t* first;  // [pixels · (segments + 1)] segment starts of one tile
  int32_t* offs;   // [pixels · K²·Cin + kListSlack] the most a tile can hold (every input active)
  float* tile;     // [pixels, 64] one output block
  static constexpr int64_t kListSlack = 16;  // the list builder's vector stores past the end
  static int64_t ints(int64_t pixels, int64_t taps, int64_t segs) {
    return pixels * (segs + 1) + pixels * taps + kListSlack + pixels * kBlock;
  }
  ForwardScratch(int32_t* base, int64_t pixels, int64_t taps, int64_t segs)
      : first(base), offs(base + pixels * (segs + 1)),
        tile(reinterpret_cast<float*>(base + pixels * (segs + 1) + pixels * taps + kListSlack)) {}
};

// Output rows [oh0, oh1) of sample n: per pixel, the weight rows of its active (tap,
// channel) inputs (tap-major, channel ascending); then per 64-channel block the sums over the
// tile's pixels into tile [pixels, 64] and y (NCHW).
void forward_tile(const Conv2dGeometry& g, const SpikeBitmap& bm, const Segments& segs, const BlockedRows& wt,
                  int64_t coutp, const float* biasp, int64_t n, int64_t oh0, int64_t oh1, ForwardScratch& s,
                  float* y) {
  const int64_t Wo = g.out_width(), Ho = g.out_height();
  const int64_t pixels = (oh1 - oh0) * Wo;
  tile_lists(g, bm, segs, n, oh0, oh1, s.first, s.offs);
  for (int64_t b0 = 0; b0 < coutp; b0 += kBlock) {
    const int64_t lanes = std::min(kBlock, coutp - b0);
    sum_segments(lanes, biasp + b0, 0, wt.block(b0), s.first, segs.count + 1, segs.count, s.offs, pixels, s.tile,
                 kBlock, /*pairs=*/true);
    const int64_t channels = std::min(lanes, g.out_channels - b0);
    for (int64_t oh = oh0; oh < oh1; ++oh)
      store_tile(s.tile + (oh - oh0) * Wo * kBlock, kBlock, Wo, channels,
                 y + ((n * g.out_channels + b0) * Ho + oh) * Wo, Ho * Wo);
  }
}

// ---- weight gradient ---------------------------------------------------------------------

// The rows of a chunk's transposed output gradient: pixel (n, oh, ow) is row
// (n·hp + oh + pad)·wp + ow + pad. pad 1 (a zero border) for 3×3, stride-1, padding-1
// convolutions on AVX-512, whose weight gradient adds all nine taps at once (sum_taps3x3:
// 9 × 2 zmm accumulators), else 0. AVX2's 16 ymm registers hold nine taps of 8 floats only,
// which measured 1.4–2× slower than a tap at a time over 64 floats (one thread, 15 % spikes,
// the VGG's shapes); both add the same terms in the same order.
struct DyRows {
  int64_t pad = 0, hp = 0, wp = 0;
  bool nine_taps() const { return pad == 1; }
  int64_t per_sample() const { return hp * wp; }
  int64_t row(int64_t n, int64_t oh, int64_t ow) const { return (n * hp + oh + pad) * wp + ow + pad; }
};
DyRows dy_rows(const Conv2dGeometry& g) {
  const int64_t pad = SM_HAVE_AVX512_SUMS && avx512_kernels() && g.kernel == 3 && g.stride == 1 && g.padding == 1;
  return {pad, g.out_height() + 2 * pad, g.out_width() + 2 * pad};
}

// dyt [chunk rows, CoutP] blocked (rows as in DyRows) = dy[n0 .. n0+chunk) [Cout, Ho, Wo]
// transposed, sample after sample (padding columns and the border stay zero), channels split
// between the threads of the enclosing parallel region.
void transpose_samples(const Conv2dGeometry& g, const DyRows& r, const float* dy, int64_t n0, int64_t chunk,
                       BlockedRows& dyt) {
  const int64_t cout = g.out_channels, Ho = g.out_height(), Wo = g.out_width();
#pragma omp for schedule(static) collapse(2)
  for (int64_t n = 0; n < chunk; ++n)
    for (int64_t co = 0; co < cout; ++co) {
      const int64_t b0 = co / kBlock * kBlock, lanes = dyt.lanes(b0);
      float* col = dyt.block(b0) + co - b0;
      const float* src = dy + ((n0 + n) * cout + co) * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) col[r.row(n, oh, ow) * lanes] = src[oh * Wo + ow];
    }
}

// Per-thread scratch of the weight gradient (carved like ForwardScratch): the active pixels
// of one input channel in each sample of a chunk and per tap the dy-row offsets they reach
// (CSR over the K·K taps, samples in order within a tap).
struct WeightScratch {
  int32_t *ih, *iw, *count, *first, *offs;  // [chunk·plane] ×2, [chunk], [K² + 1], [K²·chunk·plane]
  static int64_t ints(int64_t chunk, int64_t plane, int64_t taps) {
    return 2 * chunk * plane + chunk + taps + 1 + taps * chunk * plane;
  }
  WeightScratch(int32_t* base, int64_t chunk, int64_t plane, int64_t taps)
      : ih(base), iw(base + chunk * plane), count(base + 2 * chunk * plane), first(count + chunk),
        offs(first + taps + 1) {}
};

// The active pixels of one input plane into ih, iw (row-major order); their count.
int32_t active_pixels(const Conv2dGeometry& g, const float* xp, int32_t* ih, int32_t* iw) {
  int32_t n_active = 0;
  for (int64_t h = 0; h < g.height; ++h)
    for (int64_t w = 0; w < g.width; ++w)
      if (xp[h * g.width + w] != 0.0f) {
        ih[n_active] = static_cast<int32_t>(h);
        iw[n_active++] = static_cast<int32_t>(w);
      }
  return n_active;
}

// The same from the plane's packed bits (starting at bit `first` of xb, nbytes long).
int32_t active_pixels(const Conv2dGeometry& g, const uint8_t* xb, int64_t nbytes, int64_t first, int32_t* ih,
                      int32_t* iw) {
  int32_t n_active = 0;
  for_each_set_bit(xb, nbytes, first, g.height * g.width, [&](int64_t q) {
    ih[n_active] = static_cast<int32_t>(q / g.width);
    iw[n_active++] = static_cast<int32_t>(q % g.width);
  });
  return n_active;
}

// spike_conv_sums.inc's sum_taps3x3 over a block of `lanes` floats (AVX-512 only: dy_rows).
void sum_taps3x3(int64_t lanes, const float* rows, int64_t wp, const int32_t* center, int64_t count, float* dw,
                 int64_t tap_stride) {
#if SM_HAVE_AVX512_SUMS
  sums_avx512::sum_taps3x3_lanes(lanes, rows, lanes, wp, center, count, dw, tap_stride);
#endif
}

// dwt_ci [K·K, CoutP] += Σ over the samples of the chunk (in order) and their active pixels
// (ih, iw) of input channel ci (s.count[n] of them at s.ih + n·in_plane) of the dy rows they
// reach through each tap: output (oh, ow) = ((ih + p − kh) / s, (iw + p − kw) / s) when that
// divides exactly and lies inside the output. Per element the terms are added in sample
// order, then pixel order: the order of one sample at a time. 3×3, stride-1, padding-1
// convolutions add all nine taps per active pixel at once (sum_taps3x3, over DyRows' zero
// border): the same terms in the same order.
void weight_rows(const Conv2dGeometry& g, const DyRows& r, int64_t chunk, const BlockedRows& dyt, int64_t coutp,
                 WeightScratch& s, float* dwt_ci) {
  const int64_t K = g.kernel, st = g.stride, p = g.padding, Ho = g.out_height(), Wo = g.out_width();
  const int64_t in_plane = g.height * g.width;
  int32_t count = 0;
  if (r.nine_taps()) {  // the centres (an output pixel per input pixel); the zero border does the rest
    for (int64_t n = 0; n < chunk; ++n)
      for (int32_t a = 0; a < s.count[n]; ++a)
        s.offs[count++] = static_cast<int32_t>(r.row(n, s.ih[n * in_plane + a], s.iw[n * in_plane + a]));
    for (int64_t b0 = 0; count > 0 && b0 < coutp; b0 += kBlock)
      sum_taps3x3(dyt.lanes(b0), dyt.block(b0), r.wp, s.offs, count, dwt_ci + b0, coutp);
    return;
  }
  for (int64_t t = 0; t < K * K; ++t) {
    const int64_t kh = t / K, kw = t % K;
    s.first[t] = count;
    for (int64_t n = 0; n < chunk; ++n) {
      const int32_t *ih = s.ih + n * in_plane, *iw = s.iw + n * in_plane;
      for (int32_t a = 0; a < s.count[n]; ++a) {
        int64_t oh = ih[a] + p - kh, ow = iw[a] + p - kw;
        if (st != 1) {
          if (oh < 0 || ow < 0 || oh % st || ow % st) continue;
          oh /= st;
          ow /= st;
        }
        if (static_cast<uint64_t>(oh) < static_cast<uint64_t>(Ho) &&
            static_cast<uint64_t>(ow) < static_cast<uint64_t>(Wo))
          s.offs[count++] = static_cast<int32_t>(r.row(n, oh, ow));
      }
    }
  }
  s.first[K * K] = count;
  if (count == 0) return;
  for (int64_t b0 = 0; b0 < coutp; b0 += kBlock)  // the taps are the "pixels": row t of dwt_ci
    sum_segments(dyt.lanes(b0), dwt_ci + b0, coutp, dyt.block(b0), s.first, 1, 1, s.offs, K * K, dwt_ci + b0,
                 coutp, /*pairs=*/false);
}

// Samples per chunk of the weight gradient: as many as keep the chunk's transposed dy within
// the chunk bound (1 MB, a share of L2), so each thread's weight-gradient rows are read and
// written once per chunk instead of once per sample (for 512 channels on 6×6 planes those
// rows, 9.4 MB, were most of the traffic).
constexpr int64_t kDefaultChunkBytes = 1 << 20;
std::atomic<int64_t> g_chunk_bytes{0};  // 0: kDefaultChunkBytes
int64_t samples_per_chunk(const Conv2dGeometry& g, const DyRows& r, int64_t coutp) {
  const int64_t set = g_chunk_bytes.load(std::memory_order_relaxed), bound = set > 0 ? set : kDefaultChunkBytes;
  const int64_t per_sample = r.per_sample() * coutp * static_cast<int64_t>(sizeof(float));
  return std::clamp<int64_t>(bound / std::max<int64_t>(per_sample, 1), 1, std::max<int64_t>(g.batch, 1));
}

}  // namespace

void set_spike_conv_weight_chunk_bytes(int64_t bytes) { g_chunk_bytes.store(std::max<int64_t>(bytes, 0)); }

double nonzero_fraction(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < n; ++i) count += x[i] != 0.0f;
  return static_cast<double>(count) / static_cast<double>(n);
}

namespace {

// The forward from the spike bitmap (both entry points).
void forward_from_bitmap(const Conv2dGeometry& g, const SpikeBitmap& bm, const float* w, const float* bias, float* y) {
  const int64_t coutp = round_up(g.out_channels, kPad), Ho = g.out_height(), Wo = g.out_width();
  const BlockedRows wt = tap_major_weight(g, w, coutp);  // [K·K·Cin, CoutP] blocked
  std::vector<float> biasp(coutp, 0.0f);
  if (bias) std::copy(bias, bias + g.out_channels, biasp.begin());
  // A tile: whole output rows, about 256 pixels (its lists and block stay in L2).
  const int64_t tile_rows = std::clamp<int64_t>(256 / Wo, 1, Ho), tiles_per_sample = (Ho + tile_rows - 1) / tile_rows;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const Segments segs = list_segments(g, bm.words);
  const int64_t taps = g.kernel * g.kernel * g.in_channels;
  const int64_t per_thread = ForwardScratch::ints(tile_rows * Wo, taps, segs.count);
  Tensor scratch = Tensor::empty({threads, per_thread}, DType::I32);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t task = 0; task < g.batch * tiles_per_sample; ++task) {
    const int64_t n = task / tiles_per_sample, oh0 = task % tiles_per_sample * tile_rows;
    ForwardScratch s(scratch.data<int32_t>() + omp_get_thread_num() * per_thread, tile_rows * Wo, taps, segs.count);
    forward_tile(g, bm, segs, wt, coutp, biasp.data(), n, oh0, std::min(Ho, oh0 + tile_rows), s, y);
  }
}

// The weight gradient, active(n, ci, ih, iw) filling a plane's active pixels and returning
// their count (both entry points).
template <typename Active>
void weights_from(const Conv2dGeometry& g, Active&& active, const float* dy, float* dw, float* dbias) {
  const int64_t C = g.in_channels, kk = g.kernel * g.kernel, coutp = round_up(g.out_channels, kPad);
  const int64_t plane = g.out_height() * g.out_width(), in_plane = g.height * g.width;
  const DyRows rows = dy_rows(g);
  const int64_t chunk = samples_per_chunk(g, rows, coutp);
  Tensor dwt = Tensor::zeros({C, kk, coutp}, DType::F32);                // dw as [Cin, K·K, CoutP]
  BlockedRows dyt = blocked_rows(chunk * rows.per_sample(), coutp);  // dy of a chunk, rows as in DyRows
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), C));
  const int64_t per_thread = WeightScratch::ints(chunk, in_plane, kk);
  Tensor scratch = Tensor::empty({threads, per_thread}, DType::I32);
#pragma omp parallel num_threads(threads)
  {
    WeightScratch s(scratch.data<int32_t>() + omp_get_thread_num() * per_thread, chunk, in_plane, kk);
    for (int64_t n0 = 0; n0 < g.batch; n0 += chunk) {
      const int64_t m = std::min(chunk, g.batch - n0);
      transpose_samples(g, rows, dy, n0, m, dyt);
      // (implicit barrier: dyt complete)
#pragma omp for schedule(static)
      for (int64_t ci = 0; ci < C; ++ci) {
        for (int64_t n = 0; n < m; ++n) s.count[n] = active(n0 + n, ci, s.ih + n * in_plane, s.iw + n * in_plane);
        weight_rows(g, rows, m, dyt, coutp, s, dwt.data<float>() + ci * kk * coutp);
      }
      // (implicit barrier: dyt free for the next chunk)
    }
  }
  add_transposed(dwt.data<float>(), coutp, g.out_channels, C * kk, dw, C * kk);  // dw [Cout, Cin·K²] += dwtᵀ
  if (dbias) channel_bias_grad<float>(g.batch, g.out_channels, plane, dy, dbias);
}

}  // namespace

void spike_conv2d_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  forward_from_bitmap(g, spike_bitmap(g, x), w, bias, y);
}

void spike_conv2d_forward_bits(const Conv2dGeometry& g, const uint8_t* x_bits, const float* w, const float* bias,
                               float* y) {
  forward_from_bitmap(g, spike_bitmap_from_bits(g, x_bits), w, bias, y);
}

void spike_conv2d_backward_weights(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                   float* dbias) {
  const int64_t C = g.in_channels, in_plane = g.height * g.width;
  weights_from(
      g,
      [&](int64_t n, int64_t ci, int32_t* ih, int32_t* iw) {
        return active_pixels(g, x + (n * C + ci) * in_plane, ih, iw);
      },
      dy, dw, dbias);
}

void spike_conv2d_backward_weights_bits(const Conv2dGeometry& g, const uint8_t* x_bits, const float* dy, float* dw,
                                        float* dbias) {
  const int64_t C = g.in_channels, in_plane = g.height * g.width, nbytes = (g.batch * C * in_plane + 7) / 8;
  weights_from(
      g,
      [&](int64_t n, int64_t ci, int32_t* ih, int32_t* iw) {
        return active_pixels(g, x_bits, nbytes, (n * C + ci) * in_plane, ih, iw);
      },
      dy, dw, dbias);
}

double set_bit_fraction(const uint8_t* bits, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t nbytes = (n + 7) / 8, words = nbytes / 8;
  int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : count)
  for (int64_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, bits + 8 * i, 8);
    count += __builtin_popcountll(w);
  }
  for (int64_t j = 8 * words; j < nbytes; ++j) count += __builtin_popcount(bits[j]);
  return static_cast<double>(count) / static_cast<double>(n);
}

}  // namespace sm::cpu
