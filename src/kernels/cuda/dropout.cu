// dropout.cu (kernels/cuda) — time-shared dropout mask draw and application (see
// kernels/cuda/dropout.h; kernels/cpu/dropout.cpp and core/rng.cpp are the reference).
// The mask kernel runs one thread per mask byte (each byte written once, no atomics); the
// apply kernel one thread per element of [T, N, F].
#include "common.cuh"
#include "philox.cuh"
#include "spikemesh/kernels/cuda/dropout.h"

namespace sm {
namespace cuda {
namespace {

__global__ void draw_mask_kernel(uint32_t k0, uint32_t k1, double p, uint32_t step_arg, const uint32_t* step_dev,
                                 int64_t sample_offset_arg, const int64_t* offset_dev, int64_t N, int64_t F,
                                 uint8_t* __restrict__ bits) {
  const uint32_t step = step_dev ? *step_dev : step_arg;  // CUDA graphs: read at run time
  const int64_t sample_offset = offset_dev ? *offset_dev + sample_offset_arg : sample_offset_arg;
  const int64_t total = N * F, bytes = (total + 7) / 8;
  for (int64_t byte = detail::global_thread(); byte < bytes; byte += detail::grid_stride()) {
    uint32_t word = 0;
    const int64_t e0 = byte * 8, e1 = e0 + 8 < total ? e0 + 8 : total;
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t n = e / F, f = e % F;
      const uint32_t sample = static_cast<uint32_t>(sample_offset + n);
      if (detail::philox_uniform(static_cast<uint64_t>(f), step, sample, k0, k1) >= p)
        word |= 1u << (e - e0);
    }
    bits[byte] = static_cast<uint8_t>(word);
  }
}

template <typename T>
__global__ void apply_mask_kernel(const T* x, const uint8_t* __restrict__ bits, int64_t total,
                                  int64_t per_step, float scale, T* y) {
  for (int64_t idx = detail::global_thread(); idx < total; idx += detail::grid_stride()) {
    const int64_t e = idx % per_step;  // n·F + f
    const bool keep = (bits[e >> 3] >> (e & 7)) & 1u;
    y[idx] = keep ? from_f32<T>(to_f32(x[idx]) * scale) : from_f32<T>(0.0f);
  }
}

__global__ void philox_kernel(const uint32_t* __restrict__ counters, int64_t n, uint32_t k0,
                              uint32_t k1, uint32_t* __restrict__ out) {
  for (int64_t i = detail::global_thread(); i < n; i += detail::grid_stride()) {
    const uint32_t* c = counters + 4 * i;
    const detail::Philox4Words r = detail::philox4x32_10(c[0], c[1], c[2], c[3], k0, k1);
    for (int w = 0; w < 4; ++w) out[4 * i + w] = r.w[w];
  }
}

}  // namespace

PhiloxKey philox_key(uint64_t seed, uint64_t stream) {
  // core/rng.cpp CounterRng::CounterRng: splitmix64 finaliser of seed·golden ^ stream.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ stream;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  PhiloxKey k;
  k.k0 = static_cast<uint32_t>(z);
  k.k1 = static_cast<uint32_t>(z >> 32);
  return k;
}

double philox_uniform_host(PhiloxKey key, uint64_t i, uint32_t a, uint32_t b) {
  return detail::philox_uniform(i, a, b, key.k0, key.k1);
}

void dropout_draw_mask_cuda(PhiloxKey key, double p, uint32_t step, int64_t sample_offset,
                            int64_t N, int64_t F, uint8_t* bits, cudaStream_t stream,
                            const uint32_t* step_on_device, const int64_t* sample_offset_on_device) {
  SM_CHECK(N >= 0 && F >= 0, "dropout_draw_mask_cuda: bad size N=" << N << " F=" << F);
  const int64_t bytes = dropout_mask_bytes_cuda(N, F);
  if (bytes == 0) return;
  draw_mask_kernel<<<detail::blocks_for(bytes), kThreads, 0, stream>>>(
      key.k0, key.k1, p, step, step_on_device, sample_offset, sample_offset_on_device, N, F, bits);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void dropout_apply_cuda(const T* x, const uint8_t* bits, int64_t steps, int64_t N, int64_t F,
                        float scale, T* y, cudaStream_t stream) {
  SM_CHECK(steps >= 0 && N >= 0 && F >= 0, "dropout_apply_cuda: bad size");
  const int64_t per_step = N * F, total = steps * per_step;
  if (total == 0) return;
  apply_mask_kernel<T><<<detail::blocks_for(total), kThreads, 0, stream>>>(x, bits, total, per_step,
                                                                           scale, y);
  SM_CUDA_CHECK_LAUNCH();
}

void philox4x32_cuda(const uint32_t* counters, int64_t n, PhiloxKey key, uint32_t* out,
                     cudaStream_t stream) {
  SM_CHECK(n >= 0, "philox4x32_cuda: negative count");
  if (n == 0) return;
  philox_kernel<<<detail::blocks_for(n), kThreads, 0, stream>>>(counters, n, key.k0, key.k1, out);
  SM_CUDA_CHECK_LAUNCH();
}

template void dropout_apply_cuda<float>(const float*, const uint8_t*, int64_t, int64_t, int64_t,
                                        float, float*, cudaStream_t);
template void dropout_apply_cuda<__nv_bfloat16>(const __nv_bfloat16*, const uint8_t*, int64_t,
                                                int64_t, int64_t, float, __nv_bfloat16*,
                                                cudaStream_t);
template void dropout_apply_cuda<__half>(const __half*, const uint8_t*, int64_t, int64_t, int64_t,
                                         float, __half*, cudaStream_t);

}  // namespace cuda
}  // namespace sm
