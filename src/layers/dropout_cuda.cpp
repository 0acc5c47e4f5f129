// dropout_cuda.cpp — Dropout's CUDA hooks over kernels/cuda/dropout.h. The keep mask is drawn
// on the GPU with the very counter-based generator the CPU uses (key = CounterRng(ctx.seed,
// "dropout/" + name()), element f of sample n at counter (f, step, sample_offset + n)), so
// CPU and GPU drop the same elements; one mask per (sample, feature) shared by all time
// steps, kept as bits in the slot. Identity in eval or when p == 0.
#ifdef SPIKEMESH_HAVE_CUDA
#include <algorithm>

#include "cuda_layer_util.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cuda/dropout.h"
#include "spikemesh/layers/dropout.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct CudaSaved {
  bool identity = true;
  Tensor bits;  // u8 [ceil(N·F / 8)] keep mask, bit n·F + f
  Shape shape;  // [T, N, ...]
};

struct CudaImpl {
  SlotStore<CudaSaved> slots;
};

CudaImpl& impl(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<CudaImpl>();
  return *static_cast<CudaImpl*>(p.get());
}

// y = x ⊙ mask · scale over [T, N, F] (x may be dy in backward).
Tensor apply_mask(const Tensor& x, const Tensor& bits, double scale) {
  const int64_t steps = x.dim(0), N = x.dim(1), F = x.numel() / std::max<int64_t>(1, steps * N);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());  // [T, N, ...]
  cudaStream_t st = cuda_layer::stream_of(x);
  cuda_layer::dispatch_activation(x.dtype(), "dropout", [&](auto t) {
    using T = decltype(t);
    cuda::dropout_apply_cuda<T>(static_cast<const T*>(x.raw()), bits.data<uint8_t>(), steps, N, F,
                                static_cast<float>(scale), static_cast<T*>(y.raw()), st);
  });
  return y;
}

}  // namespace

Tensor Dropout::forward_cuda(const Tensor& x, Ctx& ctx) {
  CudaSaved& s = impl(cuda_impl_).slots.fresh(ctx.slot);
  s.shape = x.shape();
  if (!ctx.training || p_ == 0.0) return x;  // identity
  SM_CHECK(x.ndim() >= 2, "dropout '" << name() << "' expects [T, N, ...], got " << shape_str(x.shape()));
  cuda_layer::check_activation(x, "dropout", name());
  CudaAllocLabel label("dropout forward", &name_);
  const int64_t N = x.dim(1), F = x.numel() / std::max<int64_t>(1, x.dim(0) * N);
  s.identity = false;
  s.bits = Tensor::empty({cuda::dropout_mask_bytes_cuda(N, F)}, DType::U8, x.device());
  const cuda::PhiloxKey key = cuda::philox_key(ctx.seed, hash_name("dropout/" + name()));
  cuda::dropout_draw_mask_cuda(key, p_, static_cast<uint32_t>(ctx.step), ctx.sample_offset, N, F,
                               s.bits.data<uint8_t>(), cuda_layer::stream_of(x));
  return apply_mask(x, s.bits, p_ < 1.0 ? 1.0 / (1.0 - p_) : 0.0);
}

Tensor Dropout::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& s = im.slots.get(ctx.slot);
  SM_CHECK(dy.shape() == s.shape, "dropout '" << name() << "': gradient " << shape_str(dy.shape())
                                              << " does not match the forward output " << shape_str(s.shape));
  CudaAllocLabel label("dropout backward", &name_);
  Tensor dx = s.identity ? dy : apply_mask(dy, s.bits, p_ < 1.0 ? 1.0 / (1.0 - p_) : 0.0);
  im.slots.release(ctx.slot);  // no parameters: nothing is left for W
  return dx;
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
