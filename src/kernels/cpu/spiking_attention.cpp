// spiking_attention.cpp — CPU spiking self-attention forward / backward (see the header for
// the math, layout and invariants). One (b, head) block per OpenMP iteration; each thread
// owns its scratch (bit rows, d×d matrices, transposes, a row accumulator), so blocks never
// share memory they write.
//
// Dot products over tokens (A = V·Kᵀ, dA = dOut·Qᵀ) are computed as rank-1 updates of a
// d-long row over a transposed operand (row i += x[i, l] · yᵀ[l, :]): every element is still
// summed in token order l = 0..L-1, as a plain dot product would, but the inner loop runs
// over contiguous j and vectorises.
#include "spikemesh/kernels/cpu/spiking_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "spikemesh/core/bitpack.h"

namespace sm::cpu {
namespace {

// The d×L blocks of one (b, head): q, k, v of qkv [B, 3C, L].
template <typename T>
struct HeadBlocks {
  const T *q, *k, *v;
};

template <typename T>
HeadBlocks<T> head_blocks(const T* qkv, const SsaGeom& g, int64_t b, int64_t h) {
  const int64_t C = g.C(), L = g.L;
  const T* base = qkv + (b * 3 * C + h * g.d) * L;  // part 0 (q), this head's first channel
  return {base, base + C * L, base + 2 * C * L};
}

// Rows [rows, L] of exact 0/1 values -> bits [rows, W] (W = ceil(L/64) words, LSB = token 0):
// each row packed as bytes (core/bitpack: 8 tokens per vector compare) into its words, which on
// this little-endian CPU puts token l at bit l & 63 of word l >> 6; the words' unused bytes are 0.
template <typename T>
void pack_rows(const T* x, int64_t rows, int64_t L, int64_t W, uint64_t* bits) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "pack_rows writes the words as bytes");
  std::fill(bits, bits + rows * W, uint64_t{0});
  for (int64_t r = 0; r < rows; ++r) pack_bits_serial(x + r * L, L, reinterpret_cast<uint8_t*>(bits + r * W));
}

// yt[l, j] = y[j, l]: [d, L] -> [L, d], in double.
template <typename T>
void transpose(const T* y, int64_t d, int64_t L, double* yt) {
  for (int64_t j = 0; j < d; ++j)
    for (int64_t l = 0; l < L; ++l) yt[l * d + j] = static_cast<double>(y[j * L + l]);
}

// m[i, j] = s · Σ_l x[i, l] · y[j, l] (summed in token order) for x, y [d, L]; yt: scratch [L, d].
template <typename T>
void gram(const T* x, const T* y, int64_t d, int64_t L, double s, double* yt, double* m) {
  transpose(y, d, L, yt);
  for (int64_t i = 0; i < d; ++i) {
    double* mi = m + i * d;  // [d]
    std::fill(mi, mi + d, 0.0);
    const T* xi = x + i * L;
    for (int64_t l = 0; l < L; ++l) {
      const double xv = static_cast<double>(xi[l]);
      const double* yl = yt + l * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) mi[j] += xv * yl[j];
    }
    if (s != 1.0)
      for (int64_t j = 0; j < d; ++j) mi[j] *= s;
  }
}

// out[r, :] = T(s · Σ_c coef(r, c) · y[c, :]) for r < d, y [d, L]; acc: scratch [L].
template <typename T, typename Coef>
void combine_rows(const T* y, int64_t d, int64_t L, Coef coef, double s, double* acc, T* out) {
  for (int64_t r = 0; r < d; ++r) {
    std::fill(acc, acc + L, 0.0);
    for (int64_t c = 0; c < d; ++c) {
      const double a = coef(r, c);
      const T* yc = y + c * L;
#pragma omp simd
      for (int64_t l = 0; l < L; ++l) acc[l] = std::fma(a, static_cast<double>(yc[l]), acc[l]);
    }
    T* o = out + r * L;
    for (int64_t l = 0; l < L; ++l) o[l] = static_cast<T>(acc[l] * s);
  }
}

// Binary forward of one block: A from popcounts, A·Q as exact integer sums in T.
template <typename T>
void forward_binary_block(const HeadBlocks<T>& in, int64_t d, int64_t L, T scale, std::vector<uint64_t>& bits,
                          std::vector<T>& a, T* out) {
  const int64_t W = (L + 63) / 64;
  bits.resize(2 * d * W);
  uint64_t* vb = bits.data();       // [d, W]
  uint64_t* kb = vb + d * W;        // [d, W]
  pack_rows(in.v, d, L, W, vb);
  pack_rows(in.k, d, L, W, kb);
  a.resize(d * d);                  // [d, d] counts A[i, j] = |V_i ∧ K_j|
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      int64_t n = 0;
      for (int64_t w = 0; w < W; ++w) n += __builtin_popcountll(vb[i * W + w] & kb[j * W + w]);
      a[i * d + j] = static_cast<T>(n);
    }
  for (int64_t i = 0; i < d; ++i) {
    T* o = out + i * L;  // [L]
    std::fill(o, o + L, T(0));
    for (int64_t j = 0; j < d; ++j) {
      const T aij = a[i * d + j];
      if (aij == T(0)) continue;  // Q is 0/1: nothing to add (and no NaN to propagate)
      const T* qj = in.q + j * L;
#pragma omp simd
      for (int64_t l = 0; l < L; ++l) o[l] += aij * qj[l];
    }
    for (int64_t l = 0; l < L; ++l) o[l] *= scale;
  }
}

// ---- the backward of a binary block -----------------------------------------------------

// The 64×64 bit matrix a (bit j of a[i]: row i, column j) transposed in place: six rounds
// swapping ever smaller off-diagonal blocks (Hacker's Delight, "Transposing a Bit Matrix").
void transpose64(uint64_t* a) {
  uint64_t m = 0xFFFFFFFF00000000ull;
  for (int j = 32; j != 0; j >>= 1, m ^= m >> j)
    for (int k = 0; k < 64; k = ((k | j) + 1) & ~j) {
      const uint64_t t = ((a[k] >> j) ^ a[k | j]) & (m >> j);
      a[k] ^= t << j;
      a[k | j] ^= t;
    }
}

// Per token l, the set rows of a d×L 0/1 block as a mask (bit j: row j fires at l), d ≤ 64,
// from the block's packed rows bits [d, W] (pack_rows): the transpose of each 64-token column.
void token_masks(const uint64_t* bits, int64_t d, int64_t L, int64_t W, uint64_t* mask) {
  for (int64_t w = 0; w < W; ++w) {
    uint64_t a[64] = {};
    for (int64_t j = 0; j < d; ++j) a[j] = bits[j * W + w];
    transpose64(a);
    const int64_t l0 = w * 64, n = std::min<int64_t>(64, L - l0);
    std::copy(a, a + n, mask + l0);
  }
}

// rows[l, :] = Σ over the set bits j of mask[l] (ascending) of m[j, :] (d doubles each).
void masked_row_sums(const uint64_t* mask, const double* m, int64_t d, int64_t L, double* rows) {
  for (int64_t l = 0; l < L; ++l) {
    double* r = rows + l * d;
    std::fill(r, r + d, 0.0);
    for (uint64_t b = mask[l]; b; b &= b - 1) {
      const double* mj = m + __builtin_ctzll(b) * d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) r[i] += mj[i];
    }
  }
}

// out[i, l] = T(rows[l, i] · s): [L, d] doubles back to a [d, L] block.
template <typename T>
void store_transposed(const double* rows, int64_t d, int64_t L, double s, T* out) {
  for (int64_t i = 0; i < d; ++i)
    for (int64_t l = 0; l < L; ++l) out[i * L + l] = static_cast<T>(rows[l * d + i] * s);
}

// rows[l, j] = Σ_i a[i, j] · dot[l, i] (i ascending) for l < L, j < d: dQ before its scale.
// A token's D sums stay in registers over i (D a compile-time width) instead of going to memory
// and back for every i; the same operations in the same order either way.
template <int D>
void dq_rows_fixed(const double* a, const double* dot, int64_t L, double* rows) {
  for (int64_t l = 0; l < L; ++l) {
    double acc[D] = {};
    const double* o = dot + l * D;
    for (int64_t i = 0; i < D; ++i) {
      const double oi = o[i];
      const double* ai = a + i * D;
      for (int j = 0; j < D; ++j) acc[j] = std::fma(ai[j], oi, acc[j]);  // as combine_rows
    }
    std::copy(acc, acc + D, rows + l * D);
  }
}

void dq_rows(const double* a, const double* dot, int64_t d, int64_t L, double* rows) {
  if (d == 32) return dq_rows_fixed<32>(a, dot, L, rows);
  if (d == 16) return dq_rows_fixed<16>(a, dot, L, rows);
  if (d == 8) return dq_rows_fixed<8>(a, dot, L, rows);
  for (int64_t l = 0; l < L; ++l) {
    double* r = rows + l * d;
    std::fill(r, r + d, 0.0);
    const double* o = dot + l * d;
    for (int64_t i = 0; i < d; ++i) {
      const double oi = o[i];
      const double* ai = a + i * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) r[j] = std::fma(ai[j], oi, r[j]);
    }
  }
}

struct BinaryScratch {
  std::vector<uint64_t> bits, qm, km, vm;  // packed rows of V, K, Q; token masks of Q, K, V
  std::vector<double> a, da, dat, dot, rows;  // A, dA [d, d] (i-major), dAᵀ [d, d], dOutᵀ [L, d], [L, d]
};

// The backward of one block whose q, k, v are 0/1, d ≤ 64: A from popcounts; dA (as dAᵀ, one
// row per Q channel) by adding dOut's token columns where Q fires; dV, dK by adding rows of
// dAᵀ / dA where K / V fire; dQ as the general path (A is dense). Every element is the general
// path's double sum in the same order without its exact-zero terms (a finite value's sum is
// unchanged by them), rounded once to T.
template <typename T>
void backward_binary_block(const HeadBlocks<T>& in, const T* dO, int64_t d, int64_t L, double scale,
                           BinaryScratch& s, T* dq, T* dk, T* dv) {
  const int64_t W = (L + 63) / 64;
  s.bits.resize(3 * d * W);  // V, K, Q
  pack_rows(in.v, d, L, W, s.bits.data());
  pack_rows(in.k, d, L, W, s.bits.data() + d * W);
  pack_rows(in.q, d, L, W, s.bits.data() + 2 * d * W);
  s.a.resize(d * d);
  for (int64_t i = 0; i < d; ++i)  // A[i, j] = |V_i ∧ K_j|
    for (int64_t j = 0; j < d; ++j) {
      int64_t n = 0;
      for (int64_t w = 0; w < W; ++w) n += __builtin_popcountll(s.bits[i * W + w] & s.bits[(d + j) * W + w]);
      s.a[i * d + j] = static_cast<double>(n);
    }
  s.qm.resize(L), s.km.resize(L), s.vm.resize(L);
  token_masks(s.bits.data() + 2 * d * W, d, L, W, s.qm.data());
  token_masks(s.bits.data() + d * W, d, L, W, s.km.data());
  token_masks(s.bits.data(), d, L, W, s.vm.data());
  s.dot.resize(L * d), s.rows.resize(L * d), s.dat.resize(d * d), s.da.resize(d * d);
  transpose(dO, d, L, s.dot.data());  // dOutᵀ [L, d]
  // dAᵀ[j, :] = scale · Σ_{l: Q[j,l]=1} dOut[:, l]
  std::fill(s.dat.begin(), s.dat.end(), 0.0);
  for (int64_t l = 0; l < L; ++l)
    for (uint64_t b = s.qm[l]; b; b &= b - 1) {
      double* r = s.dat.data() + __builtin_ctzll(b) * d;
      const double* o = s.dot.data() + l * d;
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) r[i] += o[i];
    }
  for (int64_t j = 0; j < d; ++j)
    for (int64_t i = 0; i < d; ++i) {
      if (scale != 1.0) s.dat[j * d + i] *= scale;
      s.da[i * d + j] = s.dat[j * d + i];
    }
  masked_row_sums(s.km.data(), s.dat.data(), d, L, s.rows.data());  // dV[i, l] = Σ_{j: K[j,l]=1} dA[i, j]
  store_transposed(s.rows.data(), d, L, 1.0, dv);
  masked_row_sums(s.vm.data(), s.da.data(), d, L, s.rows.data());  // dK[j, l] = Σ_{i: V[i,l]=1} dA[i, j]
  store_transposed(s.rows.data(), d, L, 1.0, dk);
  dq_rows(s.a.data(), s.dot.data(), d, L, s.rows.data());
  store_transposed(s.rows.data(), d, L, scale, dq);
}

}  // namespace

template <typename T>
void ssa_forward(const T* qkv, const SsaGeom& g, double scale, bool binary, T* out) {
  const int64_t d = g.d, L = g.L, C = g.C(), blocks = g.batch * g.heads;
#pragma omp parallel
  {
    std::vector<uint64_t> bits;
    std::vector<T> counts;
    std::vector<double> a, yt, acc;  // [d, d], [L, d], [L]
    if (!binary) {
      a.resize(d * d);
      yt.resize(L * d);
      acc.resize(L);
    }
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < blocks; ++bh) {
      const int64_t b = bh / g.heads, h = bh % g.heads;
      const HeadBlocks<T> in = head_blocks(qkv, g, b, h);
      T* o = out + (b * C + h * d) * L;  // [d, L]
      if (binary) {
        forward_binary_block(in, d, L, static_cast<T>(scale), bits, counts, o);
        continue;
      }
      gram(in.v, in.k, d, L, 1.0, yt.data(), a.data());  // A = V·Kᵀ
      const double* A = a.data();
      combine_rows(in.q, d, L, [&](int64_t i, int64_t j) { return A[i * d + j]; }, scale, acc.data(), o);
    }
  }
}

template <typename T>
void ssa_backward(const T* dout, const T* qkv, const SsaGeom& g, double scale, bool binary, T* dqkv) {
  const int64_t d = g.d, L = g.L, C = g.C(), blocks = g.batch * g.heads;
  if (binary && d <= 64) {
#pragma omp parallel
    {
      BinaryScratch s;
#pragma omp for schedule(static)
      for (int64_t bh = 0; bh < blocks; ++bh) {
        const int64_t b = bh / g.heads, h = bh % g.heads;
        T* dq = dqkv + (b * 3 * C + h * d) * L;
        backward_binary_block(head_blocks(qkv, g, b, h), dout + (b * C + h * d) * L, d, L, scale, s, dq, dq + C * L,
                              dq + 2 * C * L);
      }
    }
    return;
  }
#pragma omp parallel
  {
    std::vector<double> a(d * d), da(d * d), yt(L * d), acc(L);  // A, dA [d, d]; [L, d]; [L]
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < blocks; ++bh) {
      const int64_t b = bh / g.heads, h = bh % g.heads;
      const HeadBlocks<T> in = head_blocks(qkv, g, b, h);
      const T* dO = dout + (b * C + h * d) * L;              // [d, L]
      T* dq = dqkv + (b * 3 * C + h * d) * L;                // [d, L] part 0
      T* dk = dq + C * L;                                    // [d, L] part 1
      T* dv = dq + 2 * C * L;                                // [d, L] part 2
      const double* A = a.data();
      const double* dA = da.data();
      gram(in.v, in.k, d, L, 1.0, yt.data(), a.data());     // A = V·Kᵀ
      gram(dO, in.q, d, L, scale, yt.data(), da.data());    // dA = scale·dOut·Qᵀ
      // dQ[j, :] = scale · Σ_i A[i, j] · dOut[i, :]
      combine_rows(dO, d, L, [&](int64_t j, int64_t i) { return A[i * d + j]; }, scale, acc.data(), dq);
      // dV[i, :] = Σ_j dA[i, j] · K[j, :]
      combine_rows(in.k, d, L, [&](int64_t i, int64_t j) { return dA[i * d + j]; }, 1.0, acc.data(), dv);
      // dK[j, :] = Σ_i dA[i, j] · V[i, :]
      combine_rows(in.v, d, L, [&](int64_t j, int64_t i) { return dA[i * d + j]; }, 1.0, acc.data(), dk);
    }
  }
}

template void ssa_forward<float>(const float*, const SsaGeom&, double, bool, float*);
template void ssa_forward<double>(const double*, const SsaGeom&, double, bool, double*);
template void ssa_backward<float>(const float*, const float*, const SsaGeom&, double, bool, float*);
template void ssa_backward<double>(const double*, const double*, const SsaGeom&, double, bool, double*);

}  // namespace sm::cpu
