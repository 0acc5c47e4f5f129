// pool_cuda.cpp — MaxPool2d / AvgPool2d CUDA hooks over kernels/cuda/pool.h (the CPU's
// semantics exactly: floor mode, -inf padding for max, count_include_pad for avg, first
// maximum wins). MaxPool keeps the winner offsets (u8 when k·k <= 256, else i32) and the
// binary flag of its input; AvgPool keeps only the input shape. B releases the slot.
#ifdef SPIKEMESH_HAVE_CUDA
#include "cuda_layer_util.h"
#include "spikemesh/kernels/cuda/pool.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct CudaSaved {
  Shape in_shape;  // [T, N, C, H, W]
  Tensor argmax;   // [T·N·C·Ho·Wo] u8/i32 window offsets (max pooling only)
};

struct CudaImpl {
  SlotStore<CudaSaved> slots;
};

CudaImpl& impl(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<CudaImpl>();
  return *static_cast<CudaImpl*>(p.get());
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

void check_input(const Tensor& x, const char* what, const std::string& name) {
  SM_CHECK(x.ndim() == 5, what << " input must be [T, N, C, H, W], got " << shape_str(x.shape()));
  cuda_layer::check_activation(x, what, name);
}

Shape full_out_shape(const Tensor& x, const Shape& per_sample) {
  return {x.dim(0), x.dim(1), per_sample[0], per_sample[1], per_sample[2]};
}

}  // namespace

// ---- MaxPool2d ----------------------------------------------------------------------

Tensor MaxPool2d::forward_cuda(const Tensor& x, Ctx& ctx) {
  check_input(x, "maxpool2d", name());
  CudaAllocLabel label("maxpool2d forward", &name_);
  const Shape out = full_out_shape(x, output_shape(Shape(x.shape().begin() + 2, x.shape().end())));
  const cpu::PoolGeom g = geom_of(cfg_, x.shape());
  const bool small = cfg_.kernel * cfg_.kernel <= 256;
  CudaSaved& sv = impl(cuda_impl_).slots.fresh(ctx.slot);
  sv.in_shape = x.shape();
  Tensor y = Tensor::empty(out, x.dtype(), x.device());  // [T, N, C, Ho, Wo]
  sv.argmax = Tensor::empty({y.numel()}, small ? DType::U8 : DType::I32, x.device());  // [T·N·C·Ho·Wo]
  cudaStream_t st = cuda_layer::stream_of(x);
  cuda_layer::dispatch_activation(x.dtype(), "maxpool2d", [&](auto t) {
    using T = decltype(t);
    if (small)
      cuda::maxpool2d_forward_cuda<T, uint8_t>(static_cast<const T*>(x.raw()), g, static_cast<T*>(y.raw()),
                                               sv.argmax.data<uint8_t>(), st);
    else
      cuda::maxpool2d_forward_cuda<T, int32_t>(static_cast<const T*>(x.raw()), g, static_cast<T*>(y.raw()),
                                               sv.argmax.data<int32_t>(), st);
  });
  y.set_binary(x.is_binary());  // the max of spikes is a spike
  return y;
}

Tensor MaxPool2d::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& sv = im.slots.get(ctx.slot);
  SM_CHECK(dy.numel() == sv.argmax.numel() && dy.device().is_cuda(),
           "maxpool2d backward: dy " << shape_str(dy.shape()) << " does not match forward output");
  CudaAllocLabel label("maxpool2d backward", &name_);
  Tensor dx = Tensor::empty(sv.in_shape, dy.dtype(), dy.device());  // [T, N, C, H, W]
  const cpu::PoolGeom g = geom_of(cfg_, sv.in_shape);
  const bool small = sv.argmax.dtype() == DType::U8;
  cudaStream_t st = cuda_layer::stream_of(dy);
  cuda_layer::dispatch_activation(dy.dtype(), "maxpool2d", [&](auto t) {
    using T = decltype(t);
    if (small)
      cuda::maxpool2d_backward_cuda<T, uint8_t>(static_cast<const T*>(dy.raw()), sv.argmax.data<uint8_t>(), g,
                                                static_cast<T*>(dx.raw()), st);
    else
      cuda::maxpool2d_backward_cuda<T, int32_t>(static_cast<const T*>(dy.raw()), sv.argmax.data<int32_t>(), g,
                                                static_cast<T*>(dx.raw()), st);
  });
  im.slots.release(ctx.slot);
  return dx;
}

// ---- AvgPool2d ----------------------------------------------------------------------

Tensor AvgPool2d::forward_cuda(const Tensor& x, Ctx& ctx) {
  check_input(x, "avgpool2d", name());
  CudaAllocLabel label("avgpool2d forward", &name_);
  const Shape out = full_out_shape(x, output_shape(Shape(x.shape().begin() + 2, x.shape().end())));
  const cpu::PoolGeom g = geom_of(cfg_, x.shape());
  impl(cuda_impl_).slots.fresh(ctx.slot).in_shape = x.shape();
  Tensor y = Tensor::empty(out, x.dtype(), x.device());  // [T, N, C, Ho, Wo]
  cudaStream_t st = cuda_layer::stream_of(x);
  cuda_layer::dispatch_activation(x.dtype(), "avgpool2d", [&](auto t) {
    using T = decltype(t);
    cuda::avgpool2d_forward_cuda<T>(static_cast<const T*>(x.raw()), g, static_cast<T*>(y.raw()), st);
  });
  return y;
}

Tensor AvgPool2d::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  const Shape in_shape = im.slots.get(ctx.slot).in_shape;
  im.slots.release(ctx.slot);
  CudaAllocLabel label("avgpool2d backward", &name_);
  const cpu::PoolGeom g = geom_of(cfg_, in_shape);
  SM_CHECK(dy.numel() == g.planes * g.out_h() * g.out_w() && dy.device().is_cuda(),
           "avgpool2d backward: dy " << shape_str(dy.shape()) << " does not match forward output");
  Tensor dx = Tensor::empty(in_shape, dy.dtype(), dy.device());  // [T, N, C, H, W]
  cudaStream_t st = cuda_layer::stream_of(dy);
  cuda_layer::dispatch_activation(dy.dtype(), "avgpool2d", [&](auto t) {
    using T = decltype(t);
    cuda::avgpool2d_backward_cuda<T>(static_cast<const T*>(dy.raw()), g, static_cast<T*>(dx.raw()), st);
  });
  return dx;
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
