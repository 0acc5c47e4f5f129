// linear.h — fully connected layer on the last dim: [T, N, ..., Fin] -> [T, N, ..., Fout].
// Params: weight [Fout, Fin], bias [Fout] (optional).
// Forward/backward, slots, split B/W and tensor parallelism: layers/weight_layer.h.
#pragma once
#include "spikemesh/layers/init.h"
#include "spikemesh/layers/weight_layer.h"

namespace sm {

struct LinearConfig {
  int in_features = 0, out_features = 0;
  bool bias = true;
  WeightInit init = WeightInit::TorchDefault;
};

class Linear : public WeightLayer {
 public:
  explicit Linear(const LinearConfig& c);
  Shape output_shape(const Shape& in) const override;  // [..., Fin] -> [..., Fout]
  std::string type() const override { return "linear"; }
  const LinearConfig& config() const { return cfg_; }

 protected:
  KernelFamily kernels() const override { return KernelFamily::Matmul; }
  void check_input(const Tensor& x) const override;
  // Rows x [M, Fin] (M = all leading dims) as a 1×1 convolution of [M, Fin, 1, 1].
  cpu::Conv2dGeometry geometry(const Shape& x) const override;
  Shape output_of(const Shape& x, const cpu::Conv2dGeometry& g) const override;

 private:
  LinearConfig cfg_;
};

}  // namespace sm
