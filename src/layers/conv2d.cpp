// conv2d.cpp — the Conv2d layer's shape rules over time-major input [T, N, Cin, H, W]
// (kernels see [T·N, Cin, H, W]); the forward/backward flow, slots and tensor parallelism
// are WeightLayer's (weight_layer.h). The kernels use this rank's local weight shape.
#include "spikemesh/layers/conv2d.h"

namespace sm {

Conv2d::Conv2d(const Conv2dConfig& c) : cfg_(c) {
  if (c.in_channels < 1 || c.out_channels < 1)
    SM_INPUT_ERROR("conv2d needs in_channels and out_channels >= 1 (got " << c.in_channels << " and "
                                                                          << c.out_channels << ")");
  if (c.kernel < 1) SM_INPUT_ERROR("conv2d kernel must be >= 1 (got " << c.kernel << ")");
  if (c.stride < 1) SM_INPUT_ERROR("conv2d stride must be >= 1 (got " << c.stride << ")");
  if (c.padding < 0) SM_INPUT_ERROR("conv2d padding must be >= 0 (got " << c.padding << ")");
  const int64_t kk = int64_t{c.kernel} * c.kernel;
  add_param("weight", {c.out_channels, c.in_channels, c.kernel, c.kernel},
            weight_init_spec(c.init, c.in_channels * kk, c.out_channels * kk));
  if (c.bias) add_param("bias", {c.out_channels}, bias_init_spec(c.init, c.in_channels * kk));
}

Shape Conv2d::output_shape(const Shape& in) const {
  if (in.size() != 3)
    SM_INPUT_ERROR("conv2d expects a per-sample input [C, H, W], got " << shape_str(in));
  if (in[0] != cfg_.in_channels)
    SM_INPUT_ERROR("conv2d expects " << cfg_.in_channels << " input channels, got " << in[0]);
  const int64_t ho = (in[1] + 2 * cfg_.padding - cfg_.kernel) / cfg_.stride + 1;
  const int64_t wo = (in[2] + 2 * cfg_.padding - cfg_.kernel) / cfg_.stride + 1;
  if (in[1] + 2 * cfg_.padding < cfg_.kernel || in[2] + 2 * cfg_.padding < cfg_.kernel || ho < 1 || wo < 1)
    SM_INPUT_ERROR("conv2d kernel " << cfg_.kernel << " (padding " << cfg_.padding
                                    << ") does not fit an input of " << in[1] << "x" << in[2]);
  return {cfg_.out_channels, ho, wo};
}

void Conv2d::check_input(const Tensor& x) const {
  const Tensor& w = own_params_[0]->value;  // [Cout_local, Cin_local, K, K]
  if (x.ndim() != 5) SM_INPUT_ERROR("conv2d expects input [T, N, C, H, W], got " << shape_str(x.shape()));
  if (x.dim(2) != w.dim(1)) SM_INPUT_ERROR("conv2d expects " << w.dim(1) << " input channels, got " << x.dim(2));
  const cpu::Conv2dGeometry g = geometry(x.shape());
  SM_CHECK(g.out_height() >= 1 && g.out_width() >= 1 && g.height + 2 * g.padding >= g.kernel &&
               g.width + 2 * g.padding >= g.kernel,
           "conv2d kernel " << g.kernel << " does not fit input " << shape_str(x.shape()));
}

cpu::Conv2dGeometry Conv2d::geometry(const Shape& x) const {  // x: [T, N, Cin, H, W]
  cpu::Conv2dGeometry g;
  g.batch = x[0] * x[1];
  g.in_channels = x[2];
  g.height = x[3];
  g.width = x[4];
  g.out_channels = own_params_[0]->value.dim(0);
  g.kernel = cfg_.kernel;
  g.stride = cfg_.stride;
  g.padding = cfg_.padding;
  return g;
}

Shape Conv2d::output_of(const Shape& x, const cpu::Conv2dGeometry& g) const {
  return {x[0], x[1], g.out_channels, g.out_height(), g.out_width()};  // [T, N, Cout, Ho, Wo]
}

}  // namespace sm
