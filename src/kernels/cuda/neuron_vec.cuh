// neuron_vec.cuh (kernels/cuda, internal) — launchers of the vectorised compile-time variants
// of the neuron kernels (neuron_vec.cu), called by neuron.cu when
// kernels/neuron_variant.h says they apply (the caller has checked sizes and alignment).
#pragma once
#include "neuron_math.cuh"
#include "spikemesh/kernels/cuda/neuron.h"

namespace sm {
namespace cuda {
namespace neuron_detail {

// Forward: spikes, optional bits (M % 32 == 0), optional fired (already zeroed, accumulated).
template <typename T>
void forward_vec(const cpu::NeuronKernelConfig& c, const T* x, int64_t steps, int64_t M, float* v, T* spikes,
                 uint32_t* bits, unsigned long long* fired, const NeuronAffineCuda* affine, cudaStream_t stream);

// Backward: grid = ceil(M / V / kThreads) blocks when block_grad_r is non-null (one partial each).
template <typename T>
void backward_vec(const cpu::NeuronKernelConfig& c, const T* grad_s, const T* x, const uint32_t* x_bits,
                  const float* v_init, int64_t steps, int64_t M, T* grad_x, float* ckpt, double* block_grad_r,
                  int grid, const float* grad_v_in, float* grad_v_out, const NeuronAffineCuda* affine,
                  cudaStream_t stream);

// Blocks the vectorised backward runs for M neurons (ceil(M / V / kThreads)).
int backward_vec_blocks(int64_t M, size_t elem_bytes);

}  // namespace neuron_detail
}  // namespace cuda
}  // namespace sm
