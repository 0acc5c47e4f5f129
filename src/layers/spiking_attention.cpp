// spiking_attention.cpp — SpikingAttention ("ssa") CPU hooks over kernels/cpu/spiking_attention.h.
// Saved per slot: the input qkv [T, N, 3C, L] as a SavedActivation (u8 bits, 1/32 of f32,
// when x is flagged binary; else a reference). The forward's exact counting path is taken
// only for binary inputs. No parameters: B always releases the slot.
#include "spikemesh/layers/spiking_attention.h"

#include <cmath>

#include "device_ops.h"
#include "spikemesh/core/bitpack.h"
#include "spikemesh/kernels/cpu/spiking_attention.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

using Slots = SlotStore<SavedActivation>;  // qkv [T, N, 3C, L] of each slot's forward

Slots& slots_of(const std::shared_ptr<void>& p) { return *static_cast<Slots*>(p.get()); }

}  // namespace

cpu::SsaGeom SpikingAttention::geometry(const Shape& qkv) const {  // qkv: [T, N, 3C, L]
  cpu::SsaGeom g;
  g.batch = qkv[0] * qkv[1];
  g.heads = heads_;
  g.d = qkv[2] / 3 / heads_;
  g.L = qkv[3];
  return g;
}

SpikingAttention::SpikingAttention(int heads, double scale) : heads_(heads), scale_(scale) {
  if (heads < 1) SM_INPUT_ERROR("ssa: heads must be >= 1, got " << heads);
  if (!std::isfinite(scale)) SM_INPUT_ERROR("ssa: scale must be a finite number, got " << scale);
  impl_ = std::make_shared<Slots>();
}

void SpikingAttention::split_heads(int parts) {
  SM_CHECK(parts >= 1 && heads_ % parts == 0, "ssa '" << name() << "': " << heads_ << " heads cannot be split " << parts << " ways");
  heads_ /= parts;
}

Shape SpikingAttention::output_shape(const Shape& in) const {
  if (in.size() != 2)
    SM_INPUT_ERROR("ssa expects per-sample input [3C, L] (q, k, v channels, tokens), got " << shape_str(in));
  if (in[0] < 1 || in[1] < 1) SM_INPUT_ERROR("ssa input " << shape_str(in) << " is empty");
  if (in[0] % 3 != 0)
    SM_INPUT_ERROR("ssa expects 3C channels (q, k, v stacked), got " << in[0] << ", which is not divisible by 3");
  const int64_t C = in[0] / 3;
  if (C % heads_ != 0)
    SM_INPUT_ERROR("ssa with " << heads_ << " heads needs C = " << C << " (input channels " << in[0]
                               << " = 3C) divisible by heads");
  return {C, in[1]};
}

Tensor SpikingAttention::forward_cpu(const Tensor& x, Ctx& ctx) {
  SM_CHECK(x.ndim() == 4, "ssa input must be [T, N, 3C, L], got " << shape_str(x.shape()));
  layer_ops::check_activation(x, "ssa", name());
  const Shape ps = output_shape({x.dim(2), x.dim(3)});  // [C, L]
  const cpu::SsaGeom g = geometry(x.shape());
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), ps[0], ps[1]}, x.dtype(), x.device());  // [T, N, C, L]
  const bool binary = x.is_binary();
  if (x.dtype() == DType::F64)
    cpu::ssa_forward<double>(x.data<double>(), g, scale_, binary, y.data<double>());
  else
    cpu::ssa_forward<float>(x.data<float>(), g, scale_, binary, y.data<float>());
  slots_of(impl_).fresh(ctx.slot) = SavedActivation::save(x);  // bits when binary
  return y;                                                     // not binary: multiples of scale
}

Tensor SpikingAttention::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  Slots& slots = slots_of(impl_);
  const Tensor qkv = slots.get(ctx.slot).restore();  // [T, N, 3C, L] (unpacked if bits)
  slots.release(ctx.slot);
  const Shape& xs = qkv.shape();
  const Shape ys{xs[0], xs[1], xs[2] / 3, xs[3]};  // [T, N, C, L]
  SM_CHECK(dy.shape() == ys && dy.dtype() == qkv.dtype(),
           "ssa backward: dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()) << " does not match output "
                               << shape_str(ys) << " " << dtype_name(qkv.dtype()));
  const cpu::SsaGeom g = geometry(xs);
  Tensor dx = Tensor::empty(xs, dy.dtype(), dy.device());  // [T, N, 3C, L]
  if (dy.dtype() == DType::F64)
    cpu::ssa_backward<double>(dy.data<double>(), qkv.data<double>(), g, scale_, qkv.is_binary(), dx.data<double>());
  else
    cpu::ssa_backward<float>(dy.data<float>(), qkv.data<float>(), g, scale_, qkv.is_binary(), dx.data<float>());
  return dx;
}

}  // namespace sm
