// pool.h — MaxPool2d and AvgPool2d over [T, N, C, H, W] (PyTorch semantics: floor mode,
// implicit -inf padding for max, count_include_pad=true for avg). MaxPool of spikes stays
// binary (output flagged binary).
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

struct PoolConfig {
  int kernel = 2, stride = 2, padding = 0;
};

class MaxPool2d : public Layer {
 public:
  explicit MaxPool2d(const PoolConfig& c);
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "maxpool2d"; }
  const PoolConfig& config() const { return cfg_; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA hooks (src/layers/pool_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cuda(Ctx&) override {}  // no parameters
#endif

 private:
  PoolConfig cfg_;
  std::shared_ptr<void> impl_;
#ifdef SPIKEMESH_HAVE_CUDA
  std::shared_ptr<void> cuda_impl_;  // CUDA-side saved state per slot (created on first use)
#endif
};

class AvgPool2d : public Layer {
 public:
  explicit AvgPool2d(const PoolConfig& c);
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "avgpool2d"; }
  const PoolConfig& config() const { return cfg_; }

 protected:
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA hooks (src/layers/pool_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cuda(Ctx&) override {}  // no parameters
#endif

 private:
  PoolConfig cfg_;
  std::shared_ptr<void> impl_;
#ifdef SPIKEMESH_HAVE_CUDA
  std::shared_ptr<void> cuda_impl_;  // CUDA-side saved state per slot (created on first use)
#endif
};

}  // namespace sm
