// pool.cpp — Pool2d (MaxPool2d / AvgPool2d) over [T, N, C, H, W] (PyTorch semantics), one
// flow for both kinds and devices; the kernels per device are in pool_kernels.h.
// Saved per slot: the input shape and, for max pooling, the winner's offset inside its window
// (u8 when k·k <= 256, else i32); MaxPool keeps the binary flag of its input. No parameters:
// B always releases the slot. Fused after a batch norm (forward_normalized_cpu), max pooling
// also keeps a reference to the batch norm's input and makes its backward sums.
#include "spikemesh/layers/pool.h"

#include "device_ops.h"
#include "pool_kernels.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/kernels/cpu/pool.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct Saved {
  Shape in_shape;  // [T, N, C, H, W]
  Tensor argmax;   // [T·N·C·Ho·Wo] u8/i32 window offsets (max pooling only), on x's device
  // Fused after a batch norm (forward_normalized_cpu): its input x [T, N, C, H, W], its
  // normalisation, and where its backward sums go.
  Tensor bn_input;
  std::shared_ptr<const cpu::NeuronInputAffine> affine;
  std::shared_ptr<cpu::NeuronBnGradSums> bn_sums;
};

SlotStore<Saved>& slots_of(const std::shared_ptr<void>& p) { return *static_cast<SlotStore<Saved>*>(p.get()); }

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

// Calls f(T{}, Idx{}) for the activations' dtype (f32/f64) and the winners' (u8, or i32 when
// argmax is i32; u8 also when argmax is undefined, for average pooling).
template <class F>
void with_types(const Tensor& activations, const Tensor& argmax, F&& f) {
  const bool wide = argmax.defined() && argmax.dtype() == DType::I32;
  if (activations.dtype() == DType::F64)
    wide ? f(double{}, int32_t{}) : f(double{}, uint8_t{});
  else
    wide ? f(float{}, int32_t{}) : f(float{}, uint8_t{});
}

// Runs op on the device of `in` (argmax: undefined for average pooling).
void run(pool_kernels::Op op, const cpu::PoolGeom& g, const Tensor& in, Tensor& out, const Tensor& argmax) {
  using pool_kernels::Op;
#ifdef SPIKEMESH_HAVE_CUDA
  if (in.device().is_cuda()) return pool_kernels::run_cuda(op, g, in, out, argmax);
#endif
  with_types(in, argmax, [&](auto t, auto i) {
    using T = decltype(t);
    using Idx = decltype(i);
    const T* a = in.data<T>();
    T* b = out.data<T>();
    if (op == Op::MaxForward) cpu::maxpool2d_forward<T, Idx>(a, g, b, argmax.data<Idx>());
    if (op == Op::MaxBackward) cpu::maxpool2d_backward<T, Idx>(a, argmax.data<Idx>(), g, b);
    if (op == Op::AvgForward) cpu::avgpool2d_forward<T>(a, g, b);
    if (op == Op::AvgBackward) cpu::avgpool2d_backward<T>(a, g, b);
  });
}

// The output [T, N, C, Ho, Wo] of pool over x, and the slot's state for its backward (the
// winners' offsets allocated for max pooling: u8 when k·k <= 256, else i32).
Tensor start_forward(const Pool2d& pool, const Tensor& x, Saved& sv) {
  const Shape ps = pool.output_shape(Shape(x.shape().begin() + 2, x.shape().end()));
  sv.in_shape = x.shape();
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), ps[0], ps[1], ps[2]}, x.dtype(), x.device());  // [T, N, C, Ho, Wo]
  const int k = pool.config().kernel;
  if (pool.kind() == PoolKind::Max)
    sv.argmax = Tensor::empty({y.numel()}, k * k <= 256 ? DType::U8 : DType::I32, x.device());  // [T·N·C·Ho·Wo]
  return y;
}

}  // namespace

Pool2d::Pool2d(PoolKind kind, const PoolConfig& c) : kind_(kind), cfg_(c) {
  const std::string what = type();
  if (c.kernel < 1 || c.stride < 1 || c.padding < 0)
    SM_INPUT_ERROR(what << ": kernel and stride must be >= 1 and padding >= 0 (got kernel " << c.kernel << ", stride "
                        << c.stride << ", padding " << c.padding << ")");
  if (2 * c.padding > c.kernel)
    SM_INPUT_ERROR(what << ": padding " << c.padding << " must be at most half the kernel size " << c.kernel);
  if (kind == PoolKind::Max && static_cast<int64_t>(c.kernel) * c.kernel > (int64_t{1} << 31) - 1)
    SM_INPUT_ERROR(what << ": kernel " << c.kernel << " is too large");
  impl_ = std::make_shared<SlotStore<Saved>>();
}

Shape Pool2d::output_shape(const Shape& in) const {
  const PoolConfig& c = cfg_;
  if (in.size() != 3) SM_INPUT_ERROR(type() << " expects per-sample input [C, H, W], got " << shape_str(in));
  const int64_t ho = (in[1] + 2 * c.padding - c.kernel) / c.stride + 1;
  const int64_t wo = (in[2] + 2 * c.padding - c.kernel) / c.stride + 1;
  if (in[1] + 2 * c.padding < c.kernel || in[2] + 2 * c.padding < c.kernel || ho < 1 || wo < 1)
    SM_INPUT_ERROR(type() << " with kernel " << c.kernel << ", padding " << c.padding << " does not fit input "
                          << shape_str(in) << " (output would be empty)");
  return {in[0], ho, wo};
}

Tensor Pool2d::forward_cpu(const Tensor& x, Ctx& ctx) {  // both devices
  const std::string what = type();
  SM_CHECK(x.ndim() == 5, what << " input must be [T, N, C, H, W], got " << shape_str(x.shape()));
  layer_ops::check_activation(x, what.c_str(), name());
  const std::string label_what = what + " forward";
  CudaAllocLabel label(label_what.c_str(), &name_);
  const cpu::PoolGeom g = geom_of(cfg_, x.shape());
  Saved& sv = slots_of(impl_).fresh(ctx.slot);
  Tensor y = start_forward(*this, x, sv);  // [T, N, C, Ho, Wo]
  if (kind_ == PoolKind::Avg) {
    run(pool_kernels::Op::AvgForward, g, x, y, sv.argmax);
    return y;
  }
  run(pool_kernels::Op::MaxForward, g, x, y, sv.argmax);
  y.set_binary(x.is_binary());  // the max of spikes is a spike
  return y;
}

Tensor Pool2d::backward_input_cpu(const Tensor& dy, Ctx& ctx) {  // both devices
  auto& slots = slots_of(impl_);
  const Saved sv = slots.get(ctx.slot);
  slots.release(ctx.slot);
  const std::string label_what = type() + " backward";
  CudaAllocLabel label(label_what.c_str(), &name_);
  const cpu::PoolGeom g = geom_of(cfg_, sv.in_shape);
  SM_CHECK(dy.numel() == g.planes * g.out_h() * g.out_w(),
           type() << " backward: dy " << shape_str(dy.shape()) << " does not match forward output");
  Tensor dx = Tensor::empty(sv.in_shape, dy.dtype(), dy.device());  // [T, N, C, H, W]
  run(kind_ == PoolKind::Avg ? pool_kernels::Op::AvgBackward : pool_kernels::Op::MaxBackward, g, dy, dx, sv.argmax);
  if (sv.bn_sums) {  // fused after a batch norm: its two sums over dx, from the pooled dy
    const int64_t C = sv.affine->channels;
    cpu::NeuronBnGradSums& out = *sv.bn_sums;
    out.dy.assign(static_cast<size_t>(C), 0.0);
    out.dy_xc.assign(static_cast<size_t>(C), 0.0);
    with_types(dy, sv.argmax, [&](auto t, auto i) {
      using T = decltype(t);
      using Idx = decltype(i);
      cpu::maxpool2d_bn_grad_sums<T, Idx>(dy.data<T>(), sv.argmax.data<Idx>(), sv.bn_input.data<T>(), g, C,
                                          sv.affine->center.data(), out.dy.data(), out.dy_xc.data());
    });
    out.of = dx.raw();
  }
  return dx;
}

Tensor Pool2d::forward_normalized_cpu(const Tensor& x, std::shared_ptr<const cpu::NeuronInputAffine> in,
                                      std::shared_ptr<cpu::NeuronBnGradSums> bn_sums, Ctx& ctx) {
  SM_CHECK(kind_ == PoolKind::Max && x.device().is_cpu() && in && x.ndim() == 5 && in->channels == x.dim(2),
           type() << " '" << name() << "': the fused normalisation is for max pooling on the CPU");
  last_device_ = x.device();
  const cpu::PoolGeom g = geom_of(cfg_, x.shape());
  Saved& sv = slots_of(impl_).fresh(ctx.slot);
  Tensor y = start_forward(*this, x, sv);  // [T, N, C, Ho, Wo]
  with_types(x, sv.argmax, [&](auto t, auto i) {
    using T = decltype(t);
    using Idx = decltype(i);
    cpu::maxpool2d_forward_normalized<T, Idx>(x.data<T>(), g, in->channels, in->center.data(), in->scale.data(),
                                              in->offset.data(), y.data<T>(), sv.argmax.data<Idx>());
  });
  sv.bn_input = bn_sums ? x : Tensor();
  sv.affine = std::move(in);
  sv.bn_sums = std::move(bn_sums);
  return y;  // a batch norm's output is not binary
}

}  // namespace sm
