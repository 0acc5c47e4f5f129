// residual_cuda.cpp — Residual's CUDA hooks: the body's children route by device as on the
// CPU (Sequential), the identity branch is added on the GPU (kernels/cuda/elementwise.h):
// forward y = x + body(x); backward dx = dy + body'(x)ᵀ·dy.
#ifdef SPIKEMESH_HAVE_CUDA
#include "cuda_layer_util.h"
#include "spikemesh/layers/sequential.h"

namespace sm {
namespace {

// a + b (same shape, dtype and device), a fresh tensor. Spikes + spikes are in {0, 1, 2}:
// the result is not flagged binary.
Tensor add_on_device(const Tensor& a, const Tensor& b, const char* what) {
  SM_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device(),
           what << ": " << shape_str(a.shape()) << " " << dtype_name(a.dtype()) << " on " << a.device().str() << " + "
                << shape_str(b.shape()) << " " << dtype_name(b.dtype()) << " on " << b.device().str());
  Tensor c = Tensor::empty(a.shape(), a.dtype(), a.device());
  cudaStream_t st = cuda_layer::stream_of(a);
  cuda_layer::dispatch_activation(a.dtype(), what, [&](auto t) {
    using T = decltype(t);
    cuda::add_cuda<T>(static_cast<const T*>(a.raw()), static_cast<const T*>(b.raw()), static_cast<T*>(c.raw()),
                      a.numel(), st);
  });
  return c;
}

}  // namespace

Tensor Residual::forward_cuda(const Tensor& x, Ctx& ctx) {
  Tensor fx = Sequential::forward_cpu(x, ctx);  // children dispatch on the device themselves
  CudaAllocLabel label("residual add", &name_);
  return add_on_device(x, fx, "residual add");  // [T, N, ...]
}

Tensor Residual::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  Tensor g = Sequential::backward_input_cpu(dy, ctx);
  CudaAllocLabel label("residual backward", &name_);
  return add_on_device(dy, g, "residual backward");
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
