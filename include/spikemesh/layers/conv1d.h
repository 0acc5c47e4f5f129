// conv1d.h — 1×1 convolution over channels of tokens: [T, N, Cin, L] -> [T, N, Cout, L].
// Params: weight [Cout, Cin, 1], bias [Cout] (optional) — PyTorch Conv1d(k=1) names/shapes.
#pragma once
#include "spikemesh/layers/init.h"
#include "spikemesh/layers/layer.h"

namespace sm {

struct Conv1dConfig {
  int in_channels = 0, out_channels = 0;
  bool bias = true;
  WeightInit init = WeightInit::TorchDefault;
};

class Conv1d : public Layer {
 public:
  explicit Conv1d(const Conv1dConfig& c);
  Shape output_shape(const Shape& in) const override;  // [Cin, L] -> [Cout, L]
  std::string type() const override { return "conv1d"; }
  const Conv1dConfig& config() const { return cfg_; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cpu(Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA hooks (src/layers/conv1d_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cuda(Ctx& ctx) override;
#endif

 private:
  Conv1dConfig cfg_;
  std::shared_ptr<void> impl_;
#ifdef SPIKEMESH_HAVE_CUDA
  std::shared_ptr<void> cuda_impl_;  // CUDA-side saved state per slot (created on first use)
#endif
};

}  // namespace sm
