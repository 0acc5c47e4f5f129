// pool.cu (kernels/cuda) — 2-d max / average pooling (see kernels/cuda/pool.h; the CPU
// kernels kernels/cpu/pool.cpp are the reference).
// Forward: one thread per output element, window visited in row-major order (the CPU's
// general path; its k=2, s=2 fast path computes the same values in the same order).
// Backward: one thread per input pixel gathers from the windows that contain it, rows i
// then columns j ascending — the CPU's accumulation order — so every dx element is written
// once, without atomics.
#include <cmath>

#include "common.cuh"
#include "spikemesh/kernels/cuda/pool.h"

namespace sm {
namespace cuda {
namespace {

struct Geom {
  int64_t P, H, W, Ho, Wo;
  int k, st, pad;
};

Geom geom(const cpu::PoolGeom& g) {
  return {g.planes, g.h, g.w, g.out_h(), g.out_w(), g.kernel, g.stride, g.padding};
}

void check_geom(const cpu::PoolGeom& g, const char* who) {
  SM_CHECK(g.kernel >= 1 && g.stride >= 1 && g.padding >= 0 && g.planes >= 0 && g.h >= 1 && g.w >= 1,
           who << ": bad geometry k=" << g.kernel << " s=" << g.stride << " pad=" << g.padding
               << " H=" << g.h << " W=" << g.w);
  SM_CHECK(2 * g.padding <= g.kernel, who << ": padding " << g.padding << " exceeds half the kernel "
                                          << g.kernel);
  SM_CHECK(g.h + 2 * g.padding >= g.kernel && g.w + 2 * g.padding >= g.kernel,
           who << ": kernel " << g.kernel << " larger than the padded input H=" << g.h << " W=" << g.w);
}

// v replaces best: larger, or the first NaN (NaN then propagates). As the CPU's takes_over.
__device__ __forceinline__ bool takes_over(float v, float best) {
  return (v > best) | ((v != v) & (best == best));
}

// Output rows (or columns) whose window [o·st - pad, o·st - pad + k) contains position q:
// [lo, hi] clamped to [0, n_out - 1] (empty when lo > hi).
__device__ __forceinline__ void windows_containing(int64_t q, int k, int st, int pad, int64_t n_out,
                                                   int64_t& lo, int64_t& hi) {
  const int64_t num = q + pad - k + 1;  // o·st >= num
  lo = num <= 0 ? 0 : (num + st - 1) / st;
  hi = (q + pad) / st;  // q + pad >= 0
  if (hi > n_out - 1) hi = n_out - 1;
}

// Input pixel e (flat over [P, H, W]) is (hh, ww) of plane p; the windows containing it are
// output rows [i0, i1] × columns [j0, j1].
struct Containing {
  int64_t p, hh, ww, i0, i1, j0, j1;
};
__device__ __forceinline__ Containing containing(int64_t e, const Geom& g) {
  Containing r;
  r.ww = e % g.W;
  r.hh = (e / g.W) % g.H;
  r.p = e / (g.W * g.H);
  windows_containing(r.hh, g.k, g.st, g.pad, g.Ho, r.i0, r.i1);
  windows_containing(r.ww, g.k, g.st, g.pad, g.Wo, r.j0, r.j1);
  return r;
}

template <typename T, typename Idx>
__global__ void maxpool_forward_kernel(const T* __restrict__ x, Geom g, T* __restrict__ y,
                                       Idx* __restrict__ argmax) {
  const int64_t n = g.P * g.Ho * g.Wo;
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride()) {
    const int64_t j = e % g.Wo, i = (e / g.Wo) % g.Ho, p = e / (g.Wo * g.Ho);
    const T* xp = x + p * g.H * g.W;
    const int64_t h0 = i * g.st - g.pad, w0 = j * g.st - g.pad;
    const int64_t kh0 = h0 < 0 ? -h0 : 0, kh1 = g.H - h0 < g.k ? g.H - h0 : g.k;
    const int64_t kw0 = w0 < 0 ? -w0 : 0, kw1 = g.W - w0 < g.k ? g.W - w0 : g.k;
    // Start at the first real element (padding never wins, even against -inf).
    int64_t best_off = kh0 * g.k + kw0;
    float best = to_f32(xp[(h0 + kh0) * g.W + w0 + kw0]);
    for (int64_t a = kh0; a < kh1; ++a) {
      const T* row = xp + (h0 + a) * g.W + w0;
      for (int64_t b = kw0; b < kw1; ++b) {
        const float v = to_f32(row[b]);
        if (takes_over(v, best)) {
          best = v;
          best_off = a * g.k + b;
        }
      }
    }
    y[e] = from_f32<T>(best);
    argmax[e] = static_cast<Idx>(best_off);
  }
}

template <typename T, typename Idx>
__global__ void maxpool_backward_kernel(const T* __restrict__ dy, const Idx* __restrict__ argmax,
                                        Geom g, T* __restrict__ dx) {
  const int64_t n = g.P * g.H * g.W;
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride()) {
    const Containing w = containing(e, g);
    float sum = 0.0f;
    for (int64_t i = w.i0; i <= w.i1; ++i) {
      const int64_t dh = w.hh - (i * g.st - g.pad);  // row inside window i, in [0, k)
      for (int64_t j = w.j0; j <= w.j1; ++j) {
        const int64_t o = (w.p * g.Ho + i) * g.Wo + j;
        const int64_t dw = w.ww - (j * g.st - g.pad);
        if (static_cast<int64_t>(argmax[o]) == dh * g.k + dw) sum += to_f32(dy[o]);
      }
    }
    dx[e] = from_f32<T>(sum);
  }
}

template <typename T>
__global__ void avgpool_forward_kernel(const T* __restrict__ x, Geom g, T* __restrict__ y) {
  const int64_t n = g.P * g.Ho * g.Wo;
  const float divisor = static_cast<float>(g.k * g.k);
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride()) {
    const int64_t j = e % g.Wo, i = (e / g.Wo) % g.Ho, p = e / (g.Wo * g.Ho);
    const T* xp = x + p * g.H * g.W;
    const int64_t h0 = i * g.st - g.pad, w0 = j * g.st - g.pad;
    const int64_t a0 = h0 < 0 ? 0 : h0, a1 = h0 + g.k < g.H ? h0 + g.k : g.H;
    const int64_t b0 = w0 < 0 ? 0 : w0, b1 = w0 + g.k < g.W ? w0 + g.k : g.W;
    float sum = 0.0f;
    for (int64_t a = a0; a < a1; ++a)
      for (int64_t b = b0; b < b1; ++b) sum += to_f32(xp[a * g.W + b]);
    y[e] = from_f32<T>(sum / divisor);
  }
}

template <typename T>
__global__ void avgpool_backward_kernel(const T* __restrict__ dy, Geom g, T* __restrict__ dx) {
  const int64_t n = g.P * g.H * g.W;
  const float divisor = static_cast<float>(g.k * g.k);
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride()) {
    const Containing w = containing(e, g);
    float sum = 0.0f;
    for (int64_t i = w.i0; i <= w.i1; ++i)
      for (int64_t j = w.j0; j <= w.j1; ++j) sum += to_f32(dy[(w.p * g.Ho + i) * g.Wo + j]) / divisor;
    dx[e] = from_f32<T>(sum);
  }
}

// Enqueues one thread per input pixel (per_input: the backward passes) or per output
// element (forward): kernel_launch(gg, blocks) launches with blocks_for(n) blocks; nothing
// when n is 0.
template <typename KernelLaunch>
void launch(const cpu::PoolGeom& g, bool per_input, KernelLaunch kernel_launch) {
  const Geom gg = geom(g);
  const int64_t n = per_input ? gg.P * gg.H * gg.W : gg.P * gg.Ho * gg.Wo;
  if (n == 0) return;
  kernel_launch(gg, detail::blocks_for(n));
  SM_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T, typename Idx>
void maxpool2d_forward_cuda(const T* x, const cpu::PoolGeom& g, T* y, Idx* argmax,
                            cudaStream_t stream) {
  check_geom(g, "maxpool2d_forward_cuda");
  SM_CHECK(sizeof(Idx) >= 4 || g.kernel * g.kernel <= 256,
           "maxpool2d_forward_cuda: u8 window offsets need k·k <= 256, k = " << g.kernel);
  launch(g, false, [&](const Geom& gg, int blocks) {
    maxpool_forward_kernel<T, Idx><<<blocks, kThreads, 0, stream>>>(x, gg, y, argmax);
  });
}

template <typename T, typename Idx>
void maxpool2d_backward_cuda(const T* dy, const Idx* argmax, const cpu::PoolGeom& g, T* dx,
                             cudaStream_t stream) {
  check_geom(g, "maxpool2d_backward_cuda");
  launch(g, true, [&](const Geom& gg, int blocks) {
    maxpool_backward_kernel<T, Idx><<<blocks, kThreads, 0, stream>>>(dy, argmax, gg, dx);
  });
}

template <typename T>
void avgpool2d_forward_cuda(const T* x, const cpu::PoolGeom& g, T* y, cudaStream_t stream) {
  check_geom(g, "avgpool2d_forward_cuda");
  launch(g, false, [&](const Geom& gg, int blocks) {
    avgpool_forward_kernel<T><<<blocks, kThreads, 0, stream>>>(x, gg, y);
  });
}

template <typename T>
void avgpool2d_backward_cuda(const T* dy, const cpu::PoolGeom& g, T* dx, cudaStream_t stream) {
  check_geom(g, "avgpool2d_backward_cuda");
  launch(g, true, [&](const Geom& gg, int blocks) {
    avgpool_backward_kernel<T><<<blocks, kThreads, 0, stream>>>(dy, gg, dx);
  });
}

#define SM_POOL_INSTANTIATE(T)                                                                 \
  template void maxpool2d_forward_cuda<T, uint8_t>(const T*, const cpu::PoolGeom&, T*,         \
                                                   uint8_t*, cudaStream_t);                    \
  template void maxpool2d_forward_cuda<T, int32_t>(const T*, const cpu::PoolGeom&, T*,         \
                                                   int32_t*, cudaStream_t);                    \
  template void maxpool2d_backward_cuda<T, uint8_t>(const T*, const uint8_t*,                  \
                                                    const cpu::PoolGeom&, T*, cudaStream_t);   \
  template void maxpool2d_backward_cuda<T, int32_t>(const T*, const int32_t*,                  \
                                                    const cpu::PoolGeom&, T*, cudaStream_t);   \
  template void avgpool2d_forward_cuda<T>(const T*, const cpu::PoolGeom&, T*, cudaStream_t);   \
  template void avgpool2d_backward_cuda<T>(const T*, const cpu::PoolGeom&, T*, cudaStream_t);
SM_POOL_INSTANTIATE(float)
SM_POOL_INSTANTIATE(__nv_bfloat16)
SM_POOL_INSTANTIATE(__half)
#undef SM_POOL_INSTANTIATE

}  // namespace cuda
}  // namespace sm
