// gemm.cpp — own blocked GEMM (BLIS-style packing + register micro-kernel), the oneDNN
// float matmul (plain and batched with a shared left operand), and the Linear kernels
// (see gemm.h for the contracts).
//
// Own GEMM structure: for each column panel (kNc) and each reduction block (kGemmKc) the B
// panel and all of A are packed into MR-row / NR-column slivers (zero padded), then C tiles
// of kMc rows x kNt columns are shared out between threads; each micro-kernel call sums its
// MR x NR block over the reduction block in registers and stores (first block) or adds it
// into C. The arithmetic of one C element never depends on which thread computes it.
#include "spikemesh/kernels/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/cpu/onednn.h"

namespace sm::cpu {
namespace {

constexpr int64_t kMc = 96;    // rows of A per C tile (multiple of MR)
constexpr int64_t kNt = 256;   // columns per C tile (multiple of NR)
constexpr int64_t kNc = 2048;  // columns of B per packed panel (multiple of kNt)
constexpr int64_t kSerialBelow = 64 * 64 * 64;  // M*N*K under which one thread runs it

template <typename T>
struct Tile {
  static constexpr int kLanes = 32 / sizeof(T);  // one 256-bit vector
  static constexpr int MR = 6;
  static constexpr int NR = 2 * kLanes;          // float 16, double 8
};

// A per-calling-thread scratch buffer that only grows (no page faults in steady state).
template <typename T>
T* scratch(int which, size_t n) {
  thread_local std::vector<T> buffers[2];
  auto& b = buffers[which];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Apack[s][k][i] = A(row0 + s*MR + i, k0 + k), zero padded past `rows`.
template <typename T>
void pack_a_sliver(const T* A, int64_t a_rs, int64_t a_cs, int64_t row0, int64_t rows,
                   int64_t k0, int64_t kc, T* out) {
  constexpr int MR = Tile<T>::MR;
  if (rows < MR) std::fill(out, out + kc * MR, T(0));
  for (int64_t i = 0; i < rows; ++i) {
    const T* src = A + (row0 + i) * a_rs + k0 * a_cs;
    for (int64_t k = 0; k < kc; ++k) out[k * MR + i] = src[k * a_cs];
  }
}

// Bpack[k][j] = B(k0 + k, col0 + j), zero padded past `cols`.
template <typename T>
void pack_b_sliver(const T* B, int64_t b_rs, int64_t b_cs, int64_t k0, int64_t kc, int64_t col0,
                   int64_t cols, T* out) {
  constexpr int NR = Tile<T>::NR;
  if (cols < NR) std::fill(out, out + kc * NR, T(0));
  if (b_cs == 1) {
    for (int64_t k = 0; k < kc; ++k) {
      const T* src = B + (k0 + k) * b_rs + col0;
      for (int64_t j = 0; j < cols; ++j) out[k * NR + j] = src[j];
    }
  } else {
    for (int64_t j = 0; j < cols; ++j) {
      const T* src = B + k0 * b_rs + (col0 + j) * b_cs;
      for (int64_t k = 0; k < kc; ++k) out[k * NR + j] = src[k * b_rs];
    }
  }
}

// C[0:mr, 0:nr] (=|+=) sum_k a[k][i] * b[k][j], summed in registers in increasing k.
// Vec is an unaligned 256-bit vector of T; the accumulators never leave registers in the
// k loop (no address of them is taken).
template <typename T>
void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict c,
                  int64_t ldc, int mr, int nr, bool overwrite) {
  constexpr int MR = Tile<T>::MR, NR = Tile<T>::NR, L = Tile<T>::kLanes, NV = NR / L;
  typedef T Vec __attribute__((vector_size(32), aligned(alignof(T))));
  Vec acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = Vec{};
  for (int64_t k = 0; k < kc; ++k) {
    Vec bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = *reinterpret_cast<const Vec*>(b + k * NR + v * L);
    for (int i = 0; i < MR; ++i) {
      const T ai = a[k * MR + i];
      for (int v = 0; v < NV; ++v) acc[i][v] += bv[v] * ai;
    }
  }
  if (mr == MR && nr == NR) {
    for (int i = 0; i < MR; ++i) {
      Vec* row = reinterpret_cast<Vec*>(c + i * ldc);
      for (int v = 0; v < NV; ++v) row[v] = overwrite ? acc[i][v] : row[v] + acc[i][v];
    }
    return;
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      const T r = acc[i][j / L][j % L];
      c[i * ldc + j] = overwrite ? r : c[i * ldc + j] + r;
    }
}

// The product over packed operands: A's slivers for reduction block [pc, pc + kc) come from
// a_block(pc, kc), called by every thread of the region: packed there (a worksharing loop),
// or already packed by the caller; either way it ends in a barrier.
template <typename T, typename ABlock>
void gemm_blocked(int64_t M, int64_t N, int64_t K, ABlock&& a_block, const T* B, int64_t b_rs, int64_t b_cs, T* C,
                  int64_t ldc, bool accumulate) {
  constexpr int MR = Tile<T>::MR, NR = Tile<T>::NR;
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    return;
  }
  const int64_t kc_max = std::min(K, kGemmKc);
  T* bpack = scratch<T>(1, static_cast<size_t>(((std::min(N, kNc) + NR - 1) / NR) * NR * kc_max));
  const bool parallel = M * N * K >= kSerialBelow && omp_get_max_threads() > 1 && !omp_in_parallel();

  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc);
    const int64_t n_slivers = (nc + NR - 1) / NR;
    const int64_t row_tiles = (M + kMc - 1) / kMc, col_tiles = (nc + kNt - 1) / kNt;
    for (int64_t pc = 0; pc < K; pc += kGemmKc) {
      const int64_t kc = std::min(kGemmKc, K - pc);
      const bool overwrite = !accumulate && pc == 0;
#pragma omp parallel if (parallel)
      {
#pragma omp for schedule(static) nowait
        for (int64_t s = 0; s < n_slivers; ++s)
          pack_b_sliver(B, b_rs, b_cs, pc, kc, jc + s * NR, std::min<int64_t>(NR, nc - s * NR),
                        bpack + s * NR * kc);
        const T* apack = a_block(pc, kc);
#pragma omp for collapse(2) schedule(static)
        for (int64_t rt = 0; rt < row_tiles; ++rt) {
          for (int64_t ct = 0; ct < col_tiles; ++ct) {
            const int64_t j_end = std::min(nc, (ct + 1) * kNt);
            const int64_t i_end = std::min(M, (rt + 1) * kMc);
            for (int64_t j = ct * kNt; j < j_end; j += NR) {
              const T* bs = bpack + (j / NR) * NR * kc;
              for (int64_t i = rt * kMc; i < i_end; i += MR) {
                micro_kernel<T>(kc, apack + (i / MR) * MR * kc, bs, C + i * ldc + jc + j, ldc,
                                static_cast<int>(std::min<int64_t>(MR, M - i)),
                                static_cast<int>(std::min<int64_t>(NR, nc - j)), overwrite);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
          int64_t b_rs, int64_t b_cs, T* C, int64_t ldc, bool accumulate) {
  constexpr int MR = Tile<T>::MR;
  const int64_t m_slivers = (M + MR - 1) / MR;
  T* apack = M > 0 && N > 0 && K > 0 ? scratch<T>(0, static_cast<size_t>(m_slivers * MR * std::min(K, kGemmKc)))
                                     : nullptr;
  auto pack_a = [&](int64_t pc, int64_t kc) {  // inside the product's parallel region (or serial)
#pragma omp for schedule(static)
    for (int64_t s = 0; s < m_slivers; ++s)
      pack_a_sliver(A, a_rs, a_cs, s * MR, std::min<int64_t>(MR, M - s * MR), pc, kc, apack + s * MR * kc);
    return static_cast<const T*>(apack);
  };
  gemm_blocked<T>(M, N, K, pack_a, B, b_rs, b_cs, C, ldc, accumulate);
}

int64_t gemm_pack_rows() { return Tile<float>::MR; }

void gemm_packed_a(int64_t M, int64_t N, int64_t K, const float* packed_a, const float* B, int64_t b_rs,
                   int64_t b_cs, float* C, int64_t ldc, bool accumulate) {
  constexpr int MR = Tile<float>::MR;
  const int64_t rows = (M + MR - 1) / MR * MR;
  auto packed_block = [&](int64_t pc, int64_t) {
#pragma omp barrier
    return packed_a + rows * pc;
  };
  gemm_blocked<float>(M, N, K, packed_block, B, b_rs, b_cs, C, ldc, accumulate);
}

namespace {

// One cached oneDNN f32 matmul primitive and its memory descriptors.
struct DnnlMatmul {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c;
};

// Plain matmuls, keyed by (M, N, K, strides, ldc, accumulate).
DnnlCache<DnnlMatmul>& matmul_cache() {
  static DnnlCache<DnnlMatmul> cache;
  return cache;
}

// Batched matmuls with a shared left operand, keyed by (batch, M, N, K, A strides).
DnnlCache<DnnlMatmul>& batched_cache() {
  static DnnlCache<DnnlMatmul> cache;
  return cache;
}

void dnnl_matmul_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                     const float* B, int64_t b_rs, int64_t b_cs, float* C, int64_t ldc,
                     bool accumulate) {
  using dt = dnnl::memory::data_type;
  auto entry = matmul_cache().get({M, N, K, a_rs, a_cs, b_rs, b_cs, ldc, accumulate}, [&] {
    DnnlMatmul m;
    m.a = dnnl::memory::desc({M, K}, dt::f32, {a_rs, a_cs});
    m.b = dnnl::memory::desc({K, N}, dt::f32, {b_rs, b_cs});
    m.c = dnnl::memory::desc({M, N}, dt::f32, {ldc, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    SM_DNNL_CHECK("matmul primitive creation", {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m.a, m.b, m.c), attr, dnnl_engine());
      note_dnnl_implementation("matmul", pd.impl_info_str());
      m.prim = dnnl::matmul(pd);
    });
    return m;
  });
  auto& eng = dnnl_engine();
  dnnl::memory a(entry->a, eng, const_cast<float*>(A)), b(entry->b, eng, const_cast<float*>(B)),
      c(entry->c, eng, C);
  auto& s = dnnl_stream();
  SM_DNNL_CHECK("matmul", entry->prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}}));
  s.wait();
}

}  // namespace

template <typename T>
void matmul(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
            int64_t b_rs, int64_t b_cs, T* C, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    if (M > 0 && N > 0 && K > 0) {
      dnnl_matmul_f32(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, C, ldc, accumulate);
      return;
    }
  }
  gemm<T>(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, C, ldc, accumulate);
}

namespace {

// (A per-row bias {1, M, 1} would make oneDNN 2.6 fall back to its reference matmul, so the
// bias is added by the caller.)
void dnnl_matmul_shared_left_f32(int64_t batch, int64_t M, int64_t N, int64_t K, const float* A,
                                 int64_t a_rs, int64_t a_cs, const float* B, float* C) {
  using dt = dnnl::memory::data_type;
  std::shared_ptr<const DnnlMatmul> entry;
  SM_DNNL_CHECK("batched matmul primitive creation",
                entry = batched_cache().get({batch, M, N, K, a_rs, a_cs}, [&] {
                  DnnlMatmul m;
                  m.a = dnnl::memory::desc({1, M, K}, dt::f32, {M * K, a_rs, a_cs});
                  m.b = dnnl::memory::desc({batch, K, N}, dt::f32, {K * N, N, 1});
                  m.c = dnnl::memory::desc({batch, M, N}, dt::f32, {M * N, N, 1});
                  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m.a, m.b, m.c), dnnl_engine());
                  note_dnnl_implementation("batched matmul", pd.impl_info_str());
                  m.prim = dnnl::matmul(pd);
                  return m;
                }));
  auto& eng = dnnl_engine();
  auto& s = dnnl_stream();
  SM_DNNL_CHECK("batched matmul", {
    entry->prim.execute(s, {{DNNL_ARG_SRC, dnnl::memory(entry->a, eng, const_cast<float*>(A))},
                            {DNNL_ARG_WEIGHTS, dnnl::memory(entry->b, eng, const_cast<float*>(B))},
                            {DNNL_ARG_DST, dnnl::memory(entry->c, eng, C)}});
    s.wait();
  });
}

}  // namespace

template <typename T>
void matmul_shared_left(int64_t batch, int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs,
                        int64_t a_cs, const T* B, const T* row_bias, T* C) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  bool done = false;
  if constexpr (std::is_same_v<T, float>) {
    if (K > 0) {
      dnnl_matmul_shared_left_f32(batch, M, N, K, A, a_rs, a_cs, B, C);
      done = true;
    }
  }
  if (!done)
    for (int64_t b = 0; b < batch; ++b) gemm<T>(M, N, K, A, a_rs, a_cs, B + b * K * N, N, 1, C + b * M * N, N, false);
  if (row_bias) {
#pragma omp parallel for schedule(static) if (batch * M * N > 32768)
    for (int64_t bm = 0; bm < batch * M; ++bm) {
      const T r = row_bias[bm % M];
      T* c = C + bm * N;
      for (int64_t n = 0; n < N; ++n) c[n] += r;
    }
  }
}

template <typename T>
void channel_bias_grad(int64_t batch, int64_t channels, int64_t plane, const T* dy, T* dbias) {
  using Acc = double;
#pragma omp parallel for schedule(static) if (batch * channels * plane > 32768)
  for (int64_t c = 0; c < channels; ++c) {
    Acc sum = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const T* p = dy + (b * channels + c) * plane;
      for (int64_t i = 0; i < plane; ++i) sum += p[i];
    }
    dbias[c] = static_cast<T>(dbias[c] + sum);
  }
}

template <typename T>
void linear_forward(int64_t M, int64_t Fin, int64_t Fout, const T* x, const T* w, const T* bias,
                    T* y) {
  // y [M, Fout] = x [M, Fin] · wᵀ [Fin, Fout]
  matmul<T>(M, Fout, Fin, x, Fin, 1, w, 1, Fin, y, Fout, false);
  if (bias) {
#pragma omp parallel for schedule(static) if (M * Fout > 32768)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o = 0; o < Fout; ++o) y[m * Fout + o] += bias[o];
  }
}

template <typename T>
void linear_backward_data(int64_t M, int64_t Fin, int64_t Fout, const T* dy, const T* w, T* dx) {
  // dx [M, Fin] = dy [M, Fout] · w [Fout, Fin]
  matmul<T>(M, Fin, Fout, dy, Fout, 1, w, Fin, 1, dx, Fin, false);
}

template <typename T>
void linear_backward_weights(int64_t M, int64_t Fin, int64_t Fout, const T* x, const T* dy, T* dw,
                             T* dbias) {
  // dw [Fout, Fin] += dyᵀ [Fout, M] · x [M, Fin]
  matmul<T>(Fout, Fin, M, dy, 1, Fout, x, Fin, 1, dw, Fin, true);
  if (dbias) {
    // Column sums of dy [M, Fout]: each output feature summed by one thread in row order.
#pragma omp parallel for schedule(static) if (M * Fout > 32768)
    for (int64_t o = 0; o < Fout; ++o) {
      double sum = 0;
      for (int64_t m = 0; m < M; ++m) sum += dy[m * Fout + o];
      dbias[o] = static_cast<T>(dbias[o] + sum);
    }
  }
}

#define SM_INSTANTIATE(T)                                                                         \
  template void gemm<T>(int64_t, int64_t, int64_t, const T*, int64_t, int64_t, const T*, int64_t, \
                        int64_t, T*, int64_t, bool);                                              \
  template void matmul<T>(int64_t, int64_t, int64_t, const T*, int64_t, int64_t, const T*,         \
                          int64_t, int64_t, T*, int64_t, bool);                                     \
  template void matmul_shared_left<T>(int64_t, int64_t, int64_t, int64_t, const T*, int64_t,      \
                                      int64_t, const T*, const T*, T*);                           \
  template void channel_bias_grad<T>(int64_t, int64_t, int64_t, const T*, T*);                    \
  template void linear_forward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*);   \
  template void linear_backward_data<T>(int64_t, int64_t, int64_t, const T*, const T*, T*);       \
  template void linear_backward_weights<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, T*);
SM_INSTANTIATE(float)
SM_INSTANTIATE(double)
#undef SM_INSTANTIATE

}  // namespace sm::cpu
