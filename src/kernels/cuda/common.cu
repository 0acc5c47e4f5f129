// common.cu (kernels/cuda) — the shared deterministic partial-sum kernel (see common.cuh).
#include "common.cuh"

namespace sm {
namespace cuda {
namespace detail {

namespace {
__global__ void sum_partials_kernel(const double* __restrict__ partials, int64_t n,
                                    double* __restrict__ out, bool accumulate) {
  __shared__ double smem[kThreads];
  double acc = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) acc += partials[j];
  const double total = block_sum(acc, smem);
  if (threadIdx.x == 0) *out = accumulate ? *out + total : total;
}
}  // namespace

void sum_partials(const double* partials, int64_t n, double* out, bool accumulate,
                  cudaStream_t stream) {
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partials, n, out, accumulate);
  SM_CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace cuda
}  // namespace sm
