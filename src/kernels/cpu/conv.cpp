// conv.cpp — own 2-D convolution (im2col + the blocked GEMM of gemm.h) and the dispatch of
// the production entry points (see conv.h for layouts and contracts).
//
// Per sample n: col[Cin·K·K, Ho·Wo] = im2col(x[n]);
//   forward       y[n]  = w[Cout, CKK] · col                 (+ bias per row)
//   data          dcol  = wᵀ[CKK, Cout] · dy[n];  dx[n] = col2im(dcol)
//   weights       dw   += dy[n][Cout, HoWo] · colᵀ            (samples in order 0..batch-1)
// A 1x1 / stride 1 / pad 0 convolution skips im2col (col is x[n] itself).
// Determinism: forward/data split samples between threads (or, for small batches, run the
// samples in order with a parallel GEMM — both give identical bits); the weight gradient
// splits input channels (= disjoint dw columns) between threads, each running all samples
// in order. No reduction is ever split, so results never depend on the thread count.
// The 1×1 channel convolution (Conv1d) entry points are at the end.
#include "spikemesh/kernels/cpu/conv.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cpu/gemm.h"

namespace sm::cpu {
namespace {

bool is_pointwise(const Conv2dGeometry& g) {
  return g.kernel == 1 && g.stride == 1 && g.padding == 0;
}

// col [(c1−c0)·K·K, Ho·Wo] = the im2col rows of channels [c0, c1) of one sample
// x [Cin, H, W]; rows may be split between threads.
template <typename T>
void im2col(const Conv2dGeometry& g, const T* x, T* col, bool parallel, int64_t c0, int64_t c1) {
  const int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width(), H = g.height, W = g.width;
  const int64_t rows = (c1 - c0) * K * K;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t c = c0 + r / (K * K), kh = (r / K) % K, kw = r % K;
    const T* plane = x + c * H * W;
    T* out = col + r * Ho * Wo;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      const int64_t ih = oh * g.stride - g.padding + kh;
      T* orow = out + oh * Wo;
      if (ih < 0 || ih >= H) {
        std::fill(orow, orow + Wo, T(0));
        continue;
      }
      const T* irow = plane + ih * W;
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const int64_t iw = ow * g.stride - g.padding + kw;
        orow[ow] = (iw >= 0 && iw < W) ? irow[iw] : T(0);
      }
    }
  }
}

template <typename T>
void im2col(const Conv2dGeometry& g, const T* x, T* col, bool parallel) {
  im2col(g, x, col, parallel, 0, g.in_channels);
}

// dx [Cin, H, W] = col2im(dcol [Cin·K·K, Ho·Wo]); each channel's plane is summed by one
// thread in the fixed order (kh, kw, oh, ow).
template <typename T>
void col2im(const Conv2dGeometry& g, const T* dcol, T* dx, bool parallel) {
  const int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width(), H = g.height, W = g.width;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < g.in_channels; ++c) {
    T* plane = dx + c * H * W;
    std::fill(plane, plane + H * W, T(0));
    for (int64_t kh = 0; kh < K; ++kh) {
      for (int64_t kw = 0; kw < K; ++kw) {
        const T* in = dcol + ((c * K + kh) * K + kw) * Ho * Wo;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const int64_t ih = oh * g.stride - g.padding + kh;
          if (ih < 0 || ih >= H) continue;
          T* prow = plane + ih * W;
          const T* irow = in + oh * Wo;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const int64_t iw = ow * g.stride - g.padding + kw;
            if (iw >= 0 && iw < W) prow[iw] += irow[ow];
          }
        }
      }
    }
  }
}

template <typename T>
void add_bias_rows(const T* bias, int64_t rows, int64_t cols, T* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const T b = bias[r];
    T* row = y + r * cols;
    for (int64_t i = 0; i < cols; ++i) row[i] += b;
  }
}

// Split samples between threads when there are enough of them to keep every thread busy.
bool split_samples(int64_t batch) {
  const int threads = omp_get_max_threads();
  return threads > 1 && !omp_in_parallel() && batch >= 2 * threads;
}

// One im2col buffer per worker thread: [workers, CKK·Ho·Wo], from the caching allocator.
template <typename T>
Tensor col_buffers(const Conv2dGeometry& g, int workers) {
  const int64_t n = g.in_channels * g.kernel * g.kernel * g.out_height() * g.out_width();
  return Tensor::empty({workers, n}, DTypeOf<T>::value);
}

// Runs one_sample(n, col, parallel_inner) for n = 0..batch-1 (forward and data passes).
// `col` is the sample's im2col buffer (null for a pointwise convolution). With enough
// samples they are split between threads, each with its own buffer and parallel_inner =
// false; otherwise they run in order sharing one buffer, with parallel_inner = true.
template <typename T, typename OneSample>
void run_samples(const Conv2dGeometry& g, OneSample&& one_sample) {
  const int64_t ckk = g.in_channels * g.kernel * g.kernel, P = g.out_height() * g.out_width();
  const bool direct = is_pointwise(g);
  const bool per_thread = split_samples(g.batch);
  const int workers = per_thread ? omp_get_max_threads() : 1;
  Tensor cols = direct ? Tensor() : col_buffers<T>(g, workers);
  T* col_base = direct ? nullptr : cols.data<T>();
  if (per_thread) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < g.batch; ++n)
      one_sample(n, direct ? nullptr : col_base + omp_get_thread_num() * ckk * P, false);
  } else {
    for (int64_t n = 0; n < g.batch; ++n) one_sample(n, col_base, true);
  }
}

}  // namespace

template <typename T>
void conv2d_forward_im2col(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t ckk = g.in_channels * g.kernel * g.kernel, P = g.out_height() * g.out_width();
  const int64_t in_step = g.in_channels * g.height * g.width, out_step = g.out_channels * P;
  auto one_sample = [&](int64_t n, T* col, bool parallel_inner) {
    const T* src = x + n * in_step;
    if (!is_pointwise(g)) {
      im2col(g, src, col, parallel_inner);
      src = col;
    }
    T* dst = y + n * out_step;
    gemm<T>(g.out_channels, P, ckk, w, ckk, 1, src, P, 1, dst, P, false);
    if (bias) add_bias_rows(bias, g.out_channels, P, dst);
  };
  run_samples<T>(g, one_sample);
}

template <typename T>
void conv2d_backward_data_im2col(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  const int64_t ckk = g.in_channels * g.kernel * g.kernel, P = g.out_height() * g.out_width();
  const int64_t in_step = g.in_channels * g.height * g.width, out_step = g.out_channels * P;
  auto one_sample = [&](int64_t n, T* dcol, bool parallel_inner) {
    T* dst = is_pointwise(g) ? dx + n * in_step : dcol;
    // dcol [CKK, P] = wᵀ [CKK, Cout] · dy[n] [Cout, P]
    gemm<T>(ckk, P, g.out_channels, w, 1, ckk, dy + n * out_step, P, 1, dst, P, false);
    if (!is_pointwise(g)) col2im(g, dcol, dx + n * in_step, parallel_inner);
  };
  run_samples<T>(g, one_sample);
}

// Threads own disjoint input-channel ranges [c0, c1), i.e. disjoint column blocks of
// dw [Cout, CKK]; each builds the im2col rows of its channels and runs the samples in
// order, so no barrier is needed inside the batch loop and no dw element is shared.
template <typename T>
void conv2d_backward_weights_im2col(const Conv2dGeometry& g, const T* x, const T* dy, T* dw,
                                    T* dbias) {
  const int64_t kk = g.kernel * g.kernel, ckk = g.in_channels * kk;
  const int64_t P = g.out_height() * g.out_width();
  const int64_t in_step = g.in_channels * g.height * g.width, out_step = g.out_channels * P;
  const bool direct = is_pointwise(g);
  const int parts = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), g.in_channels));
  const int64_t max_channels = (g.in_channels + parts - 1) / parts;
  Tensor cols = direct ? Tensor() : Tensor::empty({parts, max_channels * kk * P}, DTypeOf<T>::value);
#pragma omp parallel num_threads(parts) if (parts > 1)
  {
    const int part = omp_get_thread_num(), nparts = omp_get_num_threads();
    const int64_t c0 = g.in_channels * part / nparts, c1 = g.in_channels * (part + 1) / nparts;
    T* col = direct ? nullptr : cols.data<T>() + part * max_channels * kk * P;
    for (int64_t n = 0; n < g.batch && c1 > c0; ++n) {
      const T* src = x + n * in_step + c0 * g.height * g.width;  // direct: rows c0.. of x[n]
      if (!direct) {
        im2col(g, x + n * in_step, col, false, c0, c1);
        src = col;
      }
      // dw[:, c0·kk : c1·kk] += dy[n] [Cout, P] · colᵀ [P, (c1−c0)·kk]
      gemm<T>(g.out_channels, (c1 - c0) * kk, P, dy + n * out_step, P, 1, src, 1, P, dw + c0 * kk, ckk,
              true);
    }
  }
  if (dbias) channel_bias_grad<T>(g.batch, g.out_channels, P, dy, dbias);
}

// ---- production dispatch ----------------------------------------------------------------

template <typename T>
void conv2d_forward(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>)
    conv2d_forward_dnnl(g, x, w, bias, y);
  else
    conv2d_forward_im2col<T>(g, x, w, bias, y);
}

template <typename T>
void conv2d_backward_data(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  if constexpr (std::is_same_v<T, float>)
    conv2d_backward_data_dnnl(g, dy, w, dx);
  else
    conv2d_backward_data_im2col<T>(g, dy, w, dx);
}

template <typename T>
void conv2d_backward_weights(const Conv2dGeometry& g, const T* x, const T* dy, T* dw, T* dbias) {
  if constexpr (std::is_same_v<T, float>)
    conv2d_backward_weights_dnnl(g, x, dy, dw, dbias);
  else
    conv2d_backward_weights_im2col<T>(g, x, dy, dw, dbias);
}

// ---- 1×1 convolution over channels -------------------------------------------------------

namespace {
Conv2dGeometry pointwise_geometry(int64_t batch, int64_t cin, int64_t cout, int64_t len) {
  Conv2dGeometry g;
  g.batch = batch;
  g.in_channels = cin;
  g.height = 1;
  g.width = len;
  g.out_channels = cout;
  return g;  // kernel 1, stride 1, padding 0
}
}  // namespace

template <typename T>
void conv1x1_forward(int64_t batch, int64_t cin, int64_t cout, int64_t len, const T* x, const T* w,
                     const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>)
    matmul_shared_left<float>(batch, cout, len, cin, w, cin, 1, x, bias, y);  // y[b] = w · x[b]
  else
    conv2d_forward<T>(pointwise_geometry(batch, cin, cout, len), x, w, bias, y);
}

template <typename T>
void conv1x1_backward_data(int64_t batch, int64_t cin, int64_t cout, int64_t len, const T* dy,
                           const T* w, T* dx) {
  if constexpr (std::is_same_v<T, float>)
    matmul_shared_left<float>(batch, cin, len, cout, w, 1, cin, dy, nullptr, dx);  // dx[b] = wᵀ · dy[b]
  else
    conv2d_backward_data<T>(pointwise_geometry(batch, cin, cout, len), dy, w, dx);
}

template <typename T>
void conv1x1_backward_weights(int64_t batch, int64_t cin, int64_t cout, int64_t len, const T* x,
                              const T* dy, T* dw, T* dbias) {
  if constexpr (std::is_same_v<T, float>) {
    // dw [Cout, Cin] += dy[b] [Cout, L] · x[b]ᵀ [L, Cin], one matmul per sample in sample order:
    // no re-laying of x and dy into oneDNN's blocked convolution layouts (docs/results.md).
    for (int64_t b = 0; b < batch; ++b)
      matmul<float>(cout, cin, len, dy + b * cout * len, len, 1, x + b * cin * len, 1, len, dw, cin, true);
    if (dbias) channel_bias_grad<float>(batch, cout, len, dy, dbias);
  } else {
    conv2d_backward_weights<T>(pointwise_geometry(batch, cin, cout, len), x, dy, dw, dbias);
  }
}

#define SM_INSTANTIATE(T)                                                                        \
  template void conv2d_forward_im2col<T>(const Conv2dGeometry&, const T*, const T*, const T*,   \
                                         T*);                                                    \
  template void conv2d_backward_data_im2col<T>(const Conv2dGeometry&, const T*, const T*, T*);   \
  template void conv2d_backward_weights_im2col<T>(const Conv2dGeometry&, const T*, const T*, T*, \
                                                  T*);            \
  template void conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*);      \
  template void conv2d_backward_data<T>(const Conv2dGeometry&, const T*, const T*, T*);          \
  template void conv2d_backward_weights<T>(const Conv2dGeometry&, const T*, const T*, T*, T*);  \
  template void conv1x1_forward<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*,       \
                                   const T*, T*);                                                \
  template void conv1x1_backward_data<T>(int64_t, int64_t, int64_t, int64_t, const T*, const T*, \
                                         T*);                                                    \
  template void conv1x1_backward_weights<T>(int64_t, int64_t, int64_t, int64_t, const T*,        \
                                            const T*, T*, T*);
SM_INSTANTIATE(float)
SM_INSTANTIATE(double)
#undef SM_INSTANTIATE

}  // namespace sm::cpu
