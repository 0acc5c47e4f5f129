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

 private:
  PoolConfig cfg_;
  std::shared_ptr<void> impl_;
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

 private:
  PoolConfig cfg_;
  std::shared_ptr<void> impl_;
};

}  // namespace sm
