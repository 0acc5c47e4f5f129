// linear.h — fully connected layer on the last dim: [T, N, ..., Fin] -> [T, N, ..., Fout].
// Params: weight [Fout, Fin], bias [Fout] (optional).
#pragma once
#include "spikemesh/layers/init.h"
#include "spikemesh/layers/layer.h"

namespace sm {

struct LinearConfig {
  int in_features = 0, out_features = 0;
  bool bias = true;
  WeightInit init = WeightInit::TorchDefault;
};

class Linear : public Layer {
 public:
  explicit Linear(const LinearConfig& c);
  Shape output_shape(const Shape& in) const override;  // [..., Fin] -> [..., Fout]
  std::string type() const override { return "linear"; }
  const LinearConfig& config() const { return cfg_; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cpu(Ctx& ctx) override;

 private:
  LinearConfig cfg_;
  std::shared_ptr<void> impl_;
};

}  // namespace sm
