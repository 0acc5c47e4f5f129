// neuron_vec.cu (kernels/cuda) — the vectorised compile-time variants of the fused neuron
// kernels (see kernels/cuda/neuron.h and kernels/neuron_variant.h for when they run).
//
// A thread owns V consecutive neurons i0 = g·V .. g·V + V-1 and moves them with one vector
// access per tensor and step (forward: 16 bytes; backward: V = min(2, 16 / sizeof(T)), the
// register budget: kernels/neuron_variant.h).
// Indices are 32-bit (the caller checked T·M fits). Reset mode, decay_input, the fire mode
// (step / smooth sigmoid / smooth atan), the surrogate and detach are template parameters.
// Inputs are loaded kAhead steps at a time before any of them is used, so each thread keeps
// several independent loads in flight. The arithmetic is neuron_math.cuh's, the same
// explicitly rounded operations as the generic kernels: the same bits.
// Spike bits: lanes of a warp hold 32·V consecutive neurons; each lane makes a V-bit mask,
// groups of 32 / V lanes OR theirs into one word with shuffles, and the group's first lane
// stores it (M % 32 == 0: every word starts a group, no atomics).
#include <climits>
#include <type_traits>

#include "neuron_vec.cuh"
#include "spikemesh/kernels/neuron_variant.h"

namespace sm {
namespace cuda {
namespace neuron_detail {
namespace {

constexpr int kAhead = 4;  // steps loaded ahead into registers

template <int Bytes> struct RawVec;
template <> struct RawVec<16> { using type = uint4; };
template <> struct RawVec<8> { using type = uint2; };
template <> struct RawVec<4> { using type = uint32_t; };

// V elements of T at p (aligned to V elements) -> f32.
template <typename T, int V>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&out)[V]) {
  using R = typename RawVec<sizeof(T) * V>::type;
  const R raw = __ldg(reinterpret_cast<const R*>(p));
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int q = 0; q < V; ++q) out[q] = to_f32(e[q]);
}

template <typename T, int V>
__device__ __forceinline__ void store_vec(T* __restrict__ p, const float (&in)[V]) {
  using R = typename RawVec<sizeof(T) * V>::type;
  R raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int q = 0; q < V; ++q) e[q] = from_f32<T>(in[q]);
  *reinterpret_cast<R*>(p) = raw;
}

// V bits of a packed spike array at element e (e % V == 0: all in one word).
template <int V>
__device__ __forceinline__ void load_bits(const uint32_t* __restrict__ bits, uint32_t e, float (&out)[V]) {
  const uint32_t w = __ldg(bits + (e >> 5)) >> (e & 31u);
#pragma unroll
  for (int q = 0; q < V; ++q) out[q] = ((w >> q) & 1u) ? 1.0f : 0.0f;
}

// The input of V neurons at element e, fused batch norm applied when `aff` is set.
template <typename T, int V>
__device__ __forceinline__ void load_input(const T* x, const uint32_t* x_bits, uint32_t e, bool has_affine,
                                           const ChannelAffine (&aff)[V], float (&out)[V]) {
  if (x) {
    load_vec<T, V>(x + e, out);
  } else {
    load_bits<V>(x_bits, e, out);
  }
  if (has_affine) {
#pragma unroll
    for (int q = 0; q < V; ++q) out[q] = apply_affine<T>(aff[q], out[q]);
  }
}

template <int V>
__device__ __forceinline__ void neuron_affines(const NeuronAffineCuda& a, uint32_t i0, ChannelAffine (&out)[V]) {
#pragma unroll
  for (int q = 0; q < V; ++q)
    out[q] = channel_affine(a.center, a.scale, a.offset, a.channels, a.inner, static_cast<int64_t>(i0) + q);
}

template <typename T, int V, bool kDecay, bool kHard, FireMode kFire>
__global__ void __launch_bounds__(kThreads)
    forward_vec_kernel(NeuronF32 k, const T* __restrict__ x, uint32_t steps, uint32_t M, float* __restrict__ v,
                       T* __restrict__ spikes, uint32_t* __restrict__ bits, unsigned long long* __restrict__ fired,
                       NeuronAffineCuda affine) {
  constexpr int L = 32 / V;  // lanes per bit word
  const uint32_t groups = M / V;
  const int lane = threadIdx.x & 31;
  const bool has_affine = affine.center != nullptr;
  unsigned int my_fired = 0;
  for (uint32_t base = blockIdx.x * kThreads; base < groups; base += gridDim.x * kThreads) {
    const uint32_t g = base + threadIdx.x;
    const bool active = g < groups;
    const uint32_t i0 = (active ? g : 0u) * V;
    ChannelAffine aff[V];
    if (has_affine) neuron_affines<V>(affine, i0, aff);
    float vm[V];
#pragma unroll
    for (int q = 0; q < V; ++q) vm[q] = (active && v) ? v[i0 + q] : k.rest;
    for (uint32_t t0 = 0; t0 < steps; t0 += kAhead) {
      float in[kAhead][V];
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (active && t0 + j < steps) load_input<T, V>(x, nullptr, (t0 + j) * M + i0, has_affine, aff, in[j]);
#pragma unroll
      for (int j = 0; j < kAhead; ++j) {
        if (t0 + j >= steps) break;  // uniform over the block
        const uint32_t e = (t0 + j) * M + i0;
        uint32_t mask = 0;
        if (active) {
          float s[V];
#pragma unroll
          for (int q = 0; q < V; ++q) {
            const float h = charge_t<kDecay>(k, vm[q], in[j][q]);
            s[q] = fire_t<kFire>(k, h);
            mask |= (h >= k.v_th ? 1u : 0u) << q;
            vm[q] = reset_t<kHard>(k, h, s[q]);
          }
          my_fired += __popc(mask);
          store_vec<T, V>(spikes + e, s);
        }
        if (bits) {  // uniform: every lane reaches the shuffles
          uint32_t word = mask << (V * (lane % L));
#pragma unroll
          for (int off = 1; off < L; off <<= 1) word |= __shfl_xor_sync(0xffffffffu, word, off);
          if (active && lane % L == 0) bits[e >> 5] = word;
        }
      }
    }
    if (active && v) {
#pragma unroll
      for (int q = 0; q < V; ++q) v[i0 + q] = vm[q];
    }
  }
  if (fired) {  // integer sums: the total does not depend on the order of the atomics
    unsigned long long w = my_fired;
    for (int off = 16; off > 0; off >>= 1) w += __shfl_down_sync(0xffffffffu, w, off);
    if (lane == 0 && w != 0ull) atomicAdd(fired, w);
  }
}

// Membrane of V neurons at the start of chunk c (c >= 1) -> ckpt[(c - 1)·M + i0 + q].
template <typename T, int V, bool kDecay, bool kHard, bool kAtan>
__device__ void store_checkpoints_vec(const NeuronF32& k, const T* x, const uint32_t* x_bits, bool has_affine,
                                      const ChannelAffine (&aff)[V], float (&vm)[V], uint32_t chunks, uint32_t M,
                                      uint32_t i0, float* ckpt) {
  for (uint32_t c = 1; c < chunks; ++c) {
    for (uint32_t t = (c - 1) * kNeuronChunk; t < c * kNeuronChunk; t += kAhead) {
      float in[kAhead][V];
#pragma unroll
      for (int j = 0; j < kAhead; ++j) load_input<T, V>(x, x_bits, (t + j) * M + i0, has_affine, aff, in[j]);
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
#pragma unroll
        for (int q = 0; q < V; ++q) {
          const float h = charge_t<kDecay>(k, vm[q], in[j][q]);
          const float s = k.smooth ? smooth_spike_t<kAtan>(k, h) : fire_t<FireMode::Step>(k, h);
          vm[q] = reset_t<kHard>(k, h, s);
        }
    }
#pragma unroll
    for (int q = 0; q < V; ++q) ckpt[(c - 1) * M + i0 + q] = vm[q];
  }
}

// One chunk's forward recomputed from v_start: h[j] = h_{t0 + j} for j < len (static indices
// after unrolling: h stays in registers).
template <typename T, int V, bool kDecay, bool kHard, bool kAtan>
__device__ __forceinline__ void recompute_chunk_vec(const NeuronF32& k, const T* __restrict__ x,
                                                    const uint32_t* __restrict__ x_bits, bool has_affine,
                                                    const ChannelAffine (&aff)[V], uint32_t t0, int len, uint32_t M,
                                                    uint32_t i0, const float (&v_start)[V],
                                                    float (&h)[kNeuronChunk][V]) {
  constexpr int K = kNeuronChunk;
  float vm[V];
#pragma unroll
  for (int q = 0; q < V; ++q) vm[q] = v_start[q];
#pragma unroll
  for (int jb = 0; jb < K; jb += kAhead) {
    float in[kAhead][V];
#pragma unroll
    for (int j = 0; j < kAhead; ++j)
      if (jb + j < len) load_input<T, V>(x, x_bits, (t0 + jb + j) * M + i0, has_affine, aff, in[j]);
#pragma unroll
    for (int j = 0; j < kAhead; ++j)
      if (jb + j < len) {
#pragma unroll
        for (int q = 0; q < V; ++q) {
          const float hj = charge_t<kDecay>(k, vm[q], in[j][q]);
          h[jb + j][q] = hj;
          const float s = k.smooth ? smooth_spike_t<kAtan>(k, hj) : fire_t<FireMode::Step>(k, hj);
          vm[q] = reset_t<kHard>(k, hj, s);
        }
      }
  }
}

// BPTT through one recomputed chunk, last step first: grad_x of steps t0 .. t0 + len - 1 stored,
// g_v carried backwards (d loss / d v), and with_r: PLIF's d loss / d r added to acc_r.
template <typename T, int V, bool kDecay, bool kHard, bool kDetach, bool kAtan>
__device__ __forceinline__ void backward_chunk_vec(const NeuronF32& k, const T* __restrict__ grad_s,
                                                   const float (&h)[kNeuronChunk][V], const float (&v_start)[V],
                                                   uint32_t t0, int len, uint32_t M, uint32_t i0, bool with_r,
                                                   float (&g_v)[V], T* __restrict__ grad_x, double& acc_r) {
  constexpr int K = kNeuronChunk;
#pragma unroll
  for (int jb = K - kAhead; jb >= 0; jb -= kAhead) {
    float gs[kAhead][V];
#pragma unroll
    for (int j = 0; j < kAhead; ++j)
      if (jb + j < len) load_vec<T, V>(grad_s + (t0 + jb + j) * M + i0, gs[j]);
#pragma unroll
    for (int j = kAhead - 1; j >= 0; --j) {
      const int jj = jb + j;
      if (jj < len) {
        float gx[V];
#pragma unroll
        for (int q = 0; q < V; ++q) {
          const float hj = h[jj][q];
          const float sg = surrogate_grad_t<kAtan>(k, hj);
          const float s = k.smooth ? smooth_spike_t<kAtan>(k, hj) : fire_t<FireMode::Step>(k, hj);
          const float grad_h =
              __fadd_rn(__fmul_rn(gs[j][q], sg), __fmul_rn(g_v[q], dv_dh_t<kHard, kDetach>(k, hj, s, sg)));
          gx[q] = __fmul_rn(grad_h, k.x_scale);
          g_v[q] = __fmul_rn(grad_h, k.one_minus_r);
          if (with_r) {
            const float hp = h[jj > 0 ? jj - 1 : 0][q];  // h_{t-1} inside this chunk
            const float sp = k.smooth ? smooth_spike_t<kAtan>(k, hp) : fire_t<FireMode::Step>(k, hp);
            const float v_prev = jj > 0 ? reset_t<kHard>(k, hp, sp) : v_start[q];
            const float dh_dr = kDecay ? __fdiv_rn(__fsub_rn(hj, v_prev), k.r) : __fsub_rn(k.v_r_charge, v_prev);
            acc_r += static_cast<double>(__fmul_rn(grad_h, dh_dr));
          }
        }
        store_vec<T, V>(grad_x + (t0 + jj) * M + i0, gx);
      }
    }
  }
}

template <typename T, int V, bool kDecay, bool kHard, bool kDetach, bool kAtan>
__global__ void __launch_bounds__(kThreads, 2)
    backward_vec_kernel(NeuronF32 k, const T* __restrict__ grad_s, const T* __restrict__ x,
                        const uint32_t* __restrict__ x_bits, const float* __restrict__ v_init, uint32_t steps,
                        uint32_t M, T* __restrict__ grad_x, float* __restrict__ ckpt,
                        double* __restrict__ block_grad_r, const float* __restrict__ grad_v_in,
                        float* __restrict__ grad_v_out, NeuronAffineCuda affine) {
  constexpr int K = kNeuronChunk;
  static_assert(K % kAhead == 0, "chunk length must be a multiple of the look-ahead");
  const uint32_t chunks = (steps + K - 1) / K;
  const uint32_t groups = M / V;
  const bool has_affine = affine.center != nullptr;
  double acc_r = 0.0;  // this thread's share of d(loss)/dr
  for (uint32_t g = blockIdx.x * kThreads + threadIdx.x; g < groups; g += gridDim.x * kThreads) {
    const uint32_t i0 = g * V;
    ChannelAffine aff[V];
    if (has_affine) neuron_affines<V>(affine, i0, aff);
    float v0[V], g_v[V];
#pragma unroll
    for (int q = 0; q < V; ++q) {
      v0[q] = v_init ? v_init[i0 + q] : k.rest;
      g_v[q] = grad_v_in ? grad_v_in[i0 + q] : 0.0f;
    }
    if (chunks > 1) {
      float vm[V];
#pragma unroll
      for (int q = 0; q < V; ++q) vm[q] = v0[q];
      store_checkpoints_vec<T, V, kDecay, kHard, kAtan>(k, x, x_bits, has_affine, aff, vm, chunks, M, i0, ckpt);
    }
    for (int c = static_cast<int>(chunks) - 1; c >= 0; --c) {
      const uint32_t t0 = static_cast<uint32_t>(c) * K;
      const int len = static_cast<int>(steps - t0 < static_cast<uint32_t>(K) ? steps - t0 : K);
      float v_start[V];
#pragma unroll
      for (int q = 0; q < V; ++q) v_start[q] = c == 0 ? v0[q] : ckpt[(c - 1) * M + i0 + q];
      float h[K][V];  // h_t of this chunk; static indices only (stays in registers)
      recompute_chunk_vec<T, V, kDecay, kHard, kAtan>(k, x, x_bits, has_affine, aff, t0, len, M, i0, v_start, h);
      backward_chunk_vec<T, V, kDecay, kHard, kDetach, kAtan>(k, grad_s, h, v_start, t0, len, M, i0,
                                                              block_grad_r != nullptr, g_v, grad_x, acc_r);
    }
    if (grad_v_out) {
#pragma unroll
      for (int q = 0; q < V; ++q) grad_v_out[i0 + q] = g_v[q];
    }
  }
  if (block_grad_r) {  // uniform: every thread of the block gets here
    __shared__ double smem[kThreads];
    const double total = detail::block_sum(acc_r, smem);
    if (threadIdx.x == 0) block_grad_r[blockIdx.x] = total;
  }
}

// Calls f(std::integral_constant<bool, b>) for a runtime bool.
template <class F>
void with_bool(bool b, F&& f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

template <typename T>
constexpr int forward_v() { return neuron_variant::kForwardVectorBytes / static_cast<int>(sizeof(T)); }
template <typename T>
constexpr int backward_v() {
  return forward_v<T>() < neuron_variant::kBackwardMaxNeurons ? forward_v<T>() : neuron_variant::kBackwardMaxNeurons;
}

}  // namespace

template <typename T>
void forward_vec(const cpu::NeuronKernelConfig& c, const T* x, int64_t steps, int64_t M, float* v, T* spikes,
                 uint32_t* bits, unsigned long long* fired, const NeuronAffineCuda* affine, cudaStream_t stream) {
  constexpr int V = forward_v<T>();
  const NeuronF32 k = to_f32_config(c);
  const NeuronAffineCuda a = affine ? *affine : NeuronAffineCuda{};
  const int grid = detail::blocks_for(M / V);
  const FireMode mode = !c.smooth ? FireMode::Step
                        : c.surrogate == cpu::SurrogateFn::ATan ? FireMode::SmoothAtan
                                                                : FireMode::SmoothSigmoid;
  with_bool(c.decay_input, [&](auto decay) {
    with_bool(c.hard_reset, [&](auto hard) {
      auto launch = [&](auto kernel) {
        kernel<<<grid, kThreads, 0, stream>>>(k, x, static_cast<uint32_t>(steps), static_cast<uint32_t>(M), v, spikes,
                                              bits, fired, a);
      };
      constexpr bool kDecay = decltype(decay)::value, kHard = decltype(hard)::value;
      if (mode == FireMode::Step)
        launch(forward_vec_kernel<T, V, kDecay, kHard, FireMode::Step>);
      else if (mode == FireMode::SmoothSigmoid)
        launch(forward_vec_kernel<T, V, kDecay, kHard, FireMode::SmoothSigmoid>);
      else
        launch(forward_vec_kernel<T, V, kDecay, kHard, FireMode::SmoothAtan>);
    });
  });
  SM_CUDA_CHECK_LAUNCH();
}

int backward_vec_blocks(int64_t M, size_t elem_bytes) {
  return detail::blocks_for(M / neuron_variant::backward_neurons_per_thread(elem_bytes), INT32_MAX);
}

template <typename T>
void backward_vec(const cpu::NeuronKernelConfig& c, const T* grad_s, const T* x, const uint32_t* x_bits,
                  const float* v_init, int64_t steps, int64_t M, T* grad_x, float* ckpt, double* block_grad_r,
                  int grid, const float* grad_v_in, float* grad_v_out, const NeuronAffineCuda* affine,
                  cudaStream_t stream) {
  constexpr int V = backward_v<T>();
  const NeuronF32 k = to_f32_config(c);
  const NeuronAffineCuda a = affine ? *affine : NeuronAffineCuda{};
  with_bool(c.decay_input, [&](auto decay) {
    with_bool(c.hard_reset, [&](auto hard) {
      with_bool(c.detach_reset, [&](auto detach) {
        with_bool(c.surrogate == cpu::SurrogateFn::ATan, [&](auto atan_sg) {
          constexpr bool kDecay = decltype(decay)::value, kHard = decltype(hard)::value;
          constexpr bool kDetach = decltype(detach)::value, kAtan = decltype(atan_sg)::value;
          backward_vec_kernel<T, V, kDecay, kHard, kDetach, kAtan><<<grid, kThreads, 0, stream>>>(
              k, grad_s, x, x_bits, v_init, static_cast<uint32_t>(steps), static_cast<uint32_t>(M), grad_x, ckpt,
              block_grad_r, grad_v_in, grad_v_out, a);
        });
      });
    });
  });
  SM_CUDA_CHECK_LAUNCH();
}

#define SM_NEURON_VEC_INSTANTIATE(T)                                                                               \
  template void forward_vec<T>(const cpu::NeuronKernelConfig&, const T*, int64_t, int64_t, float*, T*, uint32_t*, \
                               unsigned long long*, const NeuronAffineCuda*, cudaStream_t);                       \
  template void backward_vec<T>(const cpu::NeuronKernelConfig&, const T*, const T*, const uint32_t*, const float*, \
                                int64_t, int64_t, T*, float*, double*, int, const float*, float*,                 \
                                const NeuronAffineCuda*, cudaStream_t);
SM_NEURON_VEC_INSTANTIATE(float)
SM_NEURON_VEC_INSTANTIATE(__nv_bfloat16)
SM_NEURON_VEC_INSTANTIATE(__half)
#undef SM_NEURON_VEC_INSTANTIATE

}  // namespace neuron_detail

double NeuronKernelOccupancy::forward_fraction() const {
  return max_threads_per_sm > 0 ? static_cast<double>(forward_blocks_per_sm) * threads_per_block / max_threads_per_sm
                                : 0.0;
}
double NeuronKernelOccupancy::backward_fraction() const {
  return max_threads_per_sm > 0 ? static_cast<double>(backward_blocks_per_sm) * threads_per_block / max_threads_per_sm
                                : 0.0;
}

namespace {
template <typename T>
NeuronKernelOccupancy occupancy_of() {
  using neuron_detail::FireMode;
  const void* fwd = reinterpret_cast<const void*>(
      neuron_detail::forward_vec_kernel<T, neuron_detail::forward_v<T>(), true, true, FireMode::Step>);
  const void* bwd = reinterpret_cast<const void*>(
      neuron_detail::backward_vec_kernel<T, neuron_detail::backward_v<T>(), true, true, false, false>);
  NeuronKernelOccupancy o;
  o.threads_per_block = kThreads;
  SM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o.forward_blocks_per_sm, fwd, kThreads, 0));
  SM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o.backward_blocks_per_sm, bwd, kThreads, 0));
  cudaFuncAttributes fa, ba;
  SM_CUDA_CHECK(cudaFuncGetAttributes(&fa, fwd));
  SM_CUDA_CHECK(cudaFuncGetAttributes(&ba, bwd));
  o.forward_registers = fa.numRegs;
  o.backward_registers = ba.numRegs;
  int dev = 0;
  SM_CUDA_CHECK(cudaGetDevice(&dev));
  SM_CUDA_CHECK(cudaDeviceGetAttribute(&o.max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev));
  return o;
}
}  // namespace

NeuronKernelOccupancy neuron_kernel_occupancy_cuda(bool bf16) {
  return bf16 ? occupancy_of<__nv_bfloat16>() : occupancy_of<float>();
}

}  // namespace cuda
}  // namespace sm
