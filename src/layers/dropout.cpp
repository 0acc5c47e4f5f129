// dropout.cpp — Dropout with one mask per (sample, feature) shared by all time steps, one flow
// for both devices (kernels per device: dropout_kernels.h).
// Invariants: the mask of sample n is drawn from CounterRng(ctx.seed, "dropout/" + name())
// at element index f (feature within the sample), sub-stream (low 32 bits of ctx.step,
// ctx.sample_offset + n) — independent of rank and of how the batch is split; the slot keeps
// only the mask bits (u8, LSB first); in eval or with p == 0 the layer is the identity.
// No parameters: B releases the slot.
#include "spikemesh/layers/dropout.h"

#include <algorithm>

#include "device_ops.h"
#include "dropout_kernels.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/graph_capture_cuda.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cpu/dropout.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {

namespace {

struct DropoutSaved {
  bool identity = true;
  Tensor bits;  // u8 [ceil(N·F / 8)] keep mask, bit n·F + f, on the input's device
  Shape shape;  // [T, N, ...]
};

SlotStore<DropoutSaved>& slots_of(const std::shared_ptr<void>& p) {
  return *static_cast<SlotStore<DropoutSaved>*>(p.get());
}

Tensor draw_mask(const dropout_kernels::MaskSpec& s, Device dev) {
#ifdef SPIKEMESH_HAVE_CUDA
  if (dev.is_cuda()) return dropout_kernels::draw_mask_cuda(s, dev);
#endif
  Tensor bits = Tensor::empty({cpu::dropout_mask_bytes(s.N, s.F)}, DType::U8);
  cpu::dropout_draw_mask(CounterRng(s.seed, s.stream), s.p, s.step, s.sample_offset, s.N, s.F, bits.data<uint8_t>());
  return bits;
}

// y = x ⊙ mask · scale over [T, N, F].
Tensor apply_mask(const Tensor& x, const Tensor& bits, double p) {
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  const int64_t steps = x.dim(0), N = x.dim(1), F = x.numel() / std::max<int64_t>(1, steps * N);
#ifdef SPIKEMESH_HAVE_CUDA
  if (x.device().is_cuda()) return dropout_kernels::apply_mask_cuda(x, bits, N, F, scale);
#endif
  Tensor y = Tensor::empty(x.shape(), x.dtype());  // [T, N, ...]
  const uint8_t* b = bits.data<uint8_t>();
  if (x.dtype() == DType::F32)
    cpu::dropout_apply<float>(x.data<float>(), b, steps, N, F, static_cast<float>(scale), y.data<float>());
  else
    cpu::dropout_apply<double>(x.data<double>(), b, steps, N, F, scale, y.data<double>());
  return y;
}

}  // namespace

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0)) SM_INPUT_ERROR("dropout probability must be in [0, 1], got " << p);
  impl_ = std::make_shared<SlotStore<DropoutSaved>>();
}

Tensor Dropout::forward_cpu(const Tensor& x, Ctx& ctx) {  // both devices
  DropoutSaved& s = slots_of(impl_).fresh(ctx.slot);
  s.shape = x.shape();
  if (!ctx.training || p_ == 0.0) return x;  // identity
  SM_CHECK(x.ndim() >= 2, "dropout '" << name() << "' expects [T, N, ...], got " << shape_str(x.shape()));
  layer_ops::check_activation(x, "dropout", name());
  CudaAllocLabel label("dropout forward", &name_);
  dropout_kernels::MaskSpec m;
  m.seed = ctx.seed;
  m.stream = "dropout/" + name();
  m.p = p_;
  m.step = static_cast<uint32_t>(ctx.step);
  if (x.device().is_cuda())
    if (const GraphCapture* g = active_graph_capture()) {  // the step changes per replay
      if (!g->step_on_device) refuse_graph_capture("dropout '" + name() + "' has no device step counter");
      m.step_on_device = g->step_on_device;
    }
  m.sample_offset = ctx.sample_offset;
  if (x.device().is_cuda())
    if (const GraphCapture* g = active_graph_capture(); g && g->sample_offset_on_device) {
      // The micro-batch's offset is read at run time: the graph keeps only this layer's
      // distance from it (a replay per micro-batch of a gradient-accumulation step).
      m.sample_offset_on_device = g->sample_offset_on_device;
      m.sample_offset = ctx.sample_offset - g->sample_offset_base;
    }
  m.N = x.dim(1);
  m.F = x.numel() / std::max<int64_t>(1, x.dim(0) * m.N);
  s.identity = false;
  s.bits = draw_mask(m, x.device());
  return apply_mask(x, s.bits, p_);
}

Tensor Dropout::backward_input_cpu(const Tensor& dy, Ctx& ctx) {  // both devices
  auto& slots = slots_of(impl_);
  DropoutSaved& s = slots.get(ctx.slot);
  SM_CHECK(dy.shape() == s.shape, "dropout '" << name() << "': gradient " << shape_str(dy.shape())
                                              << " does not match the forward output " << shape_str(s.shape));
  CudaAllocLabel label("dropout backward", &name_);
  Tensor dx = s.identity ? dy : apply_mask(dy, s.bits, p_);
  slots.release(ctx.slot);  // no parameters: nothing is left for W
  return dx;
}

}  // namespace sm
