// linear.cpp — the Linear layer's shape rules on the last dimension: [T, N, ..., Fin] ->
// [T, N, ..., Fout], computed on rows x [M, Fin] (M = all leading dims); the kernels (GEMMs)
// see them as a 1×1 convolution of [M, Fin, 1, 1]. The flow, slots and tensor parallelism
// are WeightLayer's (weight_layer.h).
#include "spikemesh/layers/linear.h"

namespace sm {

Linear::Linear(const LinearConfig& c) : cfg_(c) {
  if (c.in_features < 1 || c.out_features < 1)
    SM_INPUT_ERROR("linear needs in_features and out_features >= 1 (got " << c.in_features << " and "
                                                                          << c.out_features << ")");
  add_param("weight", {c.out_features, c.in_features},
            weight_init_spec(c.init, c.in_features, c.out_features));
  if (c.bias) add_param("bias", {c.out_features}, bias_init_spec(c.init, c.in_features));
}

Shape Linear::output_shape(const Shape& in) const {
  if (in.empty()) SM_INPUT_ERROR("linear expects a per-sample input [..., features], got a scalar");
  if (in.back() != cfg_.in_features)
    SM_INPUT_ERROR("linear expects " << cfg_.in_features << " input features, got " << in.back()
                                     << " (input " << shape_str(in) << ")");
  Shape out = in;
  out.back() = cfg_.out_features;
  return out;
}

void Linear::check_input(const Tensor& x) const {
  const int64_t fin = own_params_[0]->value.dim(1);  // weight [Fout_local, Fin_local]
  if (x.ndim() < 3) SM_INPUT_ERROR("linear expects input [T, N, ..., F], got " << shape_str(x.shape()));
  if (x.dim(-1) != fin) SM_INPUT_ERROR("linear expects " << fin << " input features, got " << x.dim(-1));
}

cpu::Conv2dGeometry Linear::geometry(const Shape& x) const {  // x: [T, N, ..., Fin]
  cpu::Conv2dGeometry g;
  g.in_channels = x.back();
  g.batch = shape_numel(x) / g.in_channels;
  g.height = g.width = 1;
  g.out_channels = own_params_[0]->value.dim(0);
  return g;
}

Shape Linear::output_of(const Shape& x, const cpu::Conv2dGeometry& g) const {
  Shape out = x;  // [T, N, ..., Fout]
  out.back() = g.out_channels;
  return out;
}

}  // namespace sm
