// neuron.h (kernels/cuda) — fused multi-step LIF / PLIF / IF forward and BPTT on the GPU.
// Include only from code compiled when SPIKEMESH_HAVE_CUDA is defined.
//
// Semantics are EXACTLY those of kernels/cpu/neuron.h (the reference), same configuration
// struct: decay_input, hard/soft reset, detach_reset, Sigmoid/ATan surrogate with alpha,
// smooth mode, PLIF rate gradient, backward recomputing h_t from the forward's input x and
// the initial membrane. One thread per neuron loops over T (coalesced over M); the charge,
// fire and reset arithmetic is done in f32 with explicitly rounded operations (no FMA
// contraction), so the GPU's h_t equals the CPU f32 kernel's h_t bit for bit and the
// backward's recomputed h_t equals the forward's.
//
// Layout: x, spikes, grad_s, grad_x are time-major [T, M] (M = N·features) in the
// activation storage type T (float, __nv_bfloat16 or __half; arithmetic always f32). The
// membrane state v / v_init is [M] f32 whatever T is.
// All pointers are device pointers; work is enqueued on `stream` (asynchronous).
//
// Variants (kernels/neuron_variant.h): where M is a multiple of the vector width, the
// pointers are aligned and T·M fits 32 bits, compile-time variants (reset mode, decay_input,
// fire mode / surrogate, detach) run V neurons per thread with vector accesses (forward 16
// bytes, backward 2 neurons) and several steps loaded ahead; otherwise generic kernels
// (runtime flags, 64-bit indices).
// Both compute every value with the same explicitly rounded operations: the same bits.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "spikemesh/kernels/cpu/neuron.h"

namespace sm {
namespace cuda {

// Number of uint32 words of a packed spike array of n elements: ceil(n / 32).
// Bit layout (= core/bitpack.h's CPU packing on a little-endian host): element e is bit
// e % 32 of word e / 32, i.e. bit e % 8 of byte e / 8 — the first ceil(n/8) bytes of the
// word array are exactly the CPU's u8 packing. Bits past n in the last word are 0.
inline int64_t spike_words(int64_t n) { return (n + 31) / 32; }

// Steps whose h_t one backward thread keeps in registers at a time.
constexpr int kNeuronChunk = 16;

// Batch norm's affine apply fused into the neuron's read (the GPU form of
// cpu::NeuronInputAffine): neuron m of [T, M] belongs to channel (m / inner) % channels and
// reads x' = fma(x - float(center[c]), float(scale[c]), offset[c]) in f32, rounded to T —
// bitwise what bn_normalize_cuda (kernels/cuda/batchnorm.h) writes, so the fused forward
// fires exactly as normalise-then-neuron. Backward recomputes the same x' from the
// unnormalised x, and its grad_x is the gradient of the NORMALISED input. Device pointers
// [channels]: center, scale double (batch norm's statistics rows), offset f32 (β).
struct NeuronAffineCuda {
  const double* center = nullptr;
  const double* scale = nullptr;
  const float* offset = nullptr;
  int64_t channels = 1, inner = 1;
};

// Forward over `steps` steps.
//  x:          [T, M] input currents.
//  v:          [M] f32 membrane in/out (in: v_{-1}; out: v_{T-1}); nullptr = start at rest
//              (c.rest()) and do not return the final membrane.
//  spikes:     [T, M] output (0/1, or the surrogate primitive in smooth mode).
//  spike_bits: [spike_words(T·M)] packed step spikes h_t >= v_th, or nullptr. Not allowed in
//              smooth mode (spikes are not binary there).
//  fired:      device int64 [1] or nullptr: OVERWRITTEN with the number of h_t >= v_th (the
//              CPU's return value; deterministic integer sum), or ADDED to when
//              accumulate_fired (the device-side firing counters, read once per report).
//  affine:     host pointer to the fused batch norm's apply (nullable): x is then the
//              unnormalised input.
template <typename T>
void neuron_forward_cuda(const cpu::NeuronKernelConfig& c, const T* x, int64_t steps, int64_t M,
                         float* v, T* spikes, uint32_t* spike_bits, int64_t* fired,
                         cudaStream_t stream, const NeuronAffineCuda* affine = nullptr,
                         bool accumulate_fired = false);

// BPTT from the forward's input, one thread per neuron. Time is cut into chunks of
// kNeuronChunk steps: for T <= kNeuronChunk the thread recomputes h_t of all steps into
// registers and sweeps t = T-1 .. 0 over them (x and grad_s read once, grad_x written
// once); for longer T a first forward sweep stores the membrane at every chunk start (x is
// read twice; stream-ordered scratch of (ceil(T/kNeuronChunk) - 1)·M floats) and each chunk, last
// first, is recomputed into registers from its checkpoint.
//  grad_s:  [T, M] upstream gradient d(loss)/d(spikes).
//  x:       [T, M] exactly the forward's input, OR nullptr together with x_bits:
//  x_bits:  [spike_words(T·M)] the forward's input when it was a binary (spike) tensor,
//           packed as above; exactly one of x / x_bits is non-null.
//  v_init:  [M] f32 membrane the forward started from, or nullptr (= rest).
//  grad_x:  [T, M] output d(loss)/dx (must not alias grad_s or x).
//  grad_r:  device double [1] or nullptr: OVERWRITTEN with d(loss)/dr summed over all neurons
//           and steps (PLIF; the caller chains through sigmoid: grad_w = grad_r·r·(1-r)).
//           Deterministic: per-thread double sums, fixed-order block trees, block partials
//           summed in block order; the grid depends on M only. Uses a small stream-ordered
//           scratch allocation (cudaMallocAsync) of ceil(M/256) doubles.
//  grad_v_in / grad_v_out: [M] f32 or nullptr, the membrane gradient carried between time
//           chunks (memopt), as in the CPU kernel (kernels/cpu/neuron.h).
//  affine:  the forward's fused batch norm apply (nullable; then x is unnormalised and grad_x
//           is d(loss)/d(normalised input)). Not with x_bits.
template <typename T>
void neuron_backward_cuda(const cpu::NeuronKernelConfig& c, const T* grad_s, const T* x,
                          const uint32_t* x_bits, const float* v_init, int64_t steps, int64_t M,
                          T* grad_x, double* grad_r, cudaStream_t stream, const float* grad_v_in = nullptr,
                          float* grad_v_out = nullptr, const NeuronAffineCuda* affine = nullptr);

// Measured occupancy of the fast (vectorised) LIF kernels of the default configuration
// (decay_input, hard reset, sigmoid surrogate, no detach) for activation type bf16 or f32:
// resident blocks per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor), threads per
// block, registers per thread and the resulting fraction of the SM's thread slots.
struct NeuronKernelOccupancy {
  int forward_blocks_per_sm = 0, backward_blocks_per_sm = 0, threads_per_block = 0;
  int forward_registers = 0, backward_registers = 0, max_threads_per_sm = 0;
  double forward_fraction() const;
  double backward_fraction() const;
};
NeuronKernelOccupancy neuron_kernel_occupancy_cuda(bool bf16);

}  // namespace cuda
}  // namespace sm
