// neuron.cu (kernels/cuda) — fused multi-step LIF / PLIF / IF forward and BPTT (see
// kernels/cuda/neuron.h; the CPU kernel kernels/cpu/neuron.cpp is the reference).
//
// One thread per neuron i loops over t; element (t, i) of a [T, M] tensor is t·M + i, so a
// warp touches 32 consecutive addresses at every step (coalesced). The grid-stride loop's
// base index is block-uniform, so every lane of a warp runs the same iterations (needed by
// the ballot that packs spike bits).
//
// These are the generic kernels (runtime flags, 64-bit indices, one neuron per thread); the
// launchers run the vectorised compile-time variants of neuron_vec.cu instead wherever
// kernels/neuron_variant.h allows. Arithmetic: neuron_math.cuh, explicitly rounded f32
// operations (__fadd_rn, __fmul_rn, ...): nvcc never contracts them into FMAs, so h_t is the
// CPU f32 kernel's h_t bit for bit (that kernel is compiled without contraction too) and the
// backward's recomputed h_t is the forward's. The backward's gradient arithmetic is written
// the same way; only the surrogate's expf/atanf may differ by an ulp from the CPU's.
#include <climits>

#include "common.cuh"
#include "neuron_math.cuh"
#include "neuron_vec.cuh"
#include "spikemesh/kernels/cuda/neuron.h"
#include "spikemesh/kernels/neuron_variant.h"

namespace sm {
namespace cuda {
namespace {

using namespace neuron_detail;

// Input element e: from the activation array, or from packed bits when x is null; the fused
// batch norm's apply on top when has_affine.
template <typename T>
__device__ __forceinline__ float load_input(const T* x, const uint32_t* x_bits, int64_t e, bool has_affine,
                                            const ChannelAffine& a) {
  const float raw = x ? to_f32(x[e]) : (((x_bits[e >> 5] >> (e & 31)) & 1u) ? 1.0f : 0.0f);
  return has_affine ? apply_affine<T>(a, raw) : raw;
}

__device__ __forceinline__ ChannelAffine neuron_affine(const NeuronAffineCuda& a, int64_t i) {
  return a.center ? channel_affine(a.center, a.scale, a.offset, a.channels, a.inner, i) : ChannelAffine{};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    neuron_forward_kernel(NeuronF32 k, const T* __restrict__ x, int64_t steps, int64_t M,
                          float* __restrict__ v, T* __restrict__ spikes,
                          uint32_t* __restrict__ bits, bool bits_aligned,
                          unsigned long long* __restrict__ fired, NeuronAffineCuda affine) {
  const bool has_affine = affine.center != nullptr;
  const int lane = threadIdx.x & 31;
  unsigned int my_fired = 0;  // <= steps per neuron, a few neurons per thread
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads; base < M;
       base += detail::grid_stride()) {
    const int64_t i = base + threadIdx.x;
    const bool active = i < M;
    const int64_t warp_first = base + (threadIdx.x - lane);  // neuron of lane 0
    float vi = k.rest;
    if (active && v) vi = v[i];
    const ChannelAffine aff = active ? neuron_affine(affine, i) : ChannelAffine{};
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t e = t * M + i;
      bool stepped = false;
      if (active) {
        const float h = charge(k, vi, load_input<T>(x, nullptr, e, has_affine, aff));
        const float s = fire(k, h);
        stepped = h >= k.v_th;
        my_fired += stepped ? 1u : 0u;
        spikes[e] = from_f32<T>(s);
        vi = reset(k, h, s);
      }
      if (bits) {  // uniform over the grid: every lane reaches the ballot
        const uint32_t word = __ballot_sync(0xffffffffu, stepped);
        if (lane == 0 && warp_first < M) {
          const int64_t e0 = t * M + warp_first;  // element of lane 0's bit
          if (bits_aligned) {
            bits[e0 >> 5] = word;  // M % 32 == 0: e0 % 32 == 0 and all 32 lanes are active
          } else {
            const int sh = static_cast<int>(e0 & 31);
            atomicOr(&bits[e0 >> 5], word << sh);
            if (sh != 0 && (word >> (32 - sh)) != 0u) atomicOr(&bits[(e0 >> 5) + 1], word >> (32 - sh));
          }
        }
      }
    }
    if (active && v) v[i] = vi;
  }
  if (fired) {  // integer sums: the total does not depend on the order of the atomics
    unsigned long long w = my_fired;
    for (int off = 16; off > 0; off >>= 1) w += __shfl_down_sync(0xffffffffu, w, off);
    if (lane == 0 && w != 0ull) atomicAdd(fired, w);
  }
}

// Membrane at the start of chunk c (c >= 1) -> ckpt[(c - 1)·M + i].
template <typename T>
__device__ void store_checkpoints(const NeuronF32& k, const T* x, const uint32_t* x_bits, bool has_affine,
                                  const ChannelAffine& aff, float v, int64_t chunks, int64_t M, int64_t i,
                                  float* ckpt) {
  for (int64_t c = 1; c < chunks; ++c) {
    for (int64_t t = (c - 1) * kNeuronChunk; t < c * kNeuronChunk; ++t) {
      const float h = charge(k, v, load_input<T>(x, x_bits, t * M + i, has_affine, aff));
      v = reset(k, h, fire(k, h));
    }
    ckpt[(c - 1) * M + i] = v;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    neuron_backward_kernel(NeuronF32 k, const T* __restrict__ grad_s, const T* __restrict__ x,
                           const uint32_t* __restrict__ x_bits, const float* __restrict__ v_init,
                           int64_t steps, int64_t M, T* __restrict__ grad_x,
                           float* __restrict__ ckpt, double* __restrict__ block_grad_r,
                           const float* __restrict__ grad_v_in, float* __restrict__ grad_v_out,
                           NeuronAffineCuda affine) {
  constexpr int K = kNeuronChunk;
  const bool has_affine = affine.center != nullptr;
  const int64_t chunks = (steps + K - 1) / K;
  double acc_r = 0.0;  // this thread's share of d(loss)/dr
  for (int64_t i = detail::global_thread(); i < M; i += detail::grid_stride()) {
    const float v0 = v_init ? v_init[i] : k.rest;
    const ChannelAffine aff = neuron_affine(affine, i);
    if (chunks > 1) store_checkpoints(k, x, x_bits, has_affine, aff, v0, chunks, M, i, ckpt);
    float g_v = grad_v_in ? grad_v_in[i] : 0.0f;  // gradient flowing into v_t from step t+1
    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t t0 = c * K;
      const int len = static_cast<int>(steps - t0 < K ? steps - t0 : K);
      const float v_start = c == 0 ? v0 : ckpt[(c - 1) * M + i];
      float h[K];  // h_t of this chunk; static indices only (stays in registers)
      float v = v_start;
#pragma unroll
      for (int j = 0; j < K; ++j) {
        if (j < len) {
          const float hj = charge(k, v, load_input<T>(x, x_bits, (t0 + j) * M + i, has_affine, aff));
          h[j] = hj;
          v = reset(k, hj, fire(k, hj));
        }
      }
#pragma unroll
      for (int j = K - 1; j >= 0; --j) {
        if (j < len) {
          const int64_t e = (t0 + j) * M + i;
          const float hj = h[j];
          const float sg = surrogate_grad(k, hj);
          const float grad_h = __fadd_rn(__fmul_rn(to_f32(grad_s[e]), sg),
                                         __fmul_rn(g_v, dv_dh(k, hj, fire(k, hj), sg)));
          grad_x[e] = from_f32<T>(__fmul_rn(grad_h, k.x_scale));
          g_v = __fmul_rn(grad_h, k.one_minus_r);
          if (block_grad_r) {
            const float hp = h[j > 0 ? j - 1 : 0];  // h_{t-1} inside this chunk
            const float v_prev = j > 0 ? reset(k, hp, fire(k, hp)) : v_start;
            const float dh_dr = k.decay_input ? __fdiv_rn(__fsub_rn(hj, v_prev), k.r)
                                              : __fsub_rn(k.v_r_charge, v_prev);
            acc_r += static_cast<double>(__fmul_rn(grad_h, dh_dr));
          }
        }
      }
    }
    if (grad_v_out) grad_v_out[i] = g_v;
  }
  if (block_grad_r) {  // uniform: every thread of the block gets here
    __shared__ double smem[kThreads];
    const double total = detail::block_sum(acc_r, smem);
    if (threadIdx.x == 0) block_grad_r[blockIdx.x] = total;
  }
}

}  // namespace

template <typename T>
void neuron_forward_cuda(const cpu::NeuronKernelConfig& c, const T* x, int64_t steps, int64_t M,
                         float* v, T* spikes, uint32_t* spike_bits, int64_t* fired,
                         cudaStream_t stream, const NeuronAffineCuda* affine, bool accumulate_fired) {
  SM_CHECK(steps >= 0 && M >= 0, "neuron_forward_cuda: bad size T=" << steps << " M=" << M);
  SM_CHECK(!(spike_bits && c.smooth), "neuron_forward_cuda: spike bits requested in smooth mode");
  SM_CHECK(!affine || (affine->center && affine->scale && affine->offset && affine->channels >= 1 &&
                       affine->inner >= 1 && M % (affine->channels * affine->inner) == 0),
           "neuron_forward_cuda: a fused batch norm apply needs its [C] vectors and M = N·C·inner");
  auto* fired_u = reinterpret_cast<unsigned long long*>(fired);
  if (fired && !accumulate_fired) SM_CUDA_CHECK(cudaMemsetAsync(fired, 0, sizeof(int64_t), stream));
  if (M == 0 || steps == 0) return;  // v unchanged, nothing to write
  if (neuron_variant::forward_fast(steps, M, sizeof(T), spike_bits != nullptr, {x, spikes})) {
    neuron_detail::forward_vec<T>(c, x, steps, M, v, spikes, spike_bits, fired_u, affine, stream);
    return;
  }
  const bool aligned = M % 32 == 0;
  if (spike_bits && !aligned)
    SM_CUDA_CHECK(cudaMemsetAsync(spike_bits, 0, spike_words(steps * M) * sizeof(uint32_t), stream));
  neuron_forward_kernel<T><<<detail::blocks_for(M), kThreads, 0, stream>>>(
      to_f32_config(c), x, steps, M, v, spikes, spike_bits, aligned, fired_u, affine ? *affine : NeuronAffineCuda{});
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void neuron_backward_cuda(const cpu::NeuronKernelConfig& c, const T* grad_s, const T* x,
                          const uint32_t* x_bits, const float* v_init, int64_t steps, int64_t M,
                          T* grad_x, double* grad_r, cudaStream_t stream, const float* grad_v_in,
                          float* grad_v_out, const NeuronAffineCuda* affine) {
  SM_CHECK(steps >= 0 && M >= 0, "neuron_backward_cuda: bad size T=" << steps << " M=" << M);
  SM_CHECK(steps > 0 || !grad_v_out, "neuron_backward_cuda: a membrane-gradient carry over 0 steps");
  SM_CHECK((x == nullptr) != (x_bits == nullptr),
           "neuron_backward_cuda: pass exactly one of x and x_bits");
  SM_CHECK(!(grad_r && c.decay_input && c.r <= 0.0), "rate gradient needs r > 0, got " << c.r);
  SM_CHECK(!affine || (x && affine->center && affine->scale && affine->offset && affine->channels >= 1 &&
                       affine->inner >= 1 && M % (affine->channels * affine->inner) == 0),
           "neuron_backward_cuda: a fused batch norm apply needs x (not bits), its [C] vectors and M = N·C·inner");
  if (steps * M == 0) {
    if (grad_r) SM_CUDA_CHECK(cudaMemsetAsync(grad_r, 0, sizeof(double), stream));
    return;
  }
  const int64_t chunks = (steps + kNeuronChunk - 1) / kNeuronChunk;
  const bool fast = neuron_variant::backward_fast(steps, M, sizeof(T), {grad_s, x, grad_x});
  // With a rate gradient the grid is a function of M only and every block writes its
  // partial; without, the usual capped grid-stride grid.
  const int grid = fast ? (grad_r ? neuron_detail::backward_vec_blocks(M, sizeof(T))
                                  : detail::blocks_for(M / neuron_variant::backward_neurons_per_thread(sizeof(T))))
                        : (grad_r ? detail::blocks_for(M, INT32_MAX) : detail::blocks_for(M));
  detail::Scratch ckpt(chunks > 1 ? static_cast<size_t>((chunks - 1) * M) * sizeof(float) : 0, stream);
  detail::Scratch partials(grad_r ? static_cast<size_t>(grid) * sizeof(double) : 0, stream);
  if (fast) {
    neuron_detail::backward_vec<T>(c, grad_s, x, x_bits, v_init, steps, M, grad_x, ckpt.as<float>(),
                                   partials.as<double>(), grid, grad_v_in, grad_v_out, affine, stream);
  } else {
    neuron_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
        to_f32_config(c), grad_s, x, x_bits, v_init, steps, M, grad_x, ckpt.as<float>(), partials.as<double>(),
        grad_v_in, grad_v_out, affine ? *affine : NeuronAffineCuda{});
    SM_CUDA_CHECK_LAUNCH();
  }
  if (grad_r) detail::sum_partials(partials.as<double>(), grid, grad_r, false, stream);
}

#define SM_NEURON_INSTANTIATE(T)                                                              \
  template void neuron_forward_cuda<T>(const cpu::NeuronKernelConfig&, const T*, int64_t,     \
                                       int64_t, float*, T*, uint32_t*, int64_t*, cudaStream_t, \
                                       const NeuronAffineCuda*, bool);                          \
  template void neuron_backward_cuda<T>(const cpu::NeuronKernelConfig&, const T*, const T*,  \
                                        const uint32_t*, const float*, int64_t, int64_t, T*,  \
                                        double*, cudaStream_t, const float*, float*,           \
                                        const NeuronAffineCuda*);
SM_NEURON_INSTANTIATE(float)
SM_NEURON_INSTANTIATE(__nv_bfloat16)
SM_NEURON_INSTANTIATE(__half)
#undef SM_NEURON_INSTANTIATE

}  // namespace cuda
}  // namespace sm
