// dropout.h (kernels/cuda) — time-shared dropout on the GPU, matching kernels/cpu/dropout.h
// bit for bit: the keep mask is drawn with the same Philox4x32-10 counter-based generator as
// core/rng.h (element f of sample n from counter (f, step, sample_offset + n) under the
// CounterRng key), uniform with 53 bits in double, kept when uniform >= p. The mask is the
// CPU's u8 bit array (8 per byte, LSB first, bit n·F + f). Include only when
// SPIKEMESH_HAVE_CUDA is defined.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace sm {
namespace cuda {

// The 64-bit Philox key of CounterRng(seed, stream) (the same splitmix64 mix of seed and
// stream as core/rng.cpp). The dropout layer's stream is hash_name("dropout/" + name()).
struct PhiloxKey {
  uint32_t k0 = 0, k1 = 0;
};
PhiloxKey philox_key(uint64_t seed, uint64_t stream);

// Bytes of the mask of N samples × F features (= cpu::dropout_mask_bytes).
inline int64_t dropout_mask_bytes_cuda(int64_t N, int64_t F) { return (N * F + 7) / 8; }

// Draw the keep mask. bits: device u8 [dropout_mask_bytes_cuda(N, F)], every byte written.
// step_on_device (CUDA graphs): when non-null the kernel reads the step from this device
// word at run time and `step` is ignored. sample_offset_on_device (CUDA graphs): when
// non-null the kernel adds this device word to `sample_offset` at run time.
void dropout_draw_mask_cuda(PhiloxKey key, double p, uint32_t step, int64_t sample_offset,
                            int64_t N, int64_t F, uint8_t* bits, cudaStream_t stream,
                            const uint32_t* step_on_device = nullptr,
                            const int64_t* sample_offset_on_device = nullptr);

// y[t, n, f] = x[t, n, f]·scale when bit n·F + f is set, else 0 (f32 arithmetic).
// x, y: [T, N, F] (y may alias x). Used for the forward (x) and the backward (dy) alike.
template <typename T>
void dropout_apply_cuda(const T* x, const uint8_t* bits, int64_t steps, int64_t N, int64_t F,
                        float scale, T* y, cudaStream_t stream);

// The draw of element i in sub-stream (a, b), evaluated on the HOST with the very code the
// kernels run (__host__ __device__): equals CounterRng(seed, stream).uniform(i, a, b) when key
// = philox_key(seed, stream). Lets a GPU-less machine check the device generator's math.
double philox_uniform_host(PhiloxKey key, uint64_t i, uint32_t a, uint32_t b);

// Raw Philox4x32-10 of a batch of counters (for tests and other counter-based draws):
// out[4·i .. 4·i+3] = philox4x32(counters[4·i .. 4·i+3], key). Device arrays.
void philox4x32_cuda(const uint32_t* counters, int64_t n, PhiloxKey key, uint32_t* out,
                     cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
