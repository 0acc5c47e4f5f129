// weight_layer.h — the common base of the layers with a weight [Cout, Cin, ...] and an
// optional bias [Cout]: Conv2d, Conv1d and Linear. It implements the Layer contract ONCE for
// the three, on both devices (src/layers/weight_layer.cpp: CPU, weight_layer_cuda.cpp: CUDA,
// one flow for both in weight_layer_flow.h):
//  * forward runs this rank's weight shard and the tensor-parallel epilogue
//    (layers/tensor_parallel.h), then saves its input in the slot ctx.slot (bits for spikes);
//  * B computes dx (colwise TP: all-reduced) and keeps a reference to dy; without
//    ctx.split_wgrad it runs W at once. W adds dW (and db) from the saved input and dy and
//    releases the slot.
// A layer describes itself by the geometry its kernels see — every weight layer is a
// convolution (cpu::Conv2dGeometry): Conv1d is a 1×1 one over [T·N, Cin, L, 1], Linear one
// over [M, Fin, 1, 1] with M all leading positions — and by the kernel family that runs it.
// Param 0 is the weight, param 1 (if declared) the bias.
#pragma once
#include "spikemesh/kernels/cpu/conv.h"
#include "spikemesh/layers/layer.h"

namespace sm {

class WeightLayer : public Layer {
 public:
  bool same_at_every_time_step() const override { return true; }
  enum class KernelFamily { Conv, Conv1x1, Matmul };
  // Colwise without a rowwise partner (the tp plan's colwise/ag, tensor_parallel.h): the
  // output channels are all-gathered over ctx.tp after the kernel.
  void set_tp_gather_output(bool on) { gather_output_ = on; }
  bool tp_gather_output() const { return gather_output_; }

 protected:
  // ---- the derived layer's description ----
  virtual KernelFamily kernels() const = 0;
  // Checks the input's rank and features against this rank's weight (Input errors).
  virtual void check_input(const Tensor& x) const = 0;
  // The kernels' geometry of an input of shape x [T, N, ...] with this rank's weight.
  virtual cpu::Conv2dGeometry geometry(const Shape& x) const = 0;
  // The full output shape [T, N, ...] of an input of shape x.
  virtual Shape output_of(const Shape& x, const cpu::Conv2dGeometry& g) const = 0;

  Param* bias_param() { return own_params_.size() > 1 ? own_params_[1].get() : nullptr; }

  SM_LEAF_HOOKS
  SM_LEAF_WEIGHT_HOOKS

 private:
  SM_DEVICE_FLOW  // src/layers/weight_layer_flow.h
  bool gather_output_ = false;
  // The whole output shape of a local output (its channel dim times tp).
  Shape gathered_shape(Shape local, int tp) const;
};

}  // namespace sm
