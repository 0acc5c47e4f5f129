// layer.cpp — the non-virtual Layer entry points: device dispatch and parameter declaration.
#include "spikemesh/layers/layer.h"

#include <chrono>

#include "spikemesh/layers/layer_profile.h"

namespace sm {
namespace {
// True when this call should be timed: profiling on, a leaf layer, on the CPU.
bool timed(Layer& l, const Device& d) { return layer_profile_enabled() && d.is_cpu() && l.children().empty(); }
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Tensor Layer::forward(const Tensor& x, Ctx& ctx) {
  last_device_ = x.device();
  if (x.device().is_cuda()) return forward_cuda(x, ctx);
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
  layer_profile_add(t, ms, 0.0, true, flops);
  return y;
}

Tensor Layer::backward_input(const Tensor& dy, Ctx& ctx) {
  if (dy.device().is_cuda()) return backward_input_cuda(dy, ctx);
  if (!timed(*this, dy.device())) return backward_input_cpu(dy, ctx);
  auto t0 = std::chrono::steady_clock::now();
  Tensor dx = backward_input_cpu(dy, ctx);
  layer_profile_add(type(), 0.0, ms_since(t0), false);
  return dx;
}

void Layer::backward_weight(Ctx& ctx) {
  if (last_device_.is_cuda()) return backward_weight_cuda(ctx);
  if (!timed(*this, last_device_)) return backward_weight_cpu(ctx);
  auto t0 = std::chrono::steady_clock::now();
  backward_weight_cpu(ctx);
  layer_profile_add(type(), 0.0, ms_since(t0), false);
}

Tensor Layer::forward_cuda(const Tensor&, Ctx&) {
  SM_CHECK(false, type() << " '" << name_ << "' has no CUDA implementation in this build");
  return {};
}
Tensor Layer::backward_input_cuda(const Tensor&, Ctx&) {
  SM_CHECK(false, type() << " '" << name_ << "' has no CUDA implementation in this build");
  return {};
}
void Layer::backward_weight_cuda(Ctx&) {
  SM_CHECK(false, type() << " '" << name_ << "' has no CUDA implementation in this build");
}

std::vector<Param*> Layer::params() {
  std::vector<Param*> out;
  for (auto& p : own_params_) out.push_back(p.get());
  for (Layer* c : children())
    for (Param* p : c->params()) out.push_back(p);
  return out;
}

std::vector<Buffer*> Layer::buffers() {
  std::vector<Buffer*> out;
  for (auto& b : own_buffers_) out.push_back(b.get());
  for (Layer* c : children())
    for (Buffer* b : c->buffers()) out.push_back(b);
  return out;
}

Param& Layer::add_param(const std::string& local_name, const Shape& shape, InitSpec init, bool weight_decay) {
  auto p = std::make_unique<Param>();
  p->local_name = local_name;
  p->name = local_name;
  p->shape = shape;
  p->local_shape = shape;
  p->init = init;
  p->weight_decay = weight_decay;
  own_params_.push_back(std::move(p));
  return *own_params_.back();
}

Buffer& Layer::add_buffer(const std::string& local_name, const Shape& shape, double init, bool integer) {
  auto b = std::make_unique<Buffer>();
  b->local_name = local_name;
  b->name = local_name;
  b->shape = shape;
  b->init = init;
  b->integer = integer;
  own_buffers_.push_back(std::move(b));
  return *own_buffers_.back();
}

}  // namespace sm
