// conv2d.h — 2-D convolution over time-major input [T, N, Cin, H, W] (kernels see
// [T*N, Cin, H, W]). Params: weight [Cout, Cin, K, K], bias [Cout] (optional).
// Saves its input for the weight gradient; a binary (spike) input is saved as bits.
// Forward/backward, slots, split B/W and tensor parallelism: layers/weight_layer.h.
#pragma once
#include "spikemesh/layers/init.h"
#include "spikemesh/layers/weight_layer.h"

namespace sm {

struct Conv2dConfig {
  int in_channels = 0, out_channels = 0, kernel = 3, stride = 1, padding = 0;
  bool bias = true;
  WeightInit init = WeightInit::TorchDefault;
};

class Conv2d : public WeightLayer {
 public:
  explicit Conv2d(const Conv2dConfig& c);
  Shape output_shape(const Shape& in) const override;  // [Cin, H, W] -> [Cout, Ho, Wo]
  std::string type() const override { return "conv2d"; }
  const Conv2dConfig& config() const { return cfg_; }

 protected:
  KernelFamily kernels() const override { return KernelFamily::Conv; }
  void check_input(const Tensor& x) const override;
  cpu::Conv2dGeometry geometry(const Shape& x) const override;
  Shape output_of(const Shape& x, const cpu::Conv2dGeometry& g) const override;

 private:
  Conv2dConfig cfg_;
};

}  // namespace sm
