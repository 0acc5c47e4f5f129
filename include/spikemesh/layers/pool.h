// pool.h — MaxPool2d and AvgPool2d over [T, N, C, H, W] (PyTorch semantics: floor mode,
// implicit -inf padding for max, count_include_pad=true for avg). MaxPool of spikes stays
// binary (output flagged binary). One implementation serves both kinds and both devices
// (src/layers/pool.cpp; CUDA kernels in pool_cuda.cpp); no parameters, so B releases the slot.
// Max pooling also runs as the second half of the fused batch-norm epilogue (CPU).
#pragma once
#include <memory>

#include "spikemesh/layers/layer.h"

namespace sm {
namespace cpu {
struct NeuronInputAffine;  // kernels/cpu/neuron.h: batch norm's per-channel normalisation
struct NeuronBnGradSums;   // kernels/cpu/neuron.h: batch norm's backward sums
}  // namespace cpu

struct PoolConfig {
  int kernel = 2, stride = 2, padding = 0;
};

enum class PoolKind { Max, Avg };

class Pool2d : public Layer {
 public:
  bool same_at_every_time_step() const override { return true; }
  Pool2d(PoolKind kind, const PoolConfig& c);
  Shape output_shape(const Shape& in) const override;  // [C, H, W] -> [C, Ho, Wo]
  std::string type() const override { return kind_ == PoolKind::Max ? "maxpool2d" : "avgpool2d"; }
  bool preserves_spikes() const override { return kind_ == PoolKind::Max; }
  // The fused batch-norm → max-pooling epilogue (CPU, max pooling only; BatchNorm::forward_into
  // calls it): pools x [T, N, C, H, W] normalised per channel by `in` as it reads it
  // (kernels/cpu/pool.h maxpool2d_forward_normalized: the same output and winners as unfused).
  // The slot keeps a reference to x; backward returns, as unfused, the gradient of the
  // normalised input and fills batch norm's two backward sums from the pooled gradient
  // (maxpool2d_bn_grad_sums) into bn_sums (nullable).
  Tensor forward_normalized_cpu(const Tensor& x, std::shared_ptr<const cpu::NeuronInputAffine> in,
                                std::shared_ptr<cpu::NeuronBnGradSums> bn_sums, Ctx& ctx);
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
