// sequential.cpp — Sequential and Residual composites.
#include "spikemesh/layers/sequential.h"

#include <utility>

#include "device_ops.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/layers/fused_epilogue.h"
#include "spikemesh/layers/time_invariant_prefix.h"

namespace sm {

Shape Sequential::output_shape(const Shape& in) const {
  Shape s = in;
  for (auto& l : layers_) s = l->output_shape(s);
  return s;
}

bool Sequential::emits_spikes() const {
  for (size_t i = layers_.size(); i-- > 0;)
    if (!layers_[i]->preserves_spikes()) return layers_[i]->emits_spikes();
  return false;
}

std::vector<Layer*> Sequential::children() {
  std::vector<Layer*> out;
  for (auto& l : layers_) out.push_back(l.get());
  return out;
}

Tensor Sequential::forward_children(size_t begin, size_t end, Tensor h, Ctx& ctx) {
  for (size_t i = begin; i < end && h.defined(); ++i) {
    Tensor fused;  // a batch norm and its neuron in one pass (layers/fused_epilogue.h)
    if (i + 1 < end && try_fused_forward(*layers_[i], *layers_[i + 1], h, ctx, fused)) {
      h = fused;
      ++i;
      continue;
    }
    h = layers_[i]->forward(h, ctx);
  }
  return h;
}

namespace {
// ctx.time_repeat for one scope (time_invariant_prefix.h).
class TimeRepeatScope {
 public:
  TimeRepeatScope(Ctx& ctx, int64_t steps) : ctx_(ctx), before_(ctx.time_repeat) { ctx_.time_repeat = steps; }
  ~TimeRepeatScope() { ctx_.time_repeat = before_; }
  TimeRepeatScope(const TimeRepeatScope&) = delete;
  TimeRepeatScope& operator=(const TimeRepeatScope&) = delete;

 private:
  Ctx& ctx_;
  int64_t before_;
};
}  // namespace

Tensor Sequential::forward_whole(const Tensor& x, Ctx& ctx, bool merge) {
  const size_t k = merge ? time_invariant_prefix(layers_, x, ctx) : 0;
  if (static_cast<size_t>(ctx.slot) >= prefix_by_slot_.size()) prefix_by_slot_.resize(ctx.slot + 1, 0);
  prefix_by_slot_[ctx.slot] = k;
  if (k == 0) return forward_children(0, layers_.size(), x, ctx);
  const int64_t T = x.dim(0);
  Tensor h;
  {
    TimeRepeatScope repeat(ctx, T);
    h = forward_children(0, k, x.slice0(0, 1), ctx);  // step 0 stands for all: [1, N, ...]
  }
  if (!h.defined()) return h;
  return forward_children(k, layers_.size(), repeat_time_steps(h, T), ctx);
}

Tensor Sequential::backward_whole(const Tensor& dy, Ctx& ctx) {
  const size_t k = static_cast<size_t>(ctx.slot) < prefix_by_slot_.size() ? prefix_by_slot_[ctx.slot] : 0;
  if (k == 0) return backward_children(0, layers_.size(), dy, ctx);
  const bool owned = ctx.dy_owned, unused = ctx.input_grad_unused;
  SM_CHECK(unused, "'" << name() << "' ran its layers before the first neuron once for repeated input steps (an "
                       "evaluation forward), so its input has no per-step gradient; a backward that needs it "
                       "runs after a training forward, or with SPIKEMESH_MERGE_STEPS=0");
  ctx.input_grad_unused = false;  // the neuron's input gradient is wanted
  Tensor g = backward_children(k, layers_.size(), dy, ctx);
  ctx.input_grad_unused = unused;
  if (!g.defined()) return g;
  const int64_t T = g.dim(0);
  g = sum_time_steps(g);  // [1, N, ...]: the gradient of the repeated step
  ctx.dy_owned = true;
  backward_children(0, k, g, ctx);  // batch norm reads its T from the slot (forward's ctx.time_repeat)
  ctx.dy_owned = owned;
  return Tensor();  // the model input's gradient: not wanted (only the steps' sum was made)
}

Tensor Sequential::forward_cpu(const Tensor& x, Ctx& ctx) {
  // the stage's permission is for this sequence (its first unit), never for the composites in it
  const bool merge = std::exchange(ctx.merge_repeated_steps, false);
  if (segments_.empty()) return forward_whole(x, ctx, merge);
  Tensor h = x;
  for (size_t s = 0; s < segments_.size(); ++s) h = segment_forward(segments_[s], s, h, ctx);
  return h;
}

Tensor Sequential::backward_children(size_t begin, size_t end, const Tensor& dy, Ctx& ctx) {
  if (begin == end || !dy.defined()) return dy;
  const bool owned = ctx.dy_owned;  // the first child gets dy as the caller marked it
  const bool unused = ctx.input_grad_unused;  // only the child that reads our input may skip its gradient
  ctx.input_grad_unused = unused && end - 1 == begin;
  Tensor g = layers_[end - 1]->backward_input(dy, ctx);
  ctx.dy_owned = true;  // the others get this loop's own temporaries
  for (size_t i = end - 1; i-- > begin && g.defined();) {
    ctx.input_grad_unused = unused && i == begin;
    g = layers_[i]->backward_input(g, ctx);
  }
  ctx.dy_owned = owned;
  ctx.input_grad_unused = unused;
  return g;
}

Tensor Sequential::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  if (segments_.empty()) return backward_whole(dy, ctx);
  const bool owned = ctx.dy_owned;  // the last segment gets dy as the caller marked it
  const bool unused = ctx.input_grad_unused;  // only the first segment may skip its input gradient
  ctx.input_grad_unused = unused && segments_.size() == 1;
  Tensor g = segment_backward(segments_.back(), segments_.size() - 1, dy, ctx);
  ctx.dy_owned = true;  // the others get the loop's own temporaries
  for (size_t s = segments_.size() - 1; s-- > 0;) {
    ctx.input_grad_unused = unused && s == 0;
    g = segment_backward(segments_[s], s, g, ctx);
  }
  ctx.dy_owned = owned;
  ctx.input_grad_unused = unused;
  return g;
}

Shape Residual::output_shape(const Shape& in) const {
  Shape out = Sequential::output_shape(in);
  if (out != in)
    SM_INPUT_ERROR("residual body maps " << shape_str(in) << " to " << shape_str(out)
                                         << "; a residual block must keep the shape");
  return out;
}

Tensor Residual::forward_cpu(const Tensor& x, Ctx& ctx) {  // both devices
  Tensor fx = Sequential::forward_cpu(x, ctx);
  if (!fx.defined()) return fx;  // a memopt moments pass stopped inside the body
  CudaAllocLabel label("residual add", &name_);
  return layer_ops::add(x, fx, "residual add");  // [T, N, ...]; spikes + spikes are in {0, 1, 2}
}

Tensor Residual::backward_input_cpu(const Tensor& dy, Ctx& ctx) {  // both devices
  // The identity branch reads dy after the body: the body never gets it as owned (layer.h).
  const bool owned = ctx.dy_owned, unused = ctx.input_grad_unused;
  ctx.dy_owned = false;
  ctx.input_grad_unused = false;  // dy + the body's input gradient: it needs the latter
  Tensor g = Sequential::backward_input_cpu(dy, ctx);
  ctx.dy_owned = owned;
  ctx.input_grad_unused = unused;
  if (!g.defined()) return g;  // a memopt sums pass stopped inside the body
  CudaAllocLabel label("residual backward", &name_);
  return layer_ops::add(dy, g, "residual backward");  // d/dx (x + f(x)) = dy + f'(x)ᵀ dy
}

}  // namespace sm
