// common.cuh (kernels/cuda, internal) — helpers shared by spikemesh's own CUDA kernels:
// storage <-> f32 conversions, launch geometry, a deterministic block sum and a stream-ordered
// scratch buffer; from_f32, to_f32 and kThreads are also visible unqualified in sm::cuda.
// Only included by src/kernels/cuda/*.cu.
//
// Invariants: every kernel runs kThreads threads per block (a multiple of 32, power of 2);
// block_sum() adds in a fixed tree order, so a block's result depends only on its inputs.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "spikemesh/core/error_cuda.h"

namespace sm {
namespace cuda {
namespace detail {

constexpr int kThreads = 256;
// Grid-stride kernels use at most this many blocks (enough to fill any current GPU).
constexpr int64_t kMaxBlocks = 1 << 16;

inline int blocks_for(int64_t n, int64_t cap = kMaxBlocks) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<int64_t>(1, std::min(b, cap)));
}

// Grid-stride loop index and stride, in index type I (32-bit loops for small tensors).
template <typename I = int64_t>
__device__ __forceinline__ I global_thread() {
  return static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
}
template <typename I = int64_t>
__device__ __forceinline__ I grid_stride() {
  return static_cast<I>(gridDim.x) * blockDim.x;
}

// Storage type <-> f32.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// Sum of one double per thread over the block (blockDim.x == kThreads), in a fixed tree
// order. Every thread of the block must call it; the result is valid in thread 0.
// `smem` holds kThreads doubles.
__device__ __forceinline__ double block_sum(double v, double* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) smem[threadIdx.x] += smem[threadIdx.x + half];
    __syncthreads();
  }
  const double r = smem[0];
  __syncthreads();  // smem may be reused by the caller
  return r;
}

// A device buffer allocated and freed in stream order (cudaMallocAsync / cudaFreeAsync):
// kernels enqueued on `stream` between construction and destruction may use it.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) SM_CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
  }
  ~Scratch() {
    if (ptr_) (void)cudaFreeAsync(ptr_, stream_);  // never throws from a destructor
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename U> U* as() const { return static_cast<U*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// Enqueues one block that sums the n doubles of `partials` in a fixed order (thread j takes
// j, j + kThreads, ... ascending, then the block tree) into *out (= sum, or *out + sum when
// accumulate). n may be 0 (sum 0). Defined in common.cu.
void sum_partials(const double* partials, int64_t n, double* out, bool accumulate,
                  cudaStream_t stream);

}  // namespace detail

// The helpers every kernel file names unqualified.
using detail::from_f32;
using detail::kThreads;
using detail::to_f32;

}  // namespace cuda
}  // namespace sm
