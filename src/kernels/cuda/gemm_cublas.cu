// gemm_cublas.cu — the own kernels of kernels/cuda/gemm_cublas.h: channel bias add, the
// deterministic channel bias gradient, and accumulate-with-cast. (The GEMMs themselves are
// cuBLAS calls in gemm_cublas.cpp.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "spikemesh/core/error.h"
#include "spikemesh/core/error_cuda.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"

namespace sm {
namespace cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 16384 ? (b > 0 ? b : 1) : 16384);
}

// Arithmetic type of a storage type: double for double, float otherwise.
template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };

template <typename A, typename T> __device__ __forceinline__ A load(T v) { return static_cast<A>(v); }
template <> __device__ __forceinline__ float load<float, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ float load<float, __half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ double load<double, __nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ double load<double, __half>(__half v) { return __half2float(v); }

template <typename T, typename A> __device__ __forceinline__ T store(A v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16, float>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half store<__half, float>(float v) { return __float2half_rn(v); }

template <typename T, typename B>
__global__ void add_bias_kernel(T* __restrict__ y, const B* __restrict__ bias, int64_t total, int64_t C,
                                int64_t inner) {
  using A = typename AccOf<T>::type;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (idx / inner) % C;
    y[idx] = store<T, A>(load<A, T>(y[idx]) + static_cast<A>(bias[c]));
  }
}

// One block per channel; fixed thread-strided partials and a fixed tree: deterministic.
template <typename T, typename D>
__global__ void bias_grad_kernel(const T* __restrict__ dy, int64_t outer, int64_t C, int64_t inner,
                                 D* __restrict__ db) {
  __shared__ double partial[kThreads];
  const int64_t c = blockIdx.x;
  const int64_t total = outer * inner;
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < total; j += kThreads) {
    const int64_t o = j / inner, i = j - o * inner;
    acc += load<double, T>(dy[(o * C + c) * inner + i]);
  }
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = static_cast<D>(static_cast<double>(db[c]) + partial[0]);
}

template <typename D, typename S>
__global__ void accumulate_kernel(D* __restrict__ dst, const S* __restrict__ src, int64_t n, double factor) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = dst[i] + static_cast<D>(load<double, S>(src[i]) * factor);
}

template <typename T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) for the storage type T of dt (f32, f64, bf16 or f16) and returns
// true; false (f not called) for any other dtype.
template <typename F>
bool with_storage_type(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: f(TypeTag<float>{}); return true;
    case DType::F64: f(TypeTag<double>{}); return true;
    case DType::BF16: f(TypeTag<__nv_bfloat16>{}); return true;
    case DType::F16: f(TypeTag<__half>{}); return true;
    default: return false;
  }
}

// Calls f(TypeTag<T>{}) for the master type T of dt (f32 or f64) and returns true; false
// (f not called) for any other dtype.
template <typename F>
bool with_master_type(DType dt, F&& f) {
  if (dt == DType::F32)
    f(TypeTag<float>{});
  else if (dt == DType::F64)
    f(TypeTag<double>{});
  else
    return false;
  return true;
}

template <typename T, typename B>
void add_bias_typed(void* y, const void* bias, int64_t outer, int64_t C, int64_t inner, cudaStream_t s) {
  const int64_t total = outer * C * inner;
  add_bias_kernel<T, B><<<grid_for(total), kThreads, 0, s>>>(static_cast<T*>(y), static_cast<const B*>(bias), total,
                                                             C, inner);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename B>
void add_bias_for(void* y, DType y_dt, const void* bias, int64_t outer, int64_t C, int64_t inner, cudaStream_t s) {
  const bool known = with_storage_type(y_dt, [&](auto t) {
    add_bias_typed<typename decltype(t)::type, B>(y, bias, outer, C, inner, s);
  });
  if (!known) SM_CHECK(false, "bias add on " << dtype_name(y_dt) << " activations");
}

template <typename T, typename D>
void bias_grad_typed(const void* dy, int64_t outer, int64_t C, int64_t inner, void* db, cudaStream_t s) {
  SM_CHECK(C < (int64_t{1} << 31), "bias gradient over " << C << " channels");
  bias_grad_kernel<T, D><<<static_cast<unsigned>(C), kThreads, 0, s>>>(static_cast<const T*>(dy), outer, C, inner,
                                                                        static_cast<D*>(db));
  SM_CUDA_CHECK_LAUNCH();
}

template <typename D>
void bias_grad_for(const void* dy, DType dy_dt, int64_t outer, int64_t C, int64_t inner, void* db, cudaStream_t s) {
  const bool known = with_storage_type(dy_dt, [&](auto t) {
    bias_grad_typed<typename decltype(t)::type, D>(dy, outer, C, inner, db, s);
  });
  if (!known) SM_CHECK(false, "bias gradient of " << dtype_name(dy_dt) << " gradients");
}

template <typename D, typename S>
void accumulate_typed(void* dst, const void* src, int64_t n, double f, cudaStream_t s) {
  accumulate_kernel<D, S><<<grid_for(n), kThreads, 0, s>>>(static_cast<D*>(dst), static_cast<const S*>(src), n, f);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename D>
void accumulate_for(void* dst, const void* src, DType src_dt, int64_t n, double f, cudaStream_t s) {
  const bool known = with_storage_type(src_dt, [&](auto t) {
    accumulate_typed<D, typename decltype(t)::type>(dst, src, n, f, s);
  });
  if (!known) SM_CHECK(false, "accumulate of " << dtype_name(src_dt));
}

}  // namespace

void add_channel_bias(void* y, DType y_dt, const void* bias, DType bias_dt, int64_t outer, int64_t C,
                      int64_t inner, cudaStream_t stream) {
  if (outer * C * inner == 0) return;
  const bool known = with_master_type(bias_dt, [&](auto b) {
    add_bias_for<typename decltype(b)::type>(y, y_dt, bias, outer, C, inner, stream);
  });
  if (!known) SM_CHECK(false, "bias of dtype " << dtype_name(bias_dt) << " (f32/f64 master parameters only)");
}

void channel_bias_grad(const void* dy, DType dy_dt, int64_t outer, int64_t C, int64_t inner, void* db,
                       DType db_dt, cudaStream_t stream) {
  if (C == 0) return;
  const bool known = with_master_type(db_dt, [&](auto d) {
    bias_grad_for<typename decltype(d)::type>(dy, dy_dt, outer, C, inner, db, stream);
  });
  if (!known) SM_CHECK(false, "bias gradient into " << dtype_name(db_dt) << " (f32/f64 master gradients only)");
}

void accumulate(void* dst, DType dst_dt, const void* src, DType src_dt, int64_t n, cudaStream_t stream,
                double factor) {
  if (n <= 0) return;
  const bool known = with_master_type(dst_dt, [&](auto d) {
    accumulate_for<typename decltype(d)::type>(dst, src, src_dt, n, factor, stream);
  });
  if (!known) SM_CHECK(false, "accumulate into " << dtype_name(dst_dt) << " (f32/f64 only)");
}

}  // namespace cuda
}  // namespace sm
