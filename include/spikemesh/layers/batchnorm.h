// batchnorm.h — BatchNorm1d/2d. Statistics per channel over T·N·(spatial): input
// [T, N, C] / [T, N, C, L] (1d) or [T, N, C, H, W] (2d). Training uses batch statistics
// (biased variance to normalise, unbiased to update running_var, PyTorch semantics);
// eval uses running statistics. Params weight [C] (init 1), bias [C] (init 0); buffers
// running_mean [C] (0), running_var [C] (1), num_batches_tracked [] (0).
// ctx.bn_sync (if set) all-reduces the per-channel sums (synced BN).
// CPU hooks (the reference): src/layers/batchnorm.cpp; CUDA hooks: batchnorm_cuda.cpp.
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

class Neuron;  // layers/neuron.h

struct BatchNormConfig {
  int num_features = 0;
  int spatial_dims = 2;  // 1 -> BatchNorm1d, 2 -> BatchNorm2d
  double eps = 1e-5;
  double momentum = 0.1;
};

class BatchNorm : public Layer {
 public:
  bool same_at_every_time_step() const override { return true; }
  explicit BatchNorm(const BatchNormConfig& c);
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return cfg_.spatial_dims == 1 ? "batchnorm1d" : "batchnorm2d"; }
  const BatchNormConfig& config() const { return cfg_; }

  // memopt splits of a checkpointed segment into pieces (layers/memopt_segment.h), per slot:
  //  finish_split_moments    the moments the pieces' forwards added (ctx.bn_moments_for) become
  //                          the batch statistics: running statistics moved once, the statistics
  //                          kept for every later pass (collective over ctx.bn_sync when synced);
  //  finish_split_grad_sums  the Σdy, Σdy·(x-μ) the pieces' backwards added (ctx.bn_grad_sums_for)
  //                          become the segment's (same group), used by backwards with ctx.bn_split;
  //  drop_split_state        everything the split kept for this slot released.
  void finish_split_moments(Ctx& ctx);
  void finish_split_grad_sums(Ctx& ctx);
  void drop_split_state(int slot);

  // The fused epilogue (a plain forward — no memopt recompute or split): this layer's
  // forward of x followed by `next`'s, the normalised tensor never written (the neuron or the
  // max pooling normalises as it reads x). Returns next's output; each layer's backward runs
  // as usual. next: a Neuron or a max-pooling Pool2d (fusable_after_batchnorm) on the CPU, a
  // Neuron on a GPU.
  Tensor forward_into(Layer& next, const Tensor& x, Ctx& ctx);
  static bool fusable_after_batchnorm(const Layer& next);
  // How many backwards took their two sums from the next layer's backward (fused) instead of
  // reading dy and x for them.
  int64_t fused_sums_taken() const { return fused_sums_taken_; }
  // How many forwards ran fused with the next layer (forward_into), on either device.
  int64_t fused_forwards() const { return fused_forwards_; }

 protected:
  SM_LEAF_HOOKS
  SM_LEAF_WEIGHT_HOOKS

 private:
#ifdef SPIKEMESH_HAVE_CUDA
  Tensor forward_cuda_then(const Tensor& x, Ctx& ctx, Layer* next);
  void finish_split_moments_cuda(Ctx& ctx);
  void finish_split_grad_sums_cuda(Ctx& ctx);
  void drop_split_state_cuda(int slot);
#endif
  Tensor forward_cpu_then(const Tensor& x, Ctx& ctx, Layer* next);
  BatchNormConfig cfg_;
  int64_t fused_sums_taken_ = 0;
  int64_t fused_forwards_ = 0;
};

}  // namespace sm
