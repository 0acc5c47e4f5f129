// dropout.h — dropout with ONE mask shared by all time steps (SpikingJelly's
// layer.Dropout): mask[n, f] ~ Bernoulli(1-p) drawn from CounterRng(seed, "dropout/"+name)
// keyed by (step, global sample index, element index) — never by rank. Kept values are
// scaled by 1/(1-p). The mask is saved as bits. Identity in eval or when p == 0.
// One flow for both devices (src/layers/dropout.cpp; CUDA kernels in dropout_cuda.cpp).
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {

class Dropout : public Layer {
 public:
  explicit Dropout(double p);
  Shape output_shape(const Shape& in) const override { return in; }
  std::string type() const override { return "dropout"; }
  double p() const { return p_; }

 protected:
  SM_ANY_DEVICE_HOOKS

 private:
  double p_;
};

}  // namespace sm
