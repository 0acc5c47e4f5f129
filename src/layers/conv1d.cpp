// conv1d.cpp — the Conv1d layer's shape rules (1×1 over channels of tokens): [T, N, Cin, L]
// -> [T, N, Cout, L]; per sample y[b] = W[Cout, Cin] · x[b][Cin, L] + bias. Its kernels see a
// 1×1 convolution of [T·N, Cin, L, 1]; the flow, slots and tensor parallelism are
// WeightLayer's (weight_layer.h).
#include "spikemesh/layers/conv1d.h"

namespace sm {

Conv1d::Conv1d(const Conv1dConfig& c) : cfg_(c) {
  if (c.in_channels < 1 || c.out_channels < 1)
    SM_INPUT_ERROR("conv1d needs in_channels and out_channels >= 1 (got " << c.in_channels << " and "
                                                                          << c.out_channels << ")");
  add_param("weight", {c.out_channels, c.in_channels, 1},
            weight_init_spec(c.init, c.in_channels, c.out_channels));
  if (c.bias) add_param("bias", {c.out_channels}, bias_init_spec(c.init, c.in_channels));
}

Shape Conv1d::output_shape(const Shape& in) const {
  if (in.size() != 2) SM_INPUT_ERROR("conv1d expects a per-sample input [C, L], got " << shape_str(in));
  if (in[0] != cfg_.in_channels)
    SM_INPUT_ERROR("conv1d expects " << cfg_.in_channels << " input channels, got " << in[0]);
  if (in[1] < 1) SM_INPUT_ERROR("conv1d expects at least one token, got " << shape_str(in));
  return {cfg_.out_channels, in[1]};
}

void Conv1d::check_input(const Tensor& x) const {
  const Tensor& w = own_params_[0]->value;  // [Cout_local, Cin_local, 1]
  if (x.ndim() != 4) SM_INPUT_ERROR("conv1d expects input [T, N, C, L], got " << shape_str(x.shape()));
  if (x.dim(2) != w.dim(1)) SM_INPUT_ERROR("conv1d expects " << w.dim(1) << " input channels, got " << x.dim(2));
}

cpu::Conv2dGeometry Conv1d::geometry(const Shape& x) const {  // x: [T, N, Cin, L]
  cpu::Conv2dGeometry g;
  g.batch = x[0] * x[1];
  g.in_channels = x[2];
  g.height = x[3];
  g.width = 1;
  g.out_channels = own_params_[0]->value.dim(0);
  return g;  // kernel 1, stride 1, padding 0
}

Shape Conv1d::output_of(const Shape& x, const cpu::Conv2dGeometry& g) const {
  return {x[0], x[1], g.out_channels, x[3]};  // [T, N, Cout, L]
}

}  // namespace sm
