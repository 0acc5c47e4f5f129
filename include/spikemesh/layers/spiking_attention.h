// spiking_attention.h — Spikformer's spiking self-attention core, type "ssa" (docs/semantics.md §3;
// SpikingJelly 2.0 SpikingSelfAttention._ssa_kernel_torch): [T, N, 3C, L] q/k/v spikes
// (channel part·C + head·d + j, part 0 = q, 1 = k, 2 = v, d = C/heads) -> [T, N, C, L],
// per (t, n, head) out = (V·Kᵀ)·Q·scale (no softmax). Stateless and without parameters; the
// attention LIF that follows it in the spec is a separate layer.
// Invariants: forward saves only its input in the slot ctx.slot — as bits when it is flagged
// binary, else a reference (layers never write their inputs); B returns d(qkv) and releases
// the slot. The output is not binary (multiples of scale). Non-binary input is accepted
// (gradient checks). CPU hooks: spiking_attention.cpp (the reference); CUDA hooks (CUDA
// builds): spiking_attention_cuda.cpp (popcount forward on spikes, else a tiled f32 GEMM).
#pragma once
#include "spikemesh/kernels/cpu/spiking_attention.h"
#include "spikemesh/layers/layer.h"

namespace sm {

class SpikingAttention : public Layer {
 public:
  explicit SpikingAttention(int heads, double scale = 0.125);  // throws Input on heads < 1
  Shape output_shape(const Shape& in) const override;         // [3C, L] -> [C, L]
  std::string type() const override { return "ssa"; }
  int heads() const { return heads_; }
  double scale() const { return scale_; }
  // Tensor parallelism by heads: this rank runs heads()/parts of the heads (its q, k, v
  // channel blocks; parallel/tp_plan.cpp). Before the first forward; heads % parts == 0.
  void split_heads(int parts);

 protected:
  SM_LEAF_HOOKS

 private:
  // The kernels' view of an input qkv [T, N, 3C, L] (both devices).
  cpu::SsaGeom geometry(const Shape& qkv) const;

  int heads_;
  double scale_;
};

}  // namespace sm
