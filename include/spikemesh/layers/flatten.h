// flatten.h — [T, N, C, H, W] -> [T, N, C·H·W] (a view; no copy; saves only the input shape
// per slot). A view on any device: the CPU hooks serve CUDA tensors too.
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

class Flatten : public Layer {
 public:
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "flatten"; }

 protected:
  SM_ANY_DEVICE_HOOKS
};

}  // namespace sm
