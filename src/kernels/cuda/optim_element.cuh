// optim_element.cuh (kernels/cuda, internal) — the per-element SGD and Adam/AdamW updates,
// shared by the per-tensor kernels (optim.cu) and the multi-tensor kernels (optim_multi.cu)
// so that both compute bitwise the same values: the CPU's expression order (sgd.cpp,
// adam.cpp) evaluated in double, the state and the weight stored rounded to f32, and
// optionally the updated weight also stored as bf16 (a compute copy).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace sm {
namespace cuda {
namespace detail {

// torch.optim.SGD, element i. buf nullptr: no momentum.
__device__ __forceinline__ void sgd_element(float* __restrict__ p, const float* __restrict__ g,
                                            float* __restrict__ buf, __nv_bfloat16* __restrict__ p_bf16,
                                            int64_t i, double lr, double weight_decay, double momentum,
                                            bool nesterov) {
  const double pi = p[i];
  double d = g[i];
  if (weight_decay != 0.0) d = d + weight_decay * pi;  // grad.add(param, alpha=wd)
  if (buf) {
    const float b = static_cast<float>(static_cast<double>(buf[i]) * momentum + d);
    buf[i] = b;
    d = nesterov ? d + momentum * static_cast<double>(b) : static_cast<double>(b);
  }
  const float pn = static_cast<float>(pi + (-lr) * d);  // param.add_(d, alpha=-lr)
  p[i] = pn;
  if (p_bf16) p_bf16[i] = __float2bfloat16_rn(pn);
}

// torch.lerp as computed by ATen (two forms for accuracy near w = 1).
__device__ __forceinline__ double lerp_aten(double start, double end, double w) {
  return fabs(w) < 0.5 ? start + w * (end - start) : end - (end - start) * (1.0 - w);
}

// torch.optim.Adam (l2 = wd) / AdamW (decay_factor = 1 - lr·wd), element i.
__device__ __forceinline__ void adam_element(float* __restrict__ p, const float* __restrict__ g,
                                             float* __restrict__ m, float* __restrict__ v,
                                             __nv_bfloat16* __restrict__ p_bf16, int64_t i, double l2,
                                             double decay_factor, double beta1, double beta2, double eps,
                                             double step_size, double bias_corr2_sqrt) {
  double pi = p[i];
  double gi = g[i];
  if (l2 != 0.0) gi = gi + l2 * pi;                     // Adam: grad.add(param, alpha=wd)
  if (decay_factor != 1.0) pi = pi * decay_factor;      // AdamW: param.mul_(1 - lr·wd)
  const float m_new = static_cast<float>(lerp_aten(m[i], gi, 1.0 - beta1));
  const float v_new = static_cast<float>(static_cast<double>(v[i]) * beta2 + (1.0 - beta2) * gi * gi);
  m[i] = m_new;
  v[i] = v_new;
  const double denom = sqrt(static_cast<double>(v_new)) / bias_corr2_sqrt + eps;
  const float pn = static_cast<float>(pi + (-step_size) * static_cast<double>(m_new) / denom);
  p[i] = pn;
  if (p_bf16) p_bf16[i] = __float2bfloat16_rn(pn);
}

}  // namespace detail
}  // namespace cuda
}  // namespace sm
