// mean.h — Mean: the mean over one per-sample dimension, e.g. Spikformer's head input
// [T, N, E, L] -> [T, N, E] (mean over the L tokens; torch `x.mean(3)`). No parameters.
// Saves only the input shape per slot (backward spreads dy / D evenly). CPU hooks: mean.cpp
// (the reference); CUDA hooks (CUDA builds): mean_cuda.cpp over kernels/cuda/mean.h.
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

class Mean : public Layer {
 public:
  // dim: per-sample dimension (0 = the first after [T, N]); negative counts from the end.
  explicit Mean(int dim = -1);
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "mean"; }
  int dim() const { return dim_; }

  // x [T, N, ...] viewed as [outer, d, inner] around the averaged dim (both devices' hooks);
  // an internal error when dim does not fit x.
  struct View {
    int64_t outer = 1, d = 1, inner = 1;
  };
  View view_of(const Shape& x) const;

 protected:
  SM_LEAF_HOOKS

 private:
  int dim_;
};

}  // namespace sm
