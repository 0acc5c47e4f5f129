// flatten.h — [T, N, C, H, W] -> [T, N, C·H·W] (a view; no copy; saves only the input shape
// per slot). With start_dim s > 0 the per-sample dims from s on are merged, e.g. Spikformer's
// tokens: start_dim 1 maps [T, N, E, H, W] to [T, N, E, H·W] (torch.flatten(x, 3)).
// A view on any device: the CPU hooks serve CUDA tensors too.
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

class Flatten : public Layer {
 public:
  bool same_at_every_time_step() const override { return true; }
  explicit Flatten(int start_dim = 0) : start_dim_(start_dim) {}
  int start_dim() const { return start_dim_; }
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "flatten"; }
  bool preserves_spikes() const override { return true; }

 protected:
  SM_ANY_DEVICE_HOOKS

 private:
  int start_dim_;  // per-sample dim (0 = the first after [T, N])
};

}  // namespace sm
