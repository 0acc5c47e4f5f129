// sequential.h — composite layers: Sequential (children in order) and Residual
// (y = x + body(x)). Backward runs children in reverse; W of a composite runs every
// child's W. Names: a child's path is "<parent>.<child name>". Composites hold no saved state
// of their own: each child keeps its slots (layers/dataflow_graph.h: composites with several
// inputs).
#pragma once
#include <vector>

#include "spikemesh/layers/layer.h"

namespace sm {

class Sequential : public Layer {
 public:
  void add(LayerPtr l) { layers_.push_back(std::move(l)); }
  size_t size() const { return layers_.size(); }
  Layer& at(size_t i) { return *layers_[i]; }

  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "sequential"; }
  // Its last child that does not merely preserve spikes emits them.
  bool emits_spikes() const override;
  std::vector<Layer*> children() override;

 protected:
  // Composites route by child, whatever the device.
  SM_ANY_DEVICE_HOOKS  // W: every child's in reverse (Layer's default)

  std::vector<LayerPtr> layers_;
};

class Residual : public Sequential {
 public:
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "residual"; }
  bool emits_spikes() const override { return false; }  // x + body(x) is not binary

 protected:
  // The children route by device; the identity branch is added on the input's device.
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
};

}  // namespace sm
