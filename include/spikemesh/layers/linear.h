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
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA hooks (src/layers/linear_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cuda(Ctx& ctx) override;
#endif

 private:
  LinearConfig cfg_;
  std::shared_ptr<void> impl_;
#ifdef SPIKEMESH_HAVE_CUDA
  std::shared_ptr<void> cuda_impl_;  // CUDA-side saved state per slot (created on first use)
#endif
};

}  // namespace sm
