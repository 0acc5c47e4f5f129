// pool.cpp — MaxPool2d / AvgPool2d layers over [T, N, C, H, W] (PyTorch semantics).
// MaxPool saves only the winner's offset inside its window (u8 when k·k <= 256, else i32)
// and keeps the binary flag of its input; AvgPool saves only the input shape. Neither has
// parameters, so B always releases the slot.
#include "spikemesh/layers/pool.h"

#include "spikemesh/kernels/cpu/pool.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct Saved {
  Shape in_shape;  // [T, N, C, H, W]
  Tensor argmax;   // [T·N·C·Ho·Wo] u8/i32 window offsets (max pooling only)
};

struct Impl {
  SlotStore<Saved> slots;
};

Impl& impl_of(const std::shared_ptr<void>& p) { return *static_cast<Impl*>(p.get()); }

void validate(const PoolConfig& c, const char* what) {
  if (c.kernel < 1 || c.stride < 1 || c.padding < 0)
    SM_INPUT_ERROR(what << ": kernel and stride must be >= 1 and padding >= 0 (got kernel "
                        << c.kernel << ", stride " << c.stride << ", padding " << c.padding << ")");
  if (2 * c.padding > c.kernel)
    SM_INPUT_ERROR(what << ": padding " << c.padding << " must be at most half the kernel size "
                        << c.kernel);
}

Shape pooled_shape(const PoolConfig& c, const Shape& in, const char* what) {
  if (in.size() != 3)
    SM_INPUT_ERROR(what << " expects per-sample input [C, H, W], got " << shape_str(in));
  const int64_t ho = (in[1] + 2 * c.padding - c.kernel) / c.stride + 1;
  const int64_t wo = (in[2] + 2 * c.padding - c.kernel) / c.stride + 1;
  if (in[1] + 2 * c.padding < c.kernel || in[2] + 2 * c.padding < c.kernel || ho < 1 || wo < 1)
    SM_INPUT_ERROR(what << " with kernel " << c.kernel << ", padding " << c.padding
                        << " does not fit input " << shape_str(in) << " (output would be empty)");
  return {in[0], ho, wo};
}

cpu::PoolGeom geom_of(const PoolConfig& c, const Shape& in) {  // in: [T, N, C, H, W]
  cpu::PoolGeom g;
  g.planes = in[0] * in[1] * in[2];
  g.h = in[3];
  g.w = in[4];
  g.kernel = c.kernel;
  g.stride = c.stride;
  g.padding = c.padding;
  return g;
}

void check_input(const Tensor& x, const char* what) {
  SM_CHECK(x.ndim() == 5, what << " input must be [T, N, C, H, W], got " << shape_str(x.shape()));
  SM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
           what << " supports f32/f64, got " << dtype_name(x.dtype()));
}

Shape full_out_shape(const Tensor& x, const Shape& per_sample) {
  return {x.dim(0), x.dim(1), per_sample[0], per_sample[1], per_sample[2]};
}

template <typename T, typename Idx>
void max_fwd(const Tensor& x, const cpu::PoolGeom& g, Tensor& y, Tensor& idx) {
  cpu::maxpool2d_forward<T, Idx>(x.data<T>(), g, y.data<T>(), idx.data<Idx>());
}
template <typename T, typename Idx>
void max_bwd(const Tensor& dy, const Tensor& idx, const cpu::PoolGeom& g, Tensor& dx) {
  cpu::maxpool2d_backward<T, Idx>(dy.data<T>(), idx.data<Idx>(), g, dx.data<T>());
}

}  // namespace

// ---- MaxPool2d ----------------------------------------------------------------------

MaxPool2d::MaxPool2d(const PoolConfig& c) : cfg_(c) {
  validate(c, "maxpool2d");
  if (static_cast<int64_t>(c.kernel) * c.kernel > (int64_t{1} << 31) - 1)
    SM_INPUT_ERROR("maxpool2d: kernel " << c.kernel << " is too large");
  impl_ = std::make_shared<Impl>();
}

Shape MaxPool2d::output_shape(const Shape& in) const { return pooled_shape(cfg_, in, "maxpool2d"); }

Tensor MaxPool2d::forward_cpu(const Tensor& x, Ctx& ctx) {
  check_input(x, "maxpool2d");
  const Shape out = full_out_shape(x, output_shape(Shape(x.shape().begin() + 2, x.shape().end())));
  const cpu::PoolGeom g = geom_of(cfg_, x.shape());
  const bool small = cfg_.kernel * cfg_.kernel <= 256;
  Saved& sv = impl_of(impl_).slots.fresh(ctx.slot);
  sv.in_shape = x.shape();
  Tensor y = Tensor::empty(out, x.dtype());               // [T, N, C, Ho, Wo]
  sv.argmax = Tensor::empty({y.numel()}, small ? DType::U8 : DType::I32);  // [T·N·C·Ho·Wo]
  if (x.dtype() == DType::F64) {
    small ? max_fwd<double, uint8_t>(x, g, y, sv.argmax) : max_fwd<double, int32_t>(x, g, y, sv.argmax);
  } else {
    small ? max_fwd<float, uint8_t>(x, g, y, sv.argmax) : max_fwd<float, int32_t>(x, g, y, sv.argmax);
  }
  y.set_binary(x.is_binary());  // the max of spikes is a spike
  return y;
}

Tensor MaxPool2d::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  Impl& im = impl_of(impl_);
  Saved& sv = im.slots.get(ctx.slot);
  SM_CHECK(dy.numel() == sv.argmax.numel(), "maxpool2d backward: dy " << shape_str(dy.shape())
                                                                      << " does not match forward output");
  Tensor dx = Tensor::empty(sv.in_shape, dy.dtype());  // [T, N, C, H, W]
  const cpu::PoolGeom g = geom_of(cfg_, sv.in_shape);
  const bool small = sv.argmax.dtype() == DType::U8;
  if (dy.dtype() == DType::F64) {
    small ? max_bwd<double, uint8_t>(dy, sv.argmax, g, dx) : max_bwd<double, int32_t>(dy, sv.argmax, g, dx);
  } else {
    small ? max_bwd<float, uint8_t>(dy, sv.argmax, g, dx) : max_bwd<float, int32_t>(dy, sv.argmax, g, dx);
  }
  im.slots.release(ctx.slot);
  return dx;
}

// ---- AvgPool2d ----------------------------------------------------------------------

AvgPool2d::AvgPool2d(const PoolConfig& c) : cfg_(c) {
  validate(c, "avgpool2d");
  impl_ = std::make_shared<Impl>();
}

Shape AvgPool2d::output_shape(const Shape& in) const { return pooled_shape(cfg_, in, "avgpool2d"); }

Tensor AvgPool2d::forward_cpu(const Tensor& x, Ctx& ctx) {
  check_input(x, "avgpool2d");
  const Shape out = full_out_shape(x, output_shape(Shape(x.shape().begin() + 2, x.shape().end())));
  const cpu::PoolGeom g = geom_of(cfg_, x.shape());
  impl_of(impl_).slots.fresh(ctx.slot).in_shape = x.shape();
  Tensor y = Tensor::empty(out, x.dtype());  // [T, N, C, Ho, Wo]
  if (x.dtype() == DType::F64)
    cpu::avgpool2d_forward<double>(x.data<double>(), g, y.data<double>());
  else
    cpu::avgpool2d_forward<float>(x.data<float>(), g, y.data<float>());
  return y;
}

Tensor AvgPool2d::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  Impl& im = impl_of(impl_);
  const Shape in_shape = im.slots.get(ctx.slot).in_shape;
  im.slots.release(ctx.slot);
  Tensor dx = Tensor::empty(in_shape, dy.dtype());  // [T, N, C, H, W]
  const cpu::PoolGeom g = geom_of(cfg_, in_shape);
  SM_CHECK(dy.numel() == g.planes * g.out_h() * g.out_w(),
           "avgpool2d backward: dy " << shape_str(dy.shape()) << " does not match forward output");
  if (dy.dtype() == DType::F64)
    cpu::avgpool2d_backward<double>(dy.data<double>(), g, dx.data<double>());
  else
    cpu::avgpool2d_backward<float>(dy.data<float>(), g, dx.data<float>());
  return dx;
}

}  // namespace sm
