// tensor_cuda.cu — fill and dtype conversion kernels for Tensor (core/tensor_cuda.h).
// Grid-stride loops over int64 indices; one launch per call.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "spikemesh/core/error.h"
#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/tensor_cuda.h"

namespace sm {
namespace cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 8192 ? (b > 0 ? b : 1) : 8192);
}

// Widening load of any element type to double, and narrowing store from double.
template <typename T> __device__ __forceinline__ double load_as_double(T v) { return static_cast<double>(v); }
template <> __device__ __forceinline__ double load_as_double(__nv_bfloat16 v) {
  return static_cast<double>(__bfloat162float(v));
}
template <> __device__ __forceinline__ double load_as_double(__half v) {
  return static_cast<double>(__half2float(v));
}

template <typename T> __device__ __forceinline__ T store_from_double(double v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 store_from_double(double v) { return __double2bfloat16(v); }
template <> __device__ __forceinline__ __half store_from_double(double v) { return __double2half(v); }

// float -> narrower float: convert from float directly (exact widening is unnecessary).
template <typename S, typename D>
__device__ __forceinline__ D convert_one(S v) { return store_from_double<D>(load_as_double<S>(v)); }
template <> __device__ __forceinline__ __nv_bfloat16 convert_one(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half convert_one(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ float convert_one(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float convert_one(__half v) { return __half2float(v); }

template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = convert_one<S, D>(src[i]);
}

template <typename T>
__global__ void fill_kernel(T* __restrict__ dst, int64_t n, T value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

template <typename T>
T host_value(double v) { return static_cast<T>(v); }
template <>
__nv_bfloat16 host_value<__nv_bfloat16>(double v) { return __double2bfloat16(v); }
template <>
__half host_value<__half>(double v) { return __double2half(v); }

template <typename T>
void fill_typed(void* dst, int64_t n, double v, cudaStream_t stream) {
  fill_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), n, host_value<T>(v));
  SM_CUDA_CHECK_LAUNCH();
}

template <typename S, typename D>
void convert_typed(const void* src, void* dst, int64_t n, cudaStream_t stream) {
  convert_kernel<S, D><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), n);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename S>
void convert_from(const void* src, DType to, void* dst, int64_t n, cudaStream_t stream) {
  switch (to) {
    case DType::F32: convert_typed<S, float>(src, dst, n, stream); return;
    case DType::F64: convert_typed<S, double>(src, dst, n, stream); return;
    case DType::BF16: convert_typed<S, __nv_bfloat16>(src, dst, n, stream); return;
    case DType::F16: convert_typed<S, __half>(src, dst, n, stream); return;
    case DType::U8: convert_typed<S, uint8_t>(src, dst, n, stream); return;
    case DType::I32: convert_typed<S, int32_t>(src, dst, n, stream); return;
    case DType::I64: convert_typed<S, int64_t>(src, dst, n, stream); return;
  }
  SM_CHECK(false, "conversion to dtype " << static_cast<int>(to));
}

template <typename T>
__global__ void unscale_kernel(T* __restrict__ g, int64_t n, T inv_scale, int* __restrict__ found) {
  bool bad = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T v = g[i] * inv_scale;
    g[i] = v;
    bad |= !isfinite(v);
  }
  if (bad) *found = 1;  // benign race: every writer writes 1
}

}  // namespace

void unscale_and_check(void* grad, DType dt, int64_t n, double inv_scale, int* found_nonfinite,
                       cudaStream_t stream) {
  if (n <= 0) return;
  if (dt == DType::F32) {
    unscale_kernel<float><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<float*>(grad), n,
                                                                    static_cast<float>(inv_scale), found_nonfinite);
  } else {
    SM_CHECK(dt == DType::F64, "unscale of " << dtype_name(dt) << " gradients (f32/f64 only)");
    unscale_kernel<double><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<double*>(grad), n, inv_scale,
                                                                     found_nonfinite);
  }
  SM_CUDA_CHECK_LAUNCH();
}

void fill(void* dst, DType dt, int64_t n, double value, cudaStream_t stream) {
  if (n <= 0) return;
  switch (dt) {
    case DType::F32: fill_typed<float>(dst, n, value, stream); return;
    case DType::F64: fill_typed<double>(dst, n, value, stream); return;
    case DType::BF16: fill_typed<__nv_bfloat16>(dst, n, value, stream); return;
    case DType::F16: fill_typed<__half>(dst, n, value, stream); return;
    case DType::U8: fill_typed<uint8_t>(dst, n, value, stream); return;
    case DType::I32: fill_typed<int32_t>(dst, n, value, stream); return;
    case DType::I64: fill_typed<int64_t>(dst, n, value, stream); return;
  }
  SM_CHECK(false, "fill of dtype " << static_cast<int>(dt));
}

void convert(const void* src, DType from, void* dst, DType to, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  switch (from) {
    case DType::F32: convert_from<float>(src, to, dst, n, stream); return;
    case DType::F64: convert_from<double>(src, to, dst, n, stream); return;
    case DType::BF16: convert_from<__nv_bfloat16>(src, to, dst, n, stream); return;
    case DType::F16: convert_from<__half>(src, to, dst, n, stream); return;
    case DType::U8: convert_from<uint8_t>(src, to, dst, n, stream); return;
    case DType::I32: convert_from<int32_t>(src, to, dst, n, stream); return;
    case DType::I64: convert_from<int64_t>(src, to, dst, n, stream); return;
  }
  SM_CHECK(false, "conversion from dtype " << static_cast<int>(from));
}

}  // namespace cuda
}  // namespace sm
