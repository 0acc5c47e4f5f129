// batchnorm.h — BatchNorm1d/2d. Statistics per channel over T·N·(spatial): input
// [T, N, C] / [T, N, C, L] (1d) or [T, N, C, H, W] (2d). Training uses batch statistics
// (biased variance to normalise, unbiased to update running_var, PyTorch semantics);
// eval uses running statistics. Params weight [C] (init 1), bias [C] (init 0); buffers
// running_mean [C] (0), running_var [C] (1), num_batches_tracked [] (0).
// ctx.bn_sync (if set) all-reduces the per-channel sums (synced BN).
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

struct BatchNormConfig {
  int num_features = 0;
  int spatial_dims = 2;  // 1 -> BatchNorm1d, 2 -> BatchNorm2d
  double eps = 1e-5;
  double momentum = 0.1;
};

class BatchNorm : public Layer {
 public:
  explicit BatchNorm(const BatchNormConfig& c);
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return cfg_.spatial_dims == 1 ? "batchnorm1d" : "batchnorm2d"; }
  const BatchNormConfig& config() const { return cfg_; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cpu(Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA hooks (src/layers/batchnorm_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cuda(Ctx& ctx) override;
#endif

 private:
  BatchNormConfig cfg_;
  std::shared_ptr<void> impl_;
#ifdef SPIKEMESH_HAVE_CUDA
  std::shared_ptr<void> cuda_impl_;  // CUDA-side saved state per slot (created on first use)
#endif
};

}  // namespace sm
