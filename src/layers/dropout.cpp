// dropout.cpp — Dropout with one mask per (sample, feature) shared by all time steps.
// Invariants: the mask of sample n is drawn from CounterRng(ctx.seed, "dropout/" + name())
// at element index f (feature within the sample), sub-stream (low 32 bits of ctx.step,
// ctx.sample_offset + n) — independent of rank and of how the batch is split; the slot keeps
// only the mask bits (u8, LSB first); in eval or with p == 0 the layer is the identity.
#include "spikemesh/layers/dropout.h"

#include <algorithm>

#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cpu/dropout.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {

namespace {

struct DropoutSaved {
  bool identity = true;
  Tensor bits;  // u8 [ceil(N·F / 8)] keep mask, bit n·F + f
  Shape shape;  // [T, N, ...]
};

struct DropoutImpl {
  SlotStore<DropoutSaved> slots;
};

DropoutImpl& impl_of(const std::shared_ptr<void>& p) { return *static_cast<DropoutImpl*>(p.get()); }

// y = x ⊙ mask · scale over [T, N, F].
Tensor apply_mask(const Tensor& x, const Tensor& bits, double scale) {
  const int64_t steps = x.dim(0), N = x.dim(1), F = x.numel() / (steps * N);
  Tensor y = Tensor::empty(x.shape(), x.dtype());  // [T, N, ...]
  const uint8_t* b = bits.data<uint8_t>();
  if (x.dtype() == DType::F32)
    cpu::dropout_apply<float>(x.data<float>(), b, steps, N, F, static_cast<float>(scale), y.data<float>());
  else
    cpu::dropout_apply<double>(x.data<double>(), b, steps, N, F, scale, y.data<double>());
  return y;
}

}  // namespace

Dropout::Dropout(double p) : p_(p), impl_(std::make_shared<DropoutImpl>()) {
  if (!(p >= 0.0 && p <= 1.0)) SM_INPUT_ERROR("dropout probability must be in [0, 1], got " << p);
}

Tensor Dropout::forward_cpu(const Tensor& x, Ctx& ctx) {
  DropoutSaved& s = impl_of(impl_).slots.fresh(ctx.slot);
  s.shape = x.shape();
  if (!ctx.training || p_ == 0.0) return x;  // identity
  SM_CHECK(x.ndim() >= 2, "dropout '" << name() << "' expects [T, N, ...], got " << shape_str(x.shape()));
  SM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
           "dropout runs in f32 or f64, got " << dtype_name(x.dtype()));
  const int64_t N = x.dim(1), F = x.numel() / std::max<int64_t>(1, x.dim(0) * N);
  s.identity = false;
  s.bits = Tensor::empty({cpu::dropout_mask_bytes(N, F)}, DType::U8);
  const CounterRng rng(ctx.seed, "dropout/" + name());
  cpu::dropout_draw_mask(rng, p_, static_cast<uint32_t>(ctx.step), ctx.sample_offset, N, F,
                         s.bits.data<uint8_t>());
  return apply_mask(x, s.bits, p_ < 1.0 ? 1.0 / (1.0 - p_) : 0.0);
}

Tensor Dropout::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  DropoutImpl& im = impl_of(impl_);
  DropoutSaved& s = im.slots.get(ctx.slot);
  SM_CHECK(dy.shape() == s.shape, "dropout '" << name() << "': gradient " << shape_str(dy.shape())
                                              << " does not match the forward output " << shape_str(s.shape));
  Tensor dx = s.identity ? dy : apply_mask(dy, s.bits, p_ < 1.0 ? 1.0 / (1.0 - p_) : 0.0);
  im.slots.release(ctx.slot);  // no parameters: nothing is left for W
  return dx;
}

}  // namespace sm
