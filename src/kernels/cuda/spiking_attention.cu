// spiking_attention.cu (kernels/cuda) — spiking self-attention forward / backward (see
// kernels/cuda/spiking_attention.h for the math, the two forward paths and the invariants;
// kernels/cpu/spiking_attention.cpp is the reference).
//
// Kernels first, then the launchers:
//  * ssa_popcount_kernel — one block per (b, head): A = popc(V ∧ K) as int counts in shared
//    memory (token chunks of 32·Wc, rows re-aligned from the flat bit string), then the
//    exact integer sums Σ_j A[i, j]·Q[j, l] fused with the scaled write. Each thread owns the
//    A entries tid, tid + blockDim, ... (no atomics); sums run in j order.
//  * ssa_gemm_kernel — batched C[bh] = s·op(a)[bh]·op(b)[bh] with 32×32 output tiles, 32×8
//    threads (4 outputs each), k in chunks of 32 ascending, f32 accumulation. Operands are
//    logical matrices over q/k/v (values or bits), dOut or the f32 workspace, optionally
//    transposed; tiles are loaded along the operand's contiguous dimension (coalesced) into
//    padded shared arrays (33 columns: no bank conflicts either way).
#include "common.cuh"
#include "spikemesh/kernels/cuda/spiking_attention.h"

namespace sm {
namespace cuda {
namespace {

// ---- popcount forward --------------------------------------------------------------------

constexpr int64_t kPopSmemWords = 48 * 1024 / 4;  // A (d² ints) + one chunk of 2·d bit rows
constexpr int64_t kPopMaxChunkWords = 31;         // <= 992 tokens per chunk (odd: see Plan)

struct PopPlan {
  int Wc = 0;  // words (32 tokens each) per chunk
  int Ws = 0;  // shared row stride in words: odd, >= Wc (conflict-free column reads)
  size_t smem_bytes = 0;
};

// Largest chunk that fits next to A; Ws odd. Wc == 0: does not fit (d too large).
PopPlan pop_plan(const cpu::SsaGeom& g) {
  PopPlan p;
  const int64_t d = g.d, W = (g.L + 31) / 32;
  const int64_t budget = kPopSmemWords - d * d;
  const int64_t max_ws = budget > 0 ? std::min(budget / (2 * d), kPopMaxChunkWords) : 0;
  if (max_ws < 1) return p;
  int64_t ws, wc;
  if (W % 2 == 1 && W <= max_ws) ws = wc = W;
  else if (W + 1 <= max_ws) ws = W + 1, wc = W;
  else ws = wc = (max_ws % 2 == 1) ? max_ws : max_ws - 1;
  p.Wc = static_cast<int>(wc);
  p.Ws = static_cast<int>(ws);
  p.smem_bytes = static_cast<size_t>(d * d + 2 * d * ws) * sizeof(uint32_t);
  return p;
}

// Word w (tokens 32w .. 32w+31) of the row whose first bit is e0 in the flat bit string of
// `total` words; bits past the row's L tokens are cleared.
__device__ __forceinline__ uint32_t row_word(const uint32_t* __restrict__ bits, int64_t total, int64_t e0,
                                             int64_t L, int64_t w) {
  const int64_t e = e0 + 32 * w, q = e >> 5;
  const int s = static_cast<int>(e & 31);
  const uint32_t lo = bits[q];
  const uint32_t hi = (s != 0 && q + 1 < total) ? bits[q + 1] : 0u;
  uint32_t v = s != 0 ? __funnelshift_r(lo, hi, s) : lo;
  const int64_t rem = L - 32 * w;  // >= 1
  if (rem < 32) v &= (1u << rem) - 1u;
  return v;
}

template <typename T>
__global__ void ssa_popcount_kernel(const uint32_t* __restrict__ bits, int64_t total_words, int64_t batches,
                                    int heads, int d, int64_t L, int Wc, int Ws, float scale, T* __restrict__ out) {
  extern __shared__ uint32_t smem[];
  int* A = reinterpret_cast<int*>(smem);  // [d, d] counts
  uint32_t* buf = smem + d * d;           // [2d, Ws]: V rows then K rows (phase 1), Q rows (phase 2)
  const int64_t C = static_cast<int64_t>(heads) * d, W = (L + 31) / 32;
  const int tid = threadIdx.x, nt = blockDim.x, dd = d * d;
  for (int64_t bh = blockIdx.x; bh < batches; bh += gridDim.x) {
    const int64_t b = bh / heads, h = bh % heads;
    const int64_t q_row0 = (b * 3 * C + h * d) * L;  // first bit of Q row 0; K, V at +C·L, +2C·L
    const int64_t k_row0 = q_row0 + C * L, v_row0 = q_row0 + 2 * C * L;
    for (int e = tid; e < dd; e += nt) A[e] = 0;
    // Phase 1: A[i, j] = Σ_chunks popc(V_i ∧ K_j).
    for (int64_t c0 = 0; c0 < W; c0 += Wc) {
      const int wc = static_cast<int>(W - c0 < Wc ? W - c0 : Wc);
      for (int idx = tid; idx < 2 * d * Wc; idx += nt) {
        const int row = idx / Wc, w = idx % Wc;
        const int64_t e0 = row < d ? v_row0 + row * L : k_row0 + (row - d) * L;
        buf[row * Ws + w] = w < wc ? row_word(bits, total_words, e0, L, c0 + w) : 0u;
      }
      __syncthreads();
      const uint32_t* vs = buf;
      const uint32_t* ks = buf + d * Ws;
      for (int e = tid; e < dd; e += nt) {
        const int i = e / d, j = e % d;
        int n = 0;
        for (int w = 0; w < wc; ++w) n += __popc(vs[i * Ws + w] & ks[j * Ws + w]);
        A[e] += n;
      }
      __syncthreads();
    }
    // Phase 2: out[i, l] = (Σ_j A[i, j]·Q[j, l])·scale, integer sum in j order.
    for (int64_t c0 = 0; c0 < W; c0 += Wc) {
      const int wc = static_cast<int>(W - c0 < Wc ? W - c0 : Wc);
      const int64_t l0 = 32 * c0;
      const int lc = static_cast<int>(L - l0 < 32 * static_cast<int64_t>(wc) ? L - l0 : 32 * wc);
      for (int idx = tid; idx < d * wc; idx += nt) {
        const int row = idx / wc, w = idx % wc;
        buf[row * Ws + w] = row_word(bits, total_words, q_row0 + row * L, L, c0 + w);
      }
      __syncthreads();
      for (int idx = tid; idx < d * lc; idx += nt) {
        const int i = idx / lc, l = idx % lc;
        const int* Ai = A + i * d;
        const int word = l >> 5, bit = l & 31;
        int sum = 0;
        for (int j = 0; j < d; ++j) sum += Ai[j] & -static_cast<int>((buf[j * Ws + word] >> bit) & 1u);
        out[(b * C + h * d + i) * L + l0 + l] = from_f32<T>(static_cast<float>(sum) * scale);
      }
      __syncthreads();
    }
  }
}

// ---- tiled GEMM (float path, backward) -----------------------------------------------------

constexpr int kTile = 32;  // output tile kTile × kTile, k chunk kTile
constexpr int kRowsPerPass = 8;  // blockDim = (32, 8): each thread 4 rows of the tile

enum class Kind { Values, Bits, F32 };

// A logical matrix per (b, head): element (r, c) at off + b·sb + h·sh + (trans ? c·ld + r :
// r·ld + c) of `p` (T values, flat bits, or f32).
struct Operand {
  const void* p = nullptr;
  Kind kind = Kind::Values;
  int64_t off = 0, sb = 0, sh = 0, ld = 0;
  bool trans = false;
};

// Row-major destination per (b, head): element (r, c) at off + b·sb + h·sh + r·ld + c, written
// as T (or f32 when f32) after multiplying by s.
struct Target {
  void* p = nullptr;
  bool f32 = false;
  int64_t off = 0, sb = 0, sh = 0, ld = 0;
  float s = 1.0f;
};

template <typename T>
__device__ __forceinline__ float load(const Operand& o, int64_t base, int64_t r, int64_t c) {
  const int64_t e = base + (o.trans ? c * o.ld + r : r * o.ld + c);
  switch (o.kind) {
    case Kind::Values: return to_f32(static_cast<const T*>(o.p)[e]);
    case Kind::Bits: return ((static_cast<const uint32_t*>(o.p)[e >> 5] >> (e & 31)) & 1u) ? 1.0f : 0.0f;
    default: return static_cast<const float*>(o.p)[e];
  }
}

// Fills tile[r][c] = op(r0 + r, c0 + c) (0 outside rows × cols), reading along the operand's
// contiguous dimension: c when !trans, r when trans.
template <typename T>
__device__ __forceinline__ void load_tile(const Operand& o, int64_t base, int64_t r0, int64_t c0, int64_t rows,
                                          int64_t cols, float (*tile)[kTile + 1]) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int q = 0; q < kTile; q += kRowsPerPass) {
    const int r = o.trans ? tx : ty + q, c = o.trans ? ty + q : tx;
    const int64_t gr = r0 + r, gc = c0 + c;
    tile[r][c] = (gr < rows && gc < cols) ? load<T>(o, base, gr, gc) : 0.0f;
  }
}

template <typename T>
__global__ void ssa_gemm_kernel(Operand a, Operand b, Target out, int64_t M, int64_t N, int64_t K, int heads,
                                int64_t batches) {
  __shared__ float as[kTile][kTile + 1];  // [m, k]
  __shared__ float bs[kTile][kTile + 1];  // [k, n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile, n0 = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t bh = blockIdx.z; bh < batches; bh += gridDim.z) {
    const int64_t bi = bh / heads, hi = bh % heads;
    const int64_t abase = a.off + bi * a.sb + hi * a.sh, bbase = b.off + bi * b.sb + hi * b.sh;
    float acc[kTile / kRowsPerPass] = {};
    for (int64_t k0 = 0; k0 < K; k0 += kTile) {
      load_tile<T>(a, abase, m0, k0, M, K, as);
      load_tile<T>(b, bbase, k0, n0, K, N, bs);
      __syncthreads();
#pragma unroll
      for (int q = 0; q < kTile / kRowsPerPass; ++q) {
        const float* arow = as[ty + q * kRowsPerPass];
#pragma unroll 8
        for (int kk = 0; kk < kTile; ++kk) acc[q] += arow[kk] * bs[kk][tx];
      }
      __syncthreads();
    }
    const int64_t n = n0 + tx;
    if (n < N) {
      const int64_t obase = out.off + bi * out.sb + hi * out.sh;
#pragma unroll
      for (int q = 0; q < kTile / kRowsPerPass; ++q) {
        const int64_t m = m0 + ty + q * kRowsPerPass;
        if (m >= M) continue;
        const float v = acc[q] * out.s;
        const int64_t e = obase + m * out.ld + n;
        if (out.f32) static_cast<float*>(out.p)[e] = v;
        else static_cast<T*>(out.p)[e] = from_f32<T>(v);
      }
    }
  }
}

// ---- launch helpers ----------------------------------------------------------------------

void check_geom(const cpu::SsaGeom& g, const char* who) {
  SM_CHECK(g.batch >= 0 && g.heads >= 1 && g.d >= 1 && g.L >= 1,
           who << ": bad geometry B=" << g.batch << " heads=" << g.heads << " d=" << g.d << " L=" << g.L);
  SM_CHECK(g.d <= (1 << 20) && g.L < (int64_t{1} << 31), who << ": d=" << g.d << " L=" << g.L << " too large");
}

int64_t batches(const cpu::SsaGeom& g) { return g.batch * g.heads; }

// The q (part 0), k (1) or v (2) block of qkv [B, 3C, L], as values or bits.
Operand qkv_part(const void* p, Kind kind, int part, const cpu::SsaGeom& g, bool trans) {
  Operand o;
  o.p = p;
  o.kind = kind;
  o.off = part * g.C() * g.L;
  o.sb = 3 * g.C() * g.L;
  o.sh = g.d * g.L;
  o.ld = g.L;
  o.trans = trans;
  return o;
}

// dOut [B, C, L] (or out) as an operand.
Operand per_head(const void* p, const cpu::SsaGeom& g) {
  Operand o;
  o.p = p;
  o.sb = g.C() * g.L;
  o.sh = g.d * g.L;
  o.ld = g.L;
  return o;
}

// The d×d matrix of each (b, head) in an f32 workspace [B·heads, d, d].
Operand work_matrix(const float* w, const cpu::SsaGeom& g, bool trans) {
  Operand o;
  o.p = w;
  o.kind = Kind::F32;
  o.sh = g.d * g.d;
  o.sb = g.heads * o.sh;
  o.ld = g.d;
  o.trans = trans;
  return o;
}
Target work_target(float* w, const cpu::SsaGeom& g, float s) {
  Target t;
  t.p = w;
  t.f32 = true;
  t.sh = g.d * g.d;
  t.sb = g.heads * t.sh;
  t.ld = g.d;
  t.s = s;
  return t;
}

// Part `part` of dqkv [B, 3C, L] (part < 0: out [B, C, L]).
Target act_target(void* p, int part, const cpu::SsaGeom& g, float s) {
  Target t;
  t.p = p;
  t.off = part > 0 ? part * g.C() * g.L : 0;
  t.sb = (part >= 0 ? 3 : 1) * g.C() * g.L;
  t.sh = g.d * g.L;
  t.ld = g.L;
  t.s = s;
  return t;
}

template <typename T>
void gemm(const Operand& a, const Operand& b, const Target& out, int64_t M, int64_t N, int64_t K,
          const cpu::SsaGeom& g, cudaStream_t stream) {
  const int64_t nb = batches(g);
  if (nb == 0) return;
  const dim3 grid(static_cast<unsigned>((N + kTile - 1) / kTile), static_cast<unsigned>((M + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(nb, 65535)));
  SM_CHECK(grid.y <= 65535, "ssa gemm: M=" << M << " too large");
  ssa_gemm_kernel<T><<<grid, dim3(kTile, kRowsPerPass), 0, stream>>>(a, b, out, M, N, K, static_cast<int>(g.heads),
                                                                     nb);
  SM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool ssa_popcount_supported(const cpu::SsaGeom& g) { return g.d >= 1 && pop_plan(g).Wc > 0; }

int64_t ssa_workspace_floats(const cpu::SsaGeom& g, SsaPath forward_path) {
  return forward_path == SsaPath::Gemm ? batches(g) * g.d * g.d : 0;
}

int64_t ssa_backward_workspace_floats(const cpu::SsaGeom& g) { return 2 * batches(g) * g.d * g.d; }

template <typename T>
void ssa_forward_popcount_cuda(const uint32_t* qkv_bits, const cpu::SsaGeom& g, double scale, T* out,
                               cudaStream_t stream) {
  check_geom(g, "ssa_forward_popcount_cuda");
  const PopPlan p = pop_plan(g);
  SM_CHECK(p.Wc > 0, "ssa_forward_popcount_cuda: head size d=" << g.d << " too large for the popcount path");
  SM_CHECK(g.d * g.L < (int64_t{1} << 31), "ssa_forward_popcount_cuda: d·L = " << g.d * g.L << " overflows the int sums");
  const int64_t nb = batches(g);
  if (nb == 0) return;
  const int64_t total_words = (g.batch * 3 * g.C() * g.L + 31) / 32;
  const int blocks = static_cast<int>(std::min<int64_t>(nb, detail::kMaxBlocks));
  ssa_popcount_kernel<T><<<blocks, kThreads, p.smem_bytes, stream>>>(
      qkv_bits, total_words, nb, static_cast<int>(g.heads), static_cast<int>(g.d), g.L, p.Wc, p.Ws,
      static_cast<float>(scale), out);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void ssa_forward_gemm_cuda(const T* qkv, const cpu::SsaGeom& g, double scale, float* work, T* out,
                           cudaStream_t stream) {
  check_geom(g, "ssa_forward_gemm_cuda");
  const int64_t d = g.d, L = g.L;
  // A = V·Kᵀ
  gemm<T>(qkv_part(qkv, Kind::Values, 2, g, false), qkv_part(qkv, Kind::Values, 1, g, true),
          work_target(work, g, 1.0f), d, d, L, g, stream);
  // out = (A·Q)·scale
  gemm<T>(work_matrix(work, g, false), qkv_part(qkv, Kind::Values, 0, g, false),
          act_target(out, -1, g, static_cast<float>(scale)), d, L, d, g, stream);
}

template <typename T>
void ssa_backward_cuda(const T* dout, const T* qkv, const uint32_t* qkv_bits, const cpu::SsaGeom& g, double scale,
                       float* work, T* dqkv, cudaStream_t stream) {
  check_geom(g, "ssa_backward_cuda");
  SM_CHECK((qkv == nullptr) != (qkv_bits == nullptr), "ssa_backward_cuda: give the input as values or as bits");
  const Kind kind = qkv_bits ? Kind::Bits : Kind::Values;
  const void* src = qkv_bits ? static_cast<const void*>(qkv_bits) : static_cast<const void*>(qkv);
  const int64_t d = g.d, L = g.L;
  const float s = static_cast<float>(scale);
  float* A = work;                         // [B·heads, d, d]
  float* dA = work + batches(g) * d * d;  // [B·heads, d, d]
  const Operand q = qkv_part(src, kind, 0, g, false), k = qkv_part(src, kind, 1, g, false),
                v = qkv_part(src, kind, 2, g, false);
  const Operand qt = qkv_part(src, kind, 0, g, true), kt = qkv_part(src, kind, 1, g, true);
  const Operand dO = per_head(dout, g);
  gemm<T>(v, kt, work_target(A, g, 1.0f), d, d, L, g, stream);   // A = V·Kᵀ
  gemm<T>(dO, qt, work_target(dA, g, s), d, d, L, g, stream);     // dA = scale·dOut·Qᵀ
  gemm<T>(work_matrix(A, g, true), dO, act_target(dqkv, 0, g, s), d, L, d, g, stream);      // dQ = scale·Aᵀ·dOut
  gemm<T>(work_matrix(dA, g, false), k, act_target(dqkv, 2, g, 1.0f), d, L, d, g, stream);  // dV = dA·K
  gemm<T>(work_matrix(dA, g, true), v, act_target(dqkv, 1, g, 1.0f), d, L, d, g, stream);   // dK = dAᵀ·V
}

#define SM_SSA_INSTANTIATE(T)                                                                                     \
  template void ssa_forward_popcount_cuda<T>(const uint32_t*, const cpu::SsaGeom&, double, T*, cudaStream_t);   \
  template void ssa_forward_gemm_cuda<T>(const T*, const cpu::SsaGeom&, double, float*, T*, cudaStream_t);      \
  template void ssa_backward_cuda<T>(const T*, const T*, const uint32_t*, const cpu::SsaGeom&, double, float*, T*, \
                                     cudaStream_t);
SM_SSA_INSTANTIATE(float)
SM_SSA_INSTANTIATE(__nv_bfloat16)
SM_SSA_INSTANTIATE(__half)
#undef SM_SSA_INSTANTIATE

}  // namespace cuda
}  // namespace sm
