// layer.cpp — the non-virtual Layer entry points: device dispatch and parameter declaration.
#include "spikemesh/layers/layer.h"

#include <chrono>
#include <type_traits>

#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/gpu_layer_profile.h"
#include "spikemesh/layers/layer_profile.h"

namespace sm {
namespace {
// True when this call should be timed: profiling on, a leaf layer, on the CPU.
bool timed(Layer& l, const Device& d) { return layer_profile_enabled() && d.is_cpu() && l.children().empty(); }
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
// B's pass name: plain backward when it also accumulates the parameter gradients.
ProfilePass input_pass(const Ctx& ctx) { return ctx.split_wgrad ? ProfilePass::BackwardInput : ProfilePass::Backward; }
// A CUDA pass of a leaf bracketed by CUDA events (gpu_layer_profile.h; only while armed).
template <class Run>
auto gpu_timed(Layer& l, const Device& d, ProfilePass pass, Run run) -> decltype(run()) {
  if (!l.children().empty()) return run();
  const size_t k = gpu_profile_pass_start(d);
  if constexpr (std::is_void_v<decltype(run())>) {
    run();
    gpu_profile_pass_end(k, l.name(), l.type(), pass);
  } else {
    auto out = run();
    gpu_profile_pass_end(k, l.name(), l.type(), pass);
    return out;
  }
}
}  // namespace

Tensor Layer::forward(const Tensor& x, Ctx& ctx) {
  if (sp_.role == SpRole::Start) {  // the rowwise layer decides whether this slot's forward shards
    const bool shard = ctx.tp && ctx.tp_shard_regions && !ctx.bn_sync && !ctx.bn_split && x.ndim() >= 2 &&
                       x.dim(1) % ctx.tp->size() == 0;
    sp_.region->set_sharded(ctx.slot, shard);
  }
  Tensor y;
  {
    SpStatsScope stats(sp_, ctx);
    y = forward_dispatch(x, ctx);
  }
  if (sp_.role == SpRole::Last && y.defined() && sp_.sharded(ctx.slot)) y = sp_all_gather_rows(y, *ctx.tp);
  return y;
}

Tensor Layer::backward_input(const Tensor& dy, Ctx& ctx) {
  if (sp_.role == SpRole::Last && sp_.sharded(ctx.slot)) {
    const Tensor g = sp_.region->partial_grad_in ? sp_reduce_scatter_rows(dy, *ctx.tp)
                                                 : sp_rows_of(dy, ctx.tp->rank(), ctx.tp->size());
    SpStatsScope stats(sp_, ctx);
    return backward_dispatch(g, ctx);
  }
  // (a Start layer — rowwise, a weight layer — all-gathers its gradient itself, step by step)
  SpStatsScope stats(sp_, ctx);
  return backward_dispatch(dy, ctx);  // no copy of the handle: dy may be written over (layer.h)
}

Tensor Layer::forward_dispatch(const Tensor& x, Ctx& ctx) {
  last_device_ = x.device();
  if (x.device().is_cuda()) {
    if (!gpu_profile_armed()) return forward_cuda(x, ctx);
    return gpu_timed(*this, x.device(), ProfilePass::Forward, [&] { return forward_cuda(x, ctx); });
  }
  if (!timed(*this, x.device())) return forward_cpu(x, ctx);
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = forward_cpu(x, ctx);
  const double ms = ms_since(t0);
  double flops = 0.0;  // matrix-product layers: 2 · weight elements · output positions
  const std::string t = type();
  if ((t == "conv2d" || t == "conv1d" || t == "linear") && !own_params_.empty()) {
    const Tensor& w = own_params_[0]->value;  // [Cout, ...]
    if (w.defined() && w.dim(0) > 0) flops = 2.0 * double(w.numel()) * double(y.numel() / w.dim(0));
  }
  layer_profile_add(t, ms, 0.0, true, flops, name());
  return y;
}

Tensor Layer::backward_dispatch(const Tensor& dy, Ctx& ctx) {
  if (dy.device().is_cuda()) {
    if (!gpu_profile_armed()) return backward_input_cuda(dy, ctx);
    return gpu_timed(*this, dy.device(), input_pass(ctx), [&] { return backward_input_cuda(dy, ctx); });
  }
  if (!timed(*this, dy.device())) return backward_input_cpu(dy, ctx);
  auto t0 = std::chrono::steady_clock::now();
  Tensor dx = backward_input_cpu(dy, ctx);
  layer_profile_add(type(), 0.0, ms_since(t0), false, 0.0, name());
  return dx;
}

void Layer::backward_weight(Ctx& ctx) {
  if (last_device_.is_cuda()) {
    if (!gpu_profile_armed() || own_params_.empty()) return backward_weight_cuda(ctx);
    return gpu_timed(*this, last_device_, ProfilePass::BackwardWeight, [&] { backward_weight_cuda(ctx); });
  }
  if (!timed(*this, last_device_)) return backward_weight_cpu(ctx);
  auto t0 = std::chrono::steady_clock::now();
  backward_weight_cpu(ctx);
  layer_profile_add(type(), 0.0, ms_since(t0), false, 0.0, name());
}

void Layer::reset_state() {
  for (Layer* c : children()) c->reset_state();
}

void Layer::collect_stats(std::vector<LayerStat>& out) const {
  // children() is not const; walking it does not modify the layer.
  for (Layer* c : const_cast<Layer*>(this)->children()) c->collect_stats(out);
}

void Layer::backward_weight_cpu(Ctx& ctx) {
  const std::vector<Layer*> cs = children();
  for (auto it = cs.rbegin(); it != cs.rend(); ++it) (*it)->backward_weight(ctx);
}

Tensor Layer::forward_cuda(const Tensor&, Ctx&) {
  SM_CHECK(false, type() << " '" << name_ << "' has no CUDA implementation in this build");
  return {};
}
Tensor Layer::backward_input_cuda(const Tensor&, Ctx&) {
  SM_CHECK(false, type() << " '" << name_ << "' has no CUDA implementation in this build");
  return {};
}

namespace {

// Own items of a layer, then those of its children in order (composites: of the whole tree).
template <class T, class Children, class Of>
std::vector<T*> own_then_children(const std::vector<std::unique_ptr<T>>& own, const Children& children, Of of) {
  std::vector<T*> out;
  for (auto& x : own) out.push_back(x.get());
  for (Layer* c : children)
    for (T* x : of(*c)) out.push_back(x);
  return out;
}

// A new named item (local_name and, until the owning unit names it by path, name).
template <class T>
T& add_named(std::vector<std::unique_ptr<T>>& own, const std::string& local_name, const Shape& shape) {
  own.push_back(std::make_unique<T>());
  T& x = *own.back();
  x.local_name = local_name;
  x.name = local_name;
  x.shape = shape;
  return x;
}

}  // namespace

std::vector<Param*> Layer::params() {
  return own_then_children(own_params_, children(), [](Layer& c) { return c.params(); });
}

std::vector<Buffer*> Layer::buffers() {
  return own_then_children(own_buffers_, children(), [](Layer& c) { return c.buffers(); });
}

Param& Layer::add_param(const std::string& local_name, const Shape& shape, InitSpec init, bool weight_decay) {
  Param& p = add_named(own_params_, local_name, shape);
  p.local_shape = shape;
  p.init = init;
  p.weight_decay = weight_decay;
  return p;
}

Buffer& Layer::add_buffer(const std::string& local_name, const Shape& shape, double init, bool integer) {
  Buffer& b = add_named(own_buffers_, local_name, shape);
  b.init = init;
  b.integer = integer;
  return b;
}

}  // namespace sm
