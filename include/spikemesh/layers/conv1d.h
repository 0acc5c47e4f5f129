// conv1d.h — 1×1 convolution over channels of tokens: [T, N, Cin, L] -> [T, N, Cout, L].
// Params: weight [Cout, Cin, 1], bias [Cout] (optional) — PyTorch Conv1d(k=1) names/shapes.
// Forward/backward, slots, split B/W and tensor parallelism: layers/weight_layer.h.
#pragma once
#include "spikemesh/layers/init.h"
#include "spikemesh/layers/weight_layer.h"

namespace sm {

struct Conv1dConfig {
  int in_channels = 0, out_channels = 0;
  bool bias = true;
  WeightInit init = WeightInit::TorchDefault;
};

class Conv1d : public WeightLayer {
 public:
  explicit Conv1d(const Conv1dConfig& c);
  Shape output_shape(const Shape& in) const override;  // [Cin, L] -> [Cout, L]
  std::string type() const override { return "conv1d"; }
  const Conv1dConfig& config() const { return cfg_; }

 protected:
  KernelFamily kernels() const override { return KernelFamily::Conv1x1; }
  void check_input(const Tensor& x) const override;
  // [T, N, Cin, L] as a 1×1 convolution of [T·N, Cin, L, 1].
  cpu::Conv2dGeometry geometry(const Shape& x) const override;
  Shape output_of(const Shape& x, const cpu::Conv2dGeometry& g) const override;

 private:
  Conv1dConfig cfg_;
};

}  // namespace sm
