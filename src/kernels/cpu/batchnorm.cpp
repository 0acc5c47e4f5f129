// batchnorm.cpp — CPU batch-norm kernels (see kernels/cpu/batchnorm.h).
//
// Reductions split the outer (T·N) rows into fixed-size chunks; each (channel, chunk)
// pair is one OpenMP work item writing its own partial sums, and the partials are added
// per channel in chunk order. The chunking depends only on the shape, so sums are
// bit-identical for any thread count. Element-wise passes run over (row, channel) pairs.
// bn_normalize rounds (x - μ)·a + β with one explicit fma, as the neuron kernels' fused
// normalisation does (kernels/cpu/neuron.h NeuronInputAffine): fused and unfused agree bitwise.
#include "spikemesh/kernels/cpu/batchnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sm::cpu {
namespace {

constexpr int64_t kChunkElems = 1 << 15;  // elements of one channel per reduction chunk

struct Chunking {
  int64_t rows_per_chunk, chunks;
};

Chunking chunking(const BnShape& s) {
  int64_t rows = std::max<int64_t>(1, kChunkElems / std::max<int64_t>(1, s.inner));
  rows = std::min(rows, std::max<int64_t>(1, s.outer));
  return {rows, (s.outer + rows - 1) / rows};
}

// Two per-channel sums of elem(p, c) over the rows and inner positions. `row_sum(c, p,
// n, a0, a1)` accumulates the n contiguous inner elements starting at flat index p.
template <class RowSum>
void reduce_two_per_channel(const BnShape& s, RowSum row_sum, double* out0, double* out1) {
  const Chunking ch = chunking(s);
  const int64_t C = s.channels;
  std::vector<double> part0(static_cast<size_t>(C * ch.chunks));
  std::vector<double> part1(part0.size());
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t k = 0; k < ch.chunks; ++k) {
      const int64_t b0 = k * ch.rows_per_chunk;
      const int64_t b1 = std::min(s.outer, b0 + ch.rows_per_chunk);
      double a0 = 0.0, a1 = 0.0;
      for (int64_t b = b0; b < b1; ++b) row_sum(c, (b * C + c) * s.inner, s.inner, a0, a1);
      part0[c * ch.chunks + k] = a0;
      part1[c * ch.chunks + k] = a1;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    double a0 = 0.0, a1 = 0.0;
    for (int64_t k = 0; k < ch.chunks; ++k) {
      a0 += part0[c * ch.chunks + k];
      a1 += part1[c * ch.chunks + k];
    }
    out0[c] = a0;
    out1[c] = a1;
  }
}

// Calls plane(c, p, n) for every (row, channel) pair, rows split between threads: the n
// contiguous inner elements of channel c in that row start at flat index p.
template <class Plane>
void for_each_plane(const BnShape& s, Plane plane) {
  const int64_t C = s.channels, n = s.inner;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t r = 0; r < s.outer; ++r) {
    for (int64_t c = 0; c < C; ++c) plane(c, (r * C + c) * n, n);
  }
}

}  // namespace

template <typename T>
void bn_shifted_moments(const T* x, const BnShape& s, const double* shift, double* sum,
                        double* sumsq) {
  auto row = [&](int64_t c, int64_t p, int64_t n, double& a0, double& a1) {
    const double k = shift[c];
    const T* xp = x + p;
    double s0 = 0.0, s1 = 0.0;
#pragma omp simd reduction(+ : s0, s1)
    for (int64_t i = 0; i < n; ++i) {
      const double v = static_cast<double>(xp[i]) - k;
      s0 += v;
      s1 += v * v;
    }
    a0 += s0;
    a1 += s1;
  };
  reduce_two_per_channel(s, row, sum, sumsq);
}

template <typename T>
void bn_backward_moments(const T* dy, const T* x, const BnShape& s, const double* center,
                         double* sum_dy, double* sum_dy_xc) {
  auto row = [&](int64_t c, int64_t p, int64_t n, double& a0, double& a1) {
    const double k = center[c];
    const T* xp = x + p;
    const T* gp = dy + p;
    double s0 = 0.0, s1 = 0.0;
#pragma omp simd reduction(+ : s0, s1)
    for (int64_t i = 0; i < n; ++i) {
      const double g = static_cast<double>(gp[i]);
      s0 += g;
      s1 += g * (static_cast<double>(xp[i]) - k);
    }
    a0 += s0;
    a1 += s1;
  };
  reduce_two_per_channel(s, row, sum_dy, sum_dy_xc);
}

template <typename T>
void bn_normalize(const T* x, const BnShape& s, const double* center, const double* scale,
                  const double* offset, T* y) {
  for_each_plane(s, [&](int64_t c, int64_t p, int64_t n) {
    const T m = static_cast<T>(center[c]);
    const T a = static_cast<T>(scale[c]);
    const T o = static_cast<T>(offset[c]);
#pragma omp simd
    for (int64_t i = p; i < p + n; ++i) y[i] = std::fma(x[i] - m, a, o);  // as NeuronInputAffine
  });
}

template <typename T>
void bn_backward_input(const T* dy, const T* x, const BnShape& s, const double* center,
                       const double* a, const double* b, const double* d, T* dx) {
  for_each_plane(s, [&](int64_t c, int64_t p, int64_t n) {
    const T ac = static_cast<T>(a[c]);
    const T bc = static_cast<T>(b[c]);
    const T dc = static_cast<T>(d[c]);
    const T* gp = dy + p;
    T* op = dx + p;
    if (x == nullptr || bc == T(0)) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) op[i] = ac * gp[i] + dc;
    } else {
      const T m = static_cast<T>(center[c]);
      const T* xp = x + p;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) op[i] = ac * gp[i] + bc * (xp[i] - m) + dc;
    }
  });
}

#define SM_BN_INSTANTIATE(T)                                                                \
  template void bn_shifted_moments<T>(const T*, const BnShape&, const double*, double*,    \
                                      double*);                                            \
  template void bn_normalize<T>(const T*, const BnShape&, const double*, const double*,    \
                                const double*, T*);                                        \
  template void bn_backward_moments<T>(const T*, const T*, const BnShape&, const double*,  \
                                       double*, double*);                                  \
  template void bn_backward_input<T>(const T*, const T*, const BnShape&, const double*,    \
                                     const double*, const double*, const double*, T*);
SM_BN_INSTANTIATE(float)
SM_BN_INSTANTIATE(double)
#undef SM_BN_INSTANTIATE

}  // namespace sm::cpu
