// neuron.cu (kernels/cuda) — fused multi-step LIF / PLIF / IF forward and BPTT (see
// kernels/cuda/neuron.h; the CPU kernel kernels/cpu/neuron.cpp is the reference).
//
// One thread per neuron i loops over t; element (t, i) of a [T, M] tensor is t·M + i, so a
// warp touches 32 consecutive addresses at every step (coalesced). The grid-stride loop's
// base index is block-uniform, so every lane of a warp runs the same iterations (needed by
// the ballot that packs spike bits).
//
// Charge, fire and reset use explicitly rounded f32 operations (__fadd_rn, __fmul_rn, ...):
// nvcc never contracts them into FMAs, so h_t is the CPU f32 kernel's h_t bit for bit (that
// kernel is compiled without contraction too) and the backward's recomputed h_t is the
// forward's. The backward's gradient arithmetic is written the same way (to stay as close
// to the CPU as possible); only the surrogate's expf/atanf may differ by an ulp.
#include <climits>

#include "common.cuh"
#include "spikemesh/kernels/cuda/neuron.h"

namespace sm {
namespace cuda {
namespace {

constexpr float kPi = 3.14159265358979323846f;
constexpr float kPiHalf = 1.57079632679489661923f;  // = float(M_PI / 2), as the CPU's T(M_PI / 2)

// The configuration in f32, exactly as the CPU kernel converts it (T(c.r), ...).
struct NeuronF32 {
  float r, one_minus_r, v_th, v_r_charge, v_reset, alpha, rest, x_scale;
  bool decay_input, hard_reset, detach, smooth, atan;
};

NeuronF32 to_f32_config(const cpu::NeuronKernelConfig& c) {
  NeuronF32 k;
  k.r = static_cast<float>(c.r);
  k.one_minus_r = 1.0f - static_cast<float>(c.r);
  k.v_th = static_cast<float>(c.v_threshold);
  k.v_r_charge = c.hard_reset ? static_cast<float>(c.v_reset) : 0.0f;
  k.v_reset = static_cast<float>(c.v_reset);
  k.alpha = static_cast<float>(c.alpha);
  k.rest = static_cast<float>(c.rest());
  k.x_scale = c.decay_input ? static_cast<float>(c.r) : 1.0f;
  k.decay_input = c.decay_input;
  k.hard_reset = c.hard_reset;
  k.detach = c.detach_reset;
  k.smooth = c.smooth;
  k.atan = c.surrogate == cpu::SurrogateFn::ATan;
  return k;
}

// H = V + r(X - (V - V_r)) (decay_input) or H = V - r(V - V_r) + X.
__device__ __forceinline__ float charge(const NeuronF32& k, float v, float x) {
  if (k.decay_input) return __fadd_rn(v, __fmul_rn(k.r, __fsub_rn(x, __fsub_rn(v, k.v_r_charge))));
  return __fadd_rn(__fsub_rn(v, __fmul_rn(k.r, __fsub_rn(v, k.v_r_charge))), x);
}

// Spike: the step, or the surrogate's primitive in smooth mode.
__device__ __forceinline__ float fire(const NeuronF32& k, float h) {
  if (!k.smooth) return h >= k.v_th ? 1.0f : 0.0f;
  const float u = __fsub_rn(h, k.v_th);
  if (k.atan) return __fadd_rn(__fdiv_rn(atanf(__fmul_rn(__fmul_rn(kPiHalf, k.alpha), u)), kPi), 0.5f);
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__fmul_rn(k.alpha, u))));
}

// V' = S·V_reset + (1 - S)·H (hard) or H - S·v_th (soft).
__device__ __forceinline__ float reset(const NeuronF32& k, float h, float s) {
  if (k.hard_reset) return __fadd_rn(__fmul_rn(s, k.v_reset), __fmul_rn(__fsub_rn(1.0f, s), h));
  return __fsub_rn(h, __fmul_rn(s, k.v_th));
}

// surrogate'(h - v_th).
__device__ __forceinline__ float surrogate_grad(const NeuronF32& k, float h) {
  const float u = __fsub_rn(h, k.v_th);
  if (k.atan) {
    const float z = __fmul_rn(__fmul_rn(kPiHalf, k.alpha), u);
    return __fdiv_rn(__fdiv_rn(k.alpha, 2.0f), __fadd_rn(1.0f, __fmul_rn(z, z)));
  }
  const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__fmul_rn(k.alpha, u))));
  return __fmul_rn(__fmul_rn(k.alpha, sig), __fsub_rn(1.0f, sig));
}

// ∂v_t/∂h_t given s_t and sg_t.
__device__ __forceinline__ float dv_dh(const NeuronF32& k, float h, float s, float sg) {
  if (k.hard_reset) {
    if (k.detach) return __fsub_rn(1.0f, s);
    return __fadd_rn(__fsub_rn(1.0f, s), __fmul_rn(__fsub_rn(k.v_reset, h), sg));
  }
  if (k.detach) return 1.0f;
  return __fsub_rn(1.0f, __fmul_rn(k.v_th, sg));
}

// Input element e: from the activation array, or from packed bits when x is null.
template <typename T>
__device__ __forceinline__ float load_input(const T* x, const uint32_t* x_bits, int64_t e) {
  if (x) return to_f32(x[e]);
  return ((x_bits[e >> 5] >> (e & 31)) & 1u) ? 1.0f : 0.0f;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    neuron_forward_kernel(NeuronF32 k, const T* __restrict__ x, int64_t steps, int64_t M,
                          float* __restrict__ v, T* __restrict__ spikes,
                          uint32_t* __restrict__ bits, bool bits_aligned,
                          unsigned long long* __restrict__ fired) {
  const int lane = threadIdx.x & 31;
  unsigned int my_fired = 0;  // <= steps per neuron, a few neurons per thread
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads; base < M;
       base += detail::grid_stride()) {
    const int64_t i = base + threadIdx.x;
    const bool active = i < M;
    const int64_t warp_first = base + (threadIdx.x - lane);  // neuron of lane 0
    float vi = k.rest;
    if (active && v) vi = v[i];
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t e = t * M + i;
      bool stepped = false;
      if (active) {
        const float h = charge(k, vi, to_f32(x[e]));
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
__device__ void store_checkpoints(const NeuronF32& k, const T* x, const uint32_t* x_bits,
                                  float v, int64_t chunks, int64_t M, int64_t i, float* ckpt) {
  for (int64_t c = 1; c < chunks; ++c) {
    for (int64_t t = (c - 1) * kNeuronChunk; t < c * kNeuronChunk; ++t) {
      const float h = charge(k, v, load_input(x, x_bits, t * M + i));
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
                           const float* __restrict__ grad_v_in, float* __restrict__ grad_v_out) {
  constexpr int K = kNeuronChunk;
  const int64_t chunks = (steps + K - 1) / K;
  double acc_r = 0.0;  // this thread's share of d(loss)/dr
  for (int64_t i = detail::global_thread(); i < M; i += detail::grid_stride()) {
    const float v0 = v_init ? v_init[i] : k.rest;
    if (chunks > 1) store_checkpoints(k, x, x_bits, v0, chunks, M, i, ckpt);
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
          const float hj = charge(k, v, load_input(x, x_bits, (t0 + j) * M + i));
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
                         cudaStream_t stream) {
  SM_CHECK(steps >= 0 && M >= 0, "neuron_forward_cuda: bad size T=" << steps << " M=" << M);
  SM_CHECK(!(spike_bits && c.smooth), "neuron_forward_cuda: spike bits requested in smooth mode");
  auto* fired_u = reinterpret_cast<unsigned long long*>(fired);
  if (fired) SM_CUDA_CHECK(cudaMemsetAsync(fired, 0, sizeof(int64_t), stream));
  const bool aligned = M % 32 == 0;
  if (spike_bits && !aligned && steps * M > 0)
    SM_CUDA_CHECK(cudaMemsetAsync(spike_bits, 0, spike_words(steps * M) * sizeof(uint32_t), stream));
  if (M == 0) return;
  if (steps == 0) return;  // v unchanged, nothing to write
  neuron_forward_kernel<T><<<detail::blocks_for(M), kThreads, 0, stream>>>(
      to_f32_config(c), x, steps, M, v, spikes, spike_bits, aligned, fired_u);
  SM_CUDA_CHECK_LAUNCH();
}

template <typename T>
void neuron_backward_cuda(const cpu::NeuronKernelConfig& c, const T* grad_s, const T* x,
                          const uint32_t* x_bits, const float* v_init, int64_t steps, int64_t M,
                          T* grad_x, double* grad_r, cudaStream_t stream, const float* grad_v_in,
                          float* grad_v_out) {
  SM_CHECK(steps >= 0 && M >= 0, "neuron_backward_cuda: bad size T=" << steps << " M=" << M);
  SM_CHECK(steps > 0 || !grad_v_out, "neuron_backward_cuda: a membrane-gradient carry over 0 steps");
  SM_CHECK((x == nullptr) != (x_bits == nullptr),
           "neuron_backward_cuda: pass exactly one of x and x_bits");
  SM_CHECK(!(grad_r && c.decay_input && c.r <= 0.0), "rate gradient needs r > 0, got " << c.r);
  if (steps * M == 0) {
    if (grad_r) SM_CUDA_CHECK(cudaMemsetAsync(grad_r, 0, sizeof(double), stream));
    return;
  }
  const int64_t chunks = (steps + kNeuronChunk - 1) / kNeuronChunk;
  // With a rate gradient the grid is ceil(M / kThreads) (a function of M only) and every
  // block writes its partial; without, the usual capped grid-stride grid.
  const int grid = grad_r ? detail::blocks_for(M, INT32_MAX) : detail::blocks_for(M);
  detail::Scratch ckpt(chunks > 1 ? static_cast<size_t>((chunks - 1) * M) * sizeof(float) : 0, stream);
  detail::Scratch partials(grad_r ? static_cast<size_t>(grid) * sizeof(double) : 0, stream);
  neuron_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
      to_f32_config(c), grad_s, x, x_bits, v_init, steps, M, grad_x, ckpt.as<float>(),
      partials.as<double>(), grad_v_in, grad_v_out);
  SM_CUDA_CHECK_LAUNCH();
  if (grad_r) detail::sum_partials(partials.as<double>(), grid, grad_r, false, stream);
}

#define SM_NEURON_INSTANTIATE(T)                                                              \
  template void neuron_forward_cuda<T>(const cpu::NeuronKernelConfig&, const T*, int64_t,     \
                                       int64_t, float*, T*, uint32_t*, int64_t*, cudaStream_t); \
  template void neuron_backward_cuda<T>(const cpu::NeuronKernelConfig&, const T*, const T*,  \
                                        const uint32_t*, const float*, int64_t, int64_t, T*,  \
                                        double*, cudaStream_t, const float*, float*);
SM_NEURON_INSTANTIATE(float)
SM_NEURON_INSTANTIATE(__nv_bfloat16)
SM_NEURON_INSTANTIATE(__half)
#undef SM_NEURON_INSTANTIATE

}  // namespace cuda
}  // namespace sm
