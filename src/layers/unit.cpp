// unit.cpp — naming of layers/params by path and the unit's flat parameter buffers.
#include "spikemesh/layers/unit.h"

namespace sm {

std::string join_layer_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}

namespace {

void name_below(Layer& l, const std::string& path) {
  for (Layer* c : l.children()) {
    std::string full = join_layer_path(path, c->name());
    c->set_name(full);
    name_below(*c, full);
  }
}

void name_own(Layer& l) {
  // Own params/buffers of l are those not belonging to children: names get the layer path.
  std::vector<Param*> all = l.params();
  std::vector<Buffer*> bufs = l.buffers();
  size_t child_params = 0, child_bufs = 0;
  for (Layer* c : l.children()) {
    child_params += c->params().size();
    child_bufs += c->buffers().size();
  }
  for (size_t i = 0; i + child_params < all.size(); ++i) all[i]->name = join_layer_path(l.name(), all[i]->local_name);
  for (size_t i = 0; i + child_bufs < bufs.size(); ++i) bufs[i]->name = join_layer_path(l.name(), bufs[i]->local_name);
  for (Layer* c : l.children()) name_own(*c);
}
}  // namespace

void name_layers(Layer& root) {
  name_below(root, root.name());
  name_own(root);
}

void Unit::finalize(DType dt, Device dev, uint64_t seed) {
  SM_CHECK(dt == DType::F32 || dt == DType::F64, "units hold f32 or f64 master parameters");
  name_layers(*this);
  std::vector<Param*> ps = params();
  int64_t total = 0;
  for (Param* p : ps) total += shape_numel(p->local_shape);
  // init_param writes host memory: on a CUDA device the values are initialised on the host
  // and copied over (the same numbers as a CPU run), then the views are bound again.
  flat_value_ = Tensor::zeros({total}, dt);
  flat_grad_ = Tensor::zeros({total}, dt, dev);
  auto bind = [&]() {
    int64_t off = 0;
    for (Param* p : ps) {
      int64_t n = shape_numel(p->local_shape);
      p->value = flat_value_.slice0(off, off + n).view(p->local_shape);
      p->grad = flat_grad_.slice0(off, off + n).view(p->local_shape);
      off += n;
    }
  };
  bind();
  for (Param* p : ps) init_param(*p, seed);
  if (!dev.is_cpu()) {
    flat_value_ = flat_value_.to(dev);
    bind();
  }
  for (Buffer* b : buffers()) b->value = Tensor::full(b->held_shape(), b->init, b->integer ? DType::I64 : dt, dev);
}

}  // namespace sm
