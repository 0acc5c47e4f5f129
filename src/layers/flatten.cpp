// flatten.cpp — Flatten: [T, N, d1, d2, ...] -> [T, N, d1·d2·...] as a view (no copy); with
// start_dim s the per-sample dims before s are kept.
// Keeps the binary flag (spikes stay spikes). Saves only the input shape per slot; backward
// is the inverse view of dy. No parameters: B releases the slot.
#include "spikemesh/layers/flatten.h"

#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct Impl {
  SlotStore<Shape> in_shapes;  // [T, N, ...per-sample...] of each slot's forward input
};

Impl& impl_of(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<Impl>();
  return *static_cast<Impl*>(p.get());
}

}  // namespace

Shape Flatten::output_shape(const Shape& in) const {
  if (in.empty()) SM_INPUT_ERROR("flatten expects a per-sample input with at least one dim, got []");
  if (start_dim_ < 0 || static_cast<size_t>(start_dim_) >= in.size())
    SM_INPUT_ERROR("flatten start_dim " << start_dim_ << " does not fit the per-sample input " << shape_str(in)
                                        << " (valid: 0.." << in.size() - 1 << ")");
  Shape out(in.begin(), in.begin() + start_dim_);
  out.push_back(shape_numel(Shape(in.begin() + start_dim_, in.end())));
  return out;
}

Tensor Flatten::forward_cpu(const Tensor& x, Ctx& ctx) {
  SM_CHECK(x.ndim() >= 3, "flatten input must be [T, N, ...], got " << shape_str(x.shape()));
  impl_of(impl_).in_shapes.fresh(ctx.slot) = x.shape();
  Shape out = {x.dim(0), x.dim(1)};
  for (const int64_t d : output_shape(Shape(x.shape().begin() + 2, x.shape().end()))) out.push_back(d);
  Tensor y = x.view(out);  // [T, N, C·H·W] (start_dim 0) or [T, N, ..., merged]
  y.set_binary(x.is_binary());
  return y;
}

Tensor Flatten::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  auto& store = impl_of(impl_).in_shapes;
  const Shape in = store.get(ctx.slot);
  store.release(ctx.slot);
  SM_CHECK(dy.numel() == shape_numel(in), "flatten backward: dy " << shape_str(dy.shape())
                                                                  << " does not match input " << shape_str(in));
  return dy.view(in);  // [T, N, C, H, W]
}

}  // namespace sm
