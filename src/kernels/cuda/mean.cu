// mean.cu (kernels/cuda) — mean over the middle dim of [outer, D, inner] and its backward
// (see kernels/cuda/mean.h). Grid-stride loops; forward: thread per output, the D terms
// summed in index order in f32 (consecutive threads read consecutive i: coalesced when
// inner > 1; Spikformer's token mean has inner = 1, where each thread reads its own
// contiguous row); backward: thread per dx element.
#include "common.cuh"
#include "spikemesh/kernels/cuda/mean.h"

namespace sm {
namespace cuda {
namespace {

template <typename T>
__global__ void mean_forward_kernel(const T* __restrict__ x, int64_t outer, int64_t d, int64_t inner, float scale,
                                    T* __restrict__ y) {
  const int64_t n = outer * inner;
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride()) {
    const int64_t o = e / inner, i = e % inner;
    const T* xp = x + o * d * inner + i;
    float s = 0.0f;
    for (int64_t k = 0; k < d; ++k) s += to_f32(xp[k * inner]);
    y[e] = from_f32<T>(s * scale);
  }
}

template <typename T>
__global__ void mean_backward_kernel(const T* __restrict__ dy, int64_t outer, int64_t d, int64_t inner, float scale,
                                     T* __restrict__ dx) {
  const int64_t n = outer * d * inner;
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride()) {
    const int64_t i = e % inner, o = e / (d * inner);
    dx[e] = from_f32<T>(to_f32(dy[o * inner + i]) * scale);
  }
}

void check_dims(int64_t outer, int64_t d, int64_t inner, const char* who) {
  SM_CHECK(outer >= 0 && d >= 1 && inner >= 0, who << ": bad geometry outer=" << outer << " d=" << d
                                                    << " inner=" << inner);
}

}  // namespace

template <typename T>
void mean_forward_cuda(const T* x, int64_t outer, int64_t d, int64_t inner, T* y, cudaStream_t stream) {
  check_dims(outer, d, inner, "mean_forward_cuda");
  const int64_t n = outer * inner;
  if (n == 0) return;
  const float scale = 1.0f / static_cast<float>(d);  // the CPU's T(1) / T(D)
  mean_forward_kernel<T><<<detail::blocks_for(n), kThreads, 0, stream>>>(x, outer, d, inner, scale, y);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void mean_backward_cuda(const T* dy, int64_t outer, int64_t d, int64_t inner, T* dx, cudaStream_t stream) {
  check_dims(outer, d, inner, "mean_backward_cuda");
  const int64_t n = outer * d * inner;
  if (n == 0) return;
  const float scale = 1.0f / static_cast<float>(d);
  mean_backward_kernel<T><<<detail::blocks_for(n), kThreads, 0, stream>>>(dy, outer, d, inner, scale, dx);
  SM_CUDA_CHECK_LAUNCH();
}

#define SM_MEAN_INSTANTIATE(T)                                                                   \
  template void mean_forward_cuda<T>(const T*, int64_t, int64_t, int64_t, T*, cudaStream_t);  \
  template void mean_backward_cuda<T>(const T*, int64_t, int64_t, int64_t, T*, cudaStream_t);
SM_MEAN_INSTANTIATE(float)
SM_MEAN_INSTANTIATE(__nv_bfloat16)
SM_MEAN_INSTANTIATE(__half)
#undef SM_MEAN_INSTANTIATE

}  // namespace cuda
}  // namespace sm
