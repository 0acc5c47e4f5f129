// dropout.h — dropout with ONE mask shared by all time steps (SpikingJelly's
// layer.Dropout): mask[n, f] ~ Bernoulli(1-p) drawn from CounterRng(seed, "dropout/"+name)
// keyed by (step, global sample index, element index) — never by rank. Kept values are
// scaled by 1/(1-p). The mask is saved as bits. Identity in eval or when p == 0.
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
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA hooks (src/layers/dropout_cuda.cpp).
  Tensor forward_cuda(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cuda(const Tensor& dy, Ctx& ctx) override;
  void backward_weight_cuda(Ctx&) override {}  // no parameters
#endif

 private:
  double p_;
  std::shared_ptr<void> impl_;
#ifdef SPIKEMESH_HAVE_CUDA
  std::shared_ptr<void> cuda_impl_;  // CUDA-side saved state per slot (created on first use)
#endif
};

}  // namespace sm
