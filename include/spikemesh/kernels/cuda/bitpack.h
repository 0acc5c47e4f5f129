// bitpack.h (kernels/cuda) — packing binary (spike) activations into bits on the GPU.
// Include only from code compiled when SPIKEMESH_HAVE_CUDA is defined.
//
// Layout: element e is bit e % 32 of uint32 word e / 32 (spike_words(n) words, bits past n
// are 0). On a little-endian host the first ceil(n/8) bytes of the words are exactly
// core/bitpack.h's CPU packing (8 per byte, LSB first), so either side can unpack the
// other's bits. T = float, __nv_bfloat16 or __half; nonzero (incl. NaN) packs as 1.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "spikemesh/kernels/cuda/neuron.h"  // spike_words

namespace sm {
namespace cuda {

// bits[spike_words(n)] <- (binary[e] != 0). Every word is written.
template <typename T>
void pack_bits_cuda(const T* binary, int64_t n, uint32_t* bits, cudaStream_t stream);

// pack_bits_cuda that also checks the values: sets *nonbinary = 1 (a device word the caller
// zeroed) when some element is not exactly 0 or 1 (NaN included), else leaves it. Used for
// spikes leaving a pipeline stage (parallel/pipeline/pp_spikes.h), where the host check it replaces
// read every element.
template <typename T>
void pack_bits_checked_cuda(const T* binary, int64_t n, uint32_t* bits, uint32_t* nonbinary, cudaStream_t stream);

// out[e] <- bit e (0 or 1) for e < n.
template <typename T>
void unpack_bits_cuda(const uint32_t* bits, int64_t n, T* out, cudaStream_t stream);

}  // namespace cuda
}  // namespace sm
