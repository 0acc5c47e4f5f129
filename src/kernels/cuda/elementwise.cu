// elementwise.cu (kernels/cuda) — add / accumulate / scale / fill / cast (see
// kernels/cuda/elementwise.h). Grid-stride loops, f32 arithmetic, one rounding on store.
#include <type_traits>

#include "common.cuh"
#include "spikemesh/kernels/cuda/elementwise.h"

namespace sm {
namespace cuda {
namespace {

// No __restrict__: outputs may alias inputs (each element is read before it is written by
// the same thread).
template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride())
    out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename T>
__global__ void scale_kernel(const T* x, float s, T* out, int64_t n) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride())
    out[i] = from_f32<T>(to_f32(x[i]) * s);
}

template <typename T>
__global__ void fill_kernel(T* x, T value, int64_t n) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) x[i] = value;
}

template <typename Src, typename Dst>
__global__ void cast_kernel(const Src* in, Dst* out, int64_t n) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride())
    out[i] = from_f32<Dst>(to_f32(in[i]));
}

void check_n(int64_t n, const char* who) { SM_CHECK(n >= 0, who << ": negative size " << n); }

}  // namespace

template <typename T>
void add_cuda(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  check_n(n, "add_cuda");
  if (n == 0) return;
  add_kernel<T><<<detail::blocks_for(n), kThreads, 0, stream>>>(a, b, out, n);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void add_inplace_cuda(T* acc, const T* x, int64_t n, cudaStream_t stream) {
  add_cuda<T>(acc, x, acc, n, stream);
}

template <typename T>
void scale_cuda(const T* x, double s, T* out, int64_t n, cudaStream_t stream) {
  check_n(n, "scale_cuda");
  if (n == 0) return;
  scale_kernel<T><<<detail::blocks_for(n), kThreads, 0, stream>>>(x, static_cast<float>(s), out, n);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void fill_cuda(T* x, double value, int64_t n, cudaStream_t stream) {
  check_n(n, "fill_cuda");
  if (n == 0) return;
  // Rounded to T on the host (the cuda_bf16/cuda_fp16 conversions are __host__ __device__).
  T v;
  if constexpr (std::is_same_v<T, float>) v = static_cast<float>(value);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) v = __float2bfloat16_rn(static_cast<float>(value));
  else v = __float2half_rn(static_cast<float>(value));
  fill_kernel<T><<<detail::blocks_for(n), kThreads, 0, stream>>>(x, v, n);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename Src, typename Dst>
void cast_cuda(const Src* in, Dst* out, int64_t n, cudaStream_t stream) {
  check_n(n, "cast_cuda");
  if (n == 0) return;
  cast_kernel<Src, Dst><<<detail::blocks_for(n), kThreads, 0, stream>>>(in, out, n);
  SM_CUDA_CHECK_LAUNCH();
}

#define SM_EW_INSTANTIATE(T)                                                         \
  template void add_cuda<T>(const T*, const T*, T*, int64_t, cudaStream_t);          \
  template void add_inplace_cuda<T>(T*, const T*, int64_t, cudaStream_t);            \
  template void scale_cuda<T>(const T*, double, T*, int64_t, cudaStream_t);          \
  template void fill_cuda<T>(T*, double, int64_t, cudaStream_t);
SM_EW_INSTANTIATE(float)
SM_EW_INSTANTIATE(__nv_bfloat16)
SM_EW_INSTANTIATE(__half)
#undef SM_EW_INSTANTIATE

#define SM_CAST_INSTANTIATE(S, D) \
  template void cast_cuda<S, D>(const S*, D*, int64_t, cudaStream_t);
SM_CAST_INSTANTIATE(float, float)
SM_CAST_INSTANTIATE(float, __nv_bfloat16)
SM_CAST_INSTANTIATE(float, __half)
SM_CAST_INSTANTIATE(__nv_bfloat16, float)
SM_CAST_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
SM_CAST_INSTANTIATE(__nv_bfloat16, __half)
SM_CAST_INSTANTIATE(__half, float)
SM_CAST_INSTANTIATE(__half, __nv_bfloat16)
SM_CAST_INSTANTIATE(__half, __half)
#undef SM_CAST_INSTANTIATE

}  // namespace cuda
}  // namespace sm
