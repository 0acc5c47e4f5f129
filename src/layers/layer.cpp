// layer.cpp — the non-virtual Layer entry points: device dispatch and parameter declaration.
#include "spikemesh/layers/layer.h"

namespace sm {

Tensor Layer::forward(const Tensor& x, Ctx& ctx) {
  last_device_ = x.device();
  return x.device().is_cuda() ? forward_cuda(x, ctx) : forward_cpu(x, ctx);
}

Tensor Layer::backward_input(const Tensor& dy, Ctx& ctx) {
  return dy.device().is_cuda() ? backward_input_cuda(dy, ctx) : backward_input_cpu(dy, ctx);
}

void Layer::backward_weight(Ctx& ctx) {
  if (last_device_.is_cuda())
    backward_weight_cuda(ctx);
  else
    backward_weight_cpu(ctx);
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
