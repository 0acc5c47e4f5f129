// bitpack.cu (kernels/cuda) — pack binary activations into uint32 words and back (see
// kernels/cuda/bitpack.h). One thread per word when packing (reads 32 consecutive
// elements: each word written exactly once, no atomics; the checked variant's flag is only
// ever set to 1, so concurrent stores agree); one thread per element unpacking.
#include "common.cuh"
#include "spikemesh/kernels/cuda/bitpack.h"

namespace sm {
namespace cuda {
namespace {

// nonbinary == nullptr: no check (the values are known to be spikes).
template <typename T>
__global__ void pack_bits_kernel(const T* __restrict__ x, int64_t n, uint32_t* __restrict__ bits,
                                 uint32_t* __restrict__ nonbinary) {
  const int64_t words = (n + 31) / 32;
  for (int64_t w = detail::global_thread(); w < words; w += detail::grid_stride()) {
    const int64_t e0 = w * 32;
    const int lim = static_cast<int>(n - e0 < 32 ? n - e0 : 32);
    uint32_t word = 0;
    bool bad = false;
    for (int b = 0; b < lim; ++b) {
      const float v = to_f32(x[e0 + b]);  // exact for bf16/f16
      bad |= !(v == 0.0f || v == 1.0f);   // NaN too
      word |= (v != 0.0f ? 1u : 0u) << b;
    }
    bits[w] = word;
    if (bad && nonbinary) *nonbinary = 1u;  // every writer stores the same value
  }
}

template <typename T>
__global__ void unpack_bits_kernel(const uint32_t* __restrict__ bits, int64_t n, T* __restrict__ out) {
  for (int64_t e = detail::global_thread(); e < n; e += detail::grid_stride())
    out[e] = from_f32<T>(((bits[e >> 5] >> (e & 31)) & 1u) ? 1.0f : 0.0f);
}

}  // namespace

template <typename T>
void pack_bits_cuda(const T* binary, int64_t n, uint32_t* bits, cudaStream_t stream) {
  SM_CHECK(n >= 0, "pack_bits_cuda: negative size " << n);
  if (n == 0) return;
  pack_bits_kernel<T><<<detail::blocks_for(spike_words(n)), detail::kThreads, 0, stream>>>(binary, n, bits, nullptr);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void pack_bits_checked_cuda(const T* binary, int64_t n, uint32_t* bits, uint32_t* nonbinary, cudaStream_t stream) {
  SM_CHECK(n >= 0, "pack_bits_checked_cuda: negative size " << n);
  if (n == 0) return;
  SM_CHECK(nonbinary != nullptr, "pack_bits_checked_cuda: no flag word");
  pack_bits_kernel<T><<<detail::blocks_for(spike_words(n)), detail::kThreads, 0, stream>>>(binary, n, bits, nonbinary);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void unpack_bits_cuda(const uint32_t* bits, int64_t n, T* out, cudaStream_t stream) {
  SM_CHECK(n >= 0, "unpack_bits_cuda: negative size " << n);
  if (n == 0) return;
  unpack_bits_kernel<T><<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(bits, n, out);
  SM_CUDA_CHECK_LAUNCH();
}

#define SM_BITPACK_INSTANTIATE(T)                                                                 \
  template void pack_bits_cuda<T>(const T*, int64_t, uint32_t*, cudaStream_t);                   \
  template void pack_bits_checked_cuda<T>(const T*, int64_t, uint32_t*, uint32_t*, cudaStream_t); \
  template void unpack_bits_cuda<T>(const uint32_t*, int64_t, T*, cudaStream_t);
SM_BITPACK_INSTANTIATE(float)
SM_BITPACK_INSTANTIATE(__nv_bfloat16)
SM_BITPACK_INSTANTIATE(__half)
#undef SM_BITPACK_INSTANTIATE

}  // namespace cuda
}  // namespace sm
