// sequential.h — composite layers: Sequential (children in order) and Residual
// (y = x + body(x)). Backward runs children in reverse; W of a composite runs every
// child's W. Names: a child's path is "<parent>.<child name>".
#pragma once
#include <vector>

#include "spikemesh/layers/layer.h"

namespace sm {

class Sequential : public Layer {
 public:
  void add(LayerPtr l) { layers_.push_back(std::move(l)); }
  size_t size() const { return layers_.size(); }
  Layer& at(size_t i) { return *layers_[i]; }

  void reset_state() override;
  void collect_stats(std::vector<LayerStat>& out) const override;
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "sequential"; }
  std::vector<Layer*> children() override;

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cpu(Ctx& ctx) override;
  // Composites route by child, whatever the device.
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override { return forward_cpu(x, ctx); }
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override { return backward_input_cpu(dy, ctx); }
  void backward_weight_cuda(Ctx& ctx) override { backward_weight_cpu(ctx); }

  std::vector<LayerPtr> layers_;
};

class Residual : public Sequential {
 public:
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "residual"; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
  // The children route by device; the residual add runs on the GPU (residual_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
#endif
};

}  // namespace sm
