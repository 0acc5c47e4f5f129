// mean_cuda.cpp — the Mean layer's CUDA hooks over kernels/cuda/mean.h, for f32, bf16 and
// f16 activations on the tensor's compute stream; the CPU hooks (mean.cpp) are the reference
// and use the same view [outer, D, inner] of the input. Saved per slot (cuda_impl_, its own
// store): only the input shape; B releases it. The output is not binary (a mean of spikes).
#ifdef SPIKEMESH_HAVE_CUDA
#include "layer_util_cuda.h"
#include "spikemesh/kernels/cuda/mean.h"
#include "spikemesh/layers/mean.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

SlotStore<Shape>& cuda_slots(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<SlotStore<Shape>>();
  return *static_cast<SlotStore<Shape>*>(p.get());
}

}  // namespace

Tensor Mean::forward_cuda(const Tensor& x, Ctx& ctx) {
  SM_CHECK(x.ndim() >= 3, "mean input must be [T, N, ...], got " << shape_str(x.shape()));
  cuda_layer::check_activation(x, "mean", name());
  CudaAllocLabel label("mean forward", &name_);
  const View g = view_of(x.shape());
  Shape out_shape = {x.dim(0), x.dim(1)};
  for (const int64_t s : output_shape(Shape(x.shape().begin() + 2, x.shape().end()))) out_shape.push_back(s);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());  // [T, N, ...without dim]
  cudaStream_t st = cuda_layer::stream_of(x);
  cuda_layer::dispatch_activation(x.dtype(), "mean", [&](auto t) {
    using T = decltype(t);
    cuda::mean_forward_cuda<T>(static_cast<const T*>(x.raw()), g.outer, g.d, g.inner, static_cast<T*>(y.raw()), st);
  });
  cuda_slots(cuda_impl_).fresh(ctx.slot) = x.shape();
  return y;
}

Tensor Mean::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaAllocLabel label("mean backward", &name_);
  auto& store = cuda_slots(cuda_impl_);
  const Shape in = store.get(ctx.slot);
  store.release(ctx.slot);
  const View g = view_of(in);
  SM_CHECK(dy.device().is_cuda() && dy.numel() == g.outer * g.inner,
           "mean backward: dy " << shape_str(dy.shape()) << " on " << dy.device().str() << " does not match input "
                                << shape_str(in));
  cuda_layer::check_activation(dy, "mean", name());
  Tensor dx = Tensor::empty(in, dy.dtype(), dy.device());  // [T, N, ...]
  cudaStream_t st = cuda_layer::stream_of(dy);
  cuda_layer::dispatch_activation(dy.dtype(), "mean", [&](auto t) {
    using T = decltype(t);
    cuda::mean_backward_cuda<T>(static_cast<const T*>(dy.raw()), g.outer, g.d, g.inner, static_cast<T*>(dx.raw()), st);
  });
  return dx;
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
