// pool.h — MaxPool2d and AvgPool2d over [T, N, C, H, W] (PyTorch semantics: floor mode,
// implicit -inf padding for max, count_include_pad=true for avg). MaxPool of spikes stays
// binary (output flagged binary). One implementation serves both kinds and both devices
// (src/layers/pool.cpp; CUDA kernels in pool_cuda.cpp); no parameters, so B releases the slot.
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

struct PoolConfig {
  int kernel = 2, stride = 2, padding = 0;
};

enum class PoolKind { Max, Avg };

class Pool2d : public Layer {
 public:
  Pool2d(PoolKind kind, const PoolConfig& c);
  Shape output_shape(const Shape& in) const override;  // [C, H, W] -> [C, Ho, Wo]
  std::string type() const override { return kind_ == PoolKind::Max ? "maxpool2d" : "avgpool2d"; }
  bool preserves_spikes() const override { return kind_ == PoolKind::Max; }
  const PoolConfig& config() const { return cfg_; }
  PoolKind kind() const { return kind_; }

 protected:
  SM_ANY_DEVICE_HOOKS

 private:
  PoolKind kind_;
  PoolConfig cfg_;
};

// PyTorch's names of the two kinds.
class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(const PoolConfig& c) : Pool2d(PoolKind::Max, c) {}
};
class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(const PoolConfig& c) : Pool2d(PoolKind::Avg, c) {}
};

}  // namespace sm
