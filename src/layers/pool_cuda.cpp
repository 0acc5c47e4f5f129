// pool_cuda.cpp — the CUDA pooling kernels of pool_kernels.h over kernels/cuda/pool.h (the
// CPU's semantics exactly: floor mode, -inf padding for max, count_include_pad for avg, first
// maximum wins), for f32, bf16 and f16 activations on the tensor's compute stream.
#ifdef SPIKEMESH_HAVE_CUDA
#include "layer_util_cuda.h"
#include "pool_kernels.h"
#include "spikemesh/kernels/cuda/pool.h"

namespace sm::pool_kernels {

void run_cuda(Op op, const cpu::PoolGeom& g, const Tensor& in, Tensor& out, const Tensor& argmax) {
  cudaStream_t st = cuda_layer::stream_of(in);
  const bool wide = argmax.defined() && argmax.dtype() == DType::I32;  // else u8 offsets (or none)
  cuda_layer::dispatch_activation(in.dtype(), "pooling", [&](auto t) {
    using T = decltype(t);
    auto typed = [&](auto i) {
      using Idx = decltype(i);
      const T* a = static_cast<const T*>(in.raw());
      T* b = static_cast<T*>(out.raw());
      if (op == Op::MaxForward) cuda::maxpool2d_forward_cuda<T, Idx>(a, g, b, argmax.data<Idx>(), st);
      if (op == Op::MaxBackward) cuda::maxpool2d_backward_cuda<T, Idx>(a, argmax.data<Idx>(), g, b, st);
      if (op == Op::AvgForward) cuda::avgpool2d_forward_cuda<T>(a, g, b, st);
      if (op == Op::AvgBackward) cuda::avgpool2d_backward_cuda<T>(a, g, b, st);
    };
    wide ? typed(int32_t{}) : typed(uint8_t{});
  });
}

}  // namespace sm::pool_kernels
#endif  // SPIKEMESH_HAVE_CUDA
