// neuron_math.cuh (kernels/cuda, internal) — the per-element arithmetic of the fused neuron
// kernels (charge, fire, reset, surrogate gradient, dv/dh), shared by the generic kernels of
// neuron.cu and the vectorised compile-time variants of neuron_vec.cu. Only included by
// src/kernels/cuda/neuron*.cu.
//
// Invariant: every operation is explicitly rounded (__fadd_rn, __fmul_rn, ...), so nvcc never
// contracts them into FMAs and h_t is the CPU f32 kernel's h_t bit for bit. Each function
// exists once as a template on the compile-time flag(s); the runtime-flag forms the generic
// kernels use call the same templates, so both kernel families compute identical bits.
#pragma once
#include "common.cuh"
#include "spikemesh/kernels/cpu/neuron.h"

namespace sm {
namespace cuda {
namespace neuron_detail {

constexpr float kPi = 3.14159265358979323846f;
constexpr float kPiHalf = 1.57079632679489661923f;  // = float(M_PI / 2), as the CPU's T(M_PI / 2)

// The configuration in f32, exactly as the CPU kernel converts it (T(c.r), ...).
struct NeuronF32 {
  float r, one_minus_r, v_th, v_r_charge, v_reset, alpha, rest, x_scale;
  bool decay_input, hard_reset, detach, smooth, atan;
};

inline NeuronF32 to_f32_config(const cpu::NeuronKernelConfig& c) {
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
template <bool kDecay>
__device__ __forceinline__ float charge_t(const NeuronF32& k, float v, float x) {
  if (kDecay) return __fadd_rn(v, __fmul_rn(k.r, __fsub_rn(x, __fsub_rn(v, k.v_r_charge))));
  return __fadd_rn(__fsub_rn(v, __fmul_rn(k.r, __fsub_rn(v, k.v_r_charge))), x);
}

// The surrogate's primitive at h (smooth spikes).
template <bool kAtan>
__device__ __forceinline__ float smooth_spike_t(const NeuronF32& k, float h) {
  const float u = __fsub_rn(h, k.v_th);
  if (kAtan) return __fadd_rn(__fdiv_rn(atanf(__fmul_rn(__fmul_rn(kPiHalf, k.alpha), u)), kPi), 0.5f);
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__fmul_rn(k.alpha, u))));
}

// How a spike is made: the step, or the surrogate's primitive (smooth mode).
enum class FireMode : int { Step = 0, SmoothSigmoid = 1, SmoothAtan = 2 };

template <FireMode kFire>
__device__ __forceinline__ float fire_t(const NeuronF32& k, float h) {
  if (kFire == FireMode::Step) return h >= k.v_th ? 1.0f : 0.0f;
  return smooth_spike_t<kFire == FireMode::SmoothAtan>(k, h);
}

// V' = S·V_reset + (1 - S)·H (hard) or H - S·v_th (soft).
template <bool kHard>
__device__ __forceinline__ float reset_t(const NeuronF32& k, float h, float s) {
  if (kHard) return __fadd_rn(__fmul_rn(s, k.v_reset), __fmul_rn(__fsub_rn(1.0f, s), h));
  return __fsub_rn(h, __fmul_rn(s, k.v_th));
}

// surrogate'(h - v_th).
template <bool kAtan>
__device__ __forceinline__ float surrogate_grad_t(const NeuronF32& k, float h) {
  const float u = __fsub_rn(h, k.v_th);
  if (kAtan) {
    const float z = __fmul_rn(__fmul_rn(kPiHalf, k.alpha), u);
    return __fdiv_rn(__fdiv_rn(k.alpha, 2.0f), __fadd_rn(1.0f, __fmul_rn(z, z)));
  }
  const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-__fmul_rn(k.alpha, u))));
  return __fmul_rn(__fmul_rn(k.alpha, sig), __fsub_rn(1.0f, sig));
}

// ∂v_t/∂h_t given s_t and sg_t.
template <bool kHard, bool kDetach>
__device__ __forceinline__ float dv_dh_t(const NeuronF32& k, float h, float s, float sg) {
  if (kHard) {
    if (kDetach) return __fsub_rn(1.0f, s);
    return __fadd_rn(__fsub_rn(1.0f, s), __fmul_rn(__fsub_rn(k.v_reset, h), sg));
  }
  if (kDetach) return 1.0f;
  return __fsub_rn(1.0f, __fmul_rn(k.v_th, sg));
}

// Runtime-flag forms (generic kernels): the same templates, chosen per call.
__device__ __forceinline__ float charge(const NeuronF32& k, float v, float x) {
  return k.decay_input ? charge_t<true>(k, v, x) : charge_t<false>(k, v, x);
}
__device__ __forceinline__ float fire(const NeuronF32& k, float h) {
  if (!k.smooth) return fire_t<FireMode::Step>(k, h);
  return k.atan ? fire_t<FireMode::SmoothAtan>(k, h) : fire_t<FireMode::SmoothSigmoid>(k, h);
}
__device__ __forceinline__ float reset(const NeuronF32& k, float h, float s) {
  return k.hard_reset ? reset_t<true>(k, h, s) : reset_t<false>(k, h, s);
}
__device__ __forceinline__ float surrogate_grad(const NeuronF32& k, float h) {
  return k.atan ? surrogate_grad_t<true>(k, h) : surrogate_grad_t<false>(k, h);
}
__device__ __forceinline__ float dv_dh(const NeuronF32& k, float h, float s, float sg) {
  if (k.hard_reset) return k.detach ? dv_dh_t<true, true>(k, h, s, sg) : dv_dh_t<true, false>(k, h, s, sg);
  return k.detach ? dv_dh_t<false, true>(k, h, s, sg) : dv_dh_t<false, false>(k, h, s, sg);
}

// Batch norm's affine apply as the neuron reads its input (the fused epilogue): per channel
// x' = fma(x - center, scale, offset) in f32 (center and scale rounded from double first,
// exactly as bn_normalize_cuda computes it), then rounded to the activation type T and back,
// as the unfused path stores the normalised tensor in T before the neuron reads it.
struct ChannelAffine {
  float center = 0.0f, scale = 1.0f, offset = 0.0f;
};

template <typename T>
__device__ __forceinline__ float apply_affine(const ChannelAffine& a, float x) {
  return to_f32(from_f32<T>(__fmaf_rn(__fsub_rn(x, a.center), a.scale, a.offset)));
}

// The channel affine of neuron m (M = N·C·inner per step).
__device__ __forceinline__ ChannelAffine channel_affine(const double* center, const double* scale,
                                                        const float* offset, int64_t channels,
                                                        int64_t inner, int64_t m) {
  const int64_t c = (m / inner) % channels;
  ChannelAffine a;
  a.center = static_cast<float>(center[c]);
  a.scale = static_cast<float>(scale[c]);
  a.offset = offset[c];
  return a;
}

}  // namespace neuron_detail
}  // namespace cuda
}  // namespace sm
