// gemm.h — dense matrix products on the CPU: our own deterministic blocked GEMM (any
// scalar), a matmul that runs float through oneDNN and double through our GEMM, and the
// Linear kernels built on it.
//
// Operand convention: a matrix operand is a pointer plus a row stride and a column stride,
// so element (r, c) of A is A[r * a_rs + c * a_cs]; a transposed operand is the same
// buffer with the strides swapped. C is row-major with leading dimension ldc.
//
// Determinism (own GEMM): every C element is reduced in one fixed order — k in blocks of
// kGemmKc, each block summed in registers from zero in increasing k, blocks added to C in
// order — whatever the thread count or tiling; the parallel split is over C tiles only.
#pragma once
#include <cstdint>

namespace sm::cpu {

constexpr int64_t kGemmKc = 256;  // reduction block of the own GEMM (part of its rounding)

// C[M, N] = A[M, K] · B[K, N]  (accumulate: C += A · B). Own code, OpenMP over C tiles.
template <typename T>
void gemm(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
          int64_t b_rs, int64_t b_cs, T* C, int64_t ldc, bool accumulate);

// A packed once for many products with different right operands (the Winograd kernels' filter
// transforms: one A per transformed position, one product per block of tiles). Layout: per
// reduction block of kGemmKc (last one shorter), per sliver of gemm_pack_rows() rows, per k,
// the sliver's rows; rows past M zero. gemm_packed_a's result is bitwise gemm's.
int64_t gemm_pack_rows();  // rows per sliver of the micro-kernel (float)
inline int64_t packed_a_size(int64_t M, int64_t K) {
  const int64_t mr = gemm_pack_rows();
  return (M + mr - 1) / mr * mr * K;
}
// Where element (row, col) of an M × K matrix lies in its packed form.
inline int64_t packed_a_index(int64_t M, int64_t K, int64_t row, int64_t col) {
  const int64_t mr = gemm_pack_rows(), rows = (M + mr - 1) / mr * mr;
  const int64_t k0 = col / kGemmKc * kGemmKc, kc = K - k0 < kGemmKc ? K - k0 : kGemmKc;
  return rows * k0 + (row / mr) * mr * kc + (col - k0) * mr + row % mr;
}
// As gemm<float>, A given packed.
void gemm_packed_a(int64_t M, int64_t N, int64_t K, const float* packed_a, const float* B, int64_t b_rs,
                   int64_t b_cs, float* C, int64_t ldc, bool accumulate);

// Same contract; float -> oneDNN matmul (primitive cached per shape/strides), double -> gemm.
template <typename T>
void matmul(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
            int64_t b_rs, int64_t b_cs, T* C, int64_t ldc, bool accumulate);

// Batched product with a shared left operand, for b < batch:
//   C[b] [M, N] = A [M, K] · B[b] [K, N]  (+ row_bias[m] on row m when row_bias != nullptr)
// A strided as above; B[b] = B + b·K·N and C[b] = C + b·M·N are row-major; C overwritten.
// float -> one oneDNN batched matmul (A broadcast over the batch); double -> gemm per b.
template <typename T>
void matmul_shared_left(int64_t batch, int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs,
                        int64_t a_cs, const T* B, const T* row_bias, T* C);

// Linear on rows: x [M, Fin], w [Fout, Fin], bias [Fout] or nullptr, y [M, Fout].
// y = x · wᵀ + bias (y overwritten).
template <typename T>
void linear_forward(int64_t M, int64_t Fin, int64_t Fout, const T* x, const T* w, const T* bias,
                    T* y);
// dx [M, Fin] = dy [M, Fout] · w (dx overwritten).
template <typename T>
void linear_backward_data(int64_t M, int64_t Fin, int64_t Fout, const T* dy, const T* w, T* dx);
// dw [Fout, Fin] += dyᵀ · x; dbias [Fout] += column sums of dy (dbias may be nullptr).
template <typename T>
void linear_backward_weights(int64_t M, int64_t Fin, int64_t Fout, const T* x, const T* dy, T* dw,
                             T* dbias);

// dbias[c] += sum over b < batch, p < plane of dy[(b * C + c) * plane + p] (dy [batch, C, plane]).
// Deterministic (one thread per channel, fixed order); float sums in double.
template <typename T>
void channel_bias_grad(int64_t batch, int64_t channels, int64_t plane, const T* dy, T* dbias);

}  // namespace sm::cpu
