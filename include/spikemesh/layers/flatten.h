// flatten.h — [T, N, C, H, W] -> [T, N, C·H·W] (a view; no copy, no saved state).
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

class Flatten : public Layer {
 public:
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "flatten"; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
  // A view on any device: the same code serves CUDA tensors.
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override { return forward_cpu(x, ctx); }
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override { return backward_input_cpu(dy, ctx); }
  void backward_weight_cuda(Ctx&) override {}  // no parameters

 private:
  std::shared_ptr<void> impl_;  // saved input shapes per slot
};

}  // namespace sm
