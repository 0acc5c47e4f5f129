// conv2d.h — 2-D convolution over time-major input [T, N, Cin, H, W] (kernels see
// [T*N, Cin, H, W]). Params: weight [Cout, Cin, K, K], bias [Cout] (optional).
// Saves its input for the weight gradient; a binary (spike) input is saved as bits.
#pragma once
#include "spikemesh/layers/init.h"
#include "spikemesh/layers/layer.h"

namespace sm {

struct Conv2dConfig {
  int in_channels = 0, out_channels = 0, kernel = 3, stride = 1, padding = 0;
  bool bias = true;
  WeightInit init = WeightInit::TorchDefault;
};

class Conv2d : public Layer {
 public:
  explicit Conv2d(const Conv2dConfig& c);
  Shape output_shape(const Shape& in) const override;  // [Cin, H, W] -> [Cout, Ho, Wo]
  std::string type() const override { return "conv2d"; }
  const Conv2dConfig& config() const { return cfg_; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cpu(Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA hooks (src/layers/conv2d_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cuda(Ctx& ctx) override;
#endif

 private:
  struct Saved;
  Conv2dConfig cfg_;
  std::shared_ptr<void> impl_;  // kernel-side state (primitive caches, saved slots)
#ifdef SPIKEMESH_HAVE_CUDA
  std::shared_ptr<void> cuda_impl_;  // CUDA-side saved state per slot (created on first use)
#endif
};

}  // namespace sm
