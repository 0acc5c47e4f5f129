// dropout_cuda.cpp — the CUDA dropout kernels of dropout_kernels.h over kernels/cuda/dropout.h:
// the keep mask drawn on the GPU with the very counter-based generator the CPU uses
// (Philox keyed by (seed, hash of the stream name)), applied to f32, bf16 or f16 tensors on
// the tensor's compute stream.
#ifdef SPIKEMESH_HAVE_CUDA
#include "dropout_kernels.h"
#include "layer_util_cuda.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cuda/dropout.h"

namespace sm::dropout_kernels {

Tensor draw_mask_cuda(const MaskSpec& s, Device dev) {
  Tensor bits = Tensor::empty({cuda::dropout_mask_bytes_cuda(s.N, s.F)}, DType::U8, dev);
  const cuda::PhiloxKey key = cuda::philox_key(s.seed, hash_name(s.stream));
  cuda::dropout_draw_mask_cuda(key, s.p, s.step, s.sample_offset, s.N, s.F, bits.data<uint8_t>(),
                               cuda::stream_for(dev), static_cast<const uint32_t*>(s.step_on_device),
                               static_cast<const int64_t*>(s.sample_offset_on_device));
  return bits;
}

Tensor apply_mask_cuda(const Tensor& x, const Tensor& bits, int64_t N, int64_t F, double scale) {
  const int64_t steps = x.dim(0);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());  // [T, N, ...]
  cudaStream_t st = cuda_layer::stream_of(x);
  cuda_layer::dispatch_activation(x.dtype(), "dropout", [&](auto t) {
    using T = decltype(t);
    cuda::dropout_apply_cuda<T>(static_cast<const T*>(x.raw()), bits.data<uint8_t>(), steps, N, F,
                                static_cast<float>(scale), static_cast<T*>(y.raw()), st);
  });
  return y;
}

}  // namespace sm::dropout_kernels
#endif  // SPIKEMESH_HAVE_CUDA
