// spiking_attention_cuda.cpp — SpikingAttention ("ssa") CUDA hooks over
// kernels/cuda/spiking_attention.h, for f32, bf16 and f16 activations on the tensor's compute
// stream. The CPU hooks (spiking_attention.cpp) are the reference.
//
// Saved per slot (cuda_impl_): the input qkv [T, N, 3C, L] as a cuda_layer::DeviceSaved —
// packed bits (1/32 of f32) when x is flagged binary, else a reference.
// Forward path: the popcount kernel, reading those very bits, when x is binary and the head
// size fits it (ssa_popcount_supported: d <= 109); otherwise the tiled f32 GEMM path on the
// values. Both give the CPU's exact integers·scale on spikes in f32.
// Backward reads q, k, v from the bits (or the kept values) and always releases the slot (no
// parameters). Workspaces (f32 d×d per (t, n, head)) come from the caching allocator.
#ifdef SPIKEMESH_HAVE_CUDA
#include <algorithm>

#include "layer_util_cuda.h"
#include "spikemesh/kernels/cuda/spiking_attention.h"
#include "spikemesh/layers/slot_store.h"
#include "spikemesh/layers/spiking_attention.h"

namespace sm {
namespace {

using Slots = SlotStore<cuda_layer::DeviceSaved>;  // qkv [T, N, 3C, L] of each slot's forward

Slots& cuda_slots(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<Slots>();
  return *static_cast<Slots*>(p.get());
}

Tensor workspace(int64_t floats, const Device& dev) {
  return Tensor::empty({std::max<int64_t>(floats, 1)}, DType::F32, dev);
}

}  // namespace

Tensor SpikingAttention::forward_cuda(const Tensor& x, Ctx& ctx) {
  SM_CHECK(x.ndim() == 4, "ssa input must be [T, N, 3C, L], got " << shape_str(x.shape()));
  cuda_layer::check_activation(x, "ssa", name());
  CudaAllocLabel label("ssa forward", &name_);
  const Shape ps = output_shape({x.dim(2), x.dim(3)});  // [C, L]
  const cpu::SsaGeom g = geometry(x.shape());
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), ps[0], ps[1]}, x.dtype(), x.device());  // [T, N, C, L]
  cuda_layer::DeviceSaved& saved = cuda_slots(cuda_impl_).fresh(ctx.slot);
  saved = cuda_layer::DeviceSaved::save(x);  // bits when binary
  const bool popcount = saved.packed() && cuda::ssa_popcount_supported(g);
  const Tensor work = popcount ? Tensor() : workspace(cuda::ssa_workspace_floats(g, cuda::SsaPath::Gemm), x.device());
  cudaStream_t st = cuda_layer::stream_of(x);
  cuda_layer::dispatch_activation(x.dtype(), "ssa", [&](auto t) {
    using T = decltype(t);
    T* out = static_cast<T*>(y.raw());
    if (popcount)
      cuda::ssa_forward_popcount_cuda<T>(saved.bits(), g, scale_, out, st);
    else
      cuda::ssa_forward_gemm_cuda<T>(static_cast<const T*>(x.raw()), g, scale_, work.data<float>(), out, st);
  });
  return y;  // not binary: multiples of scale
}

Tensor SpikingAttention::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaAllocLabel label("ssa backward", &name_);
  Slots& slots = cuda_slots(cuda_impl_);
  const cuda_layer::DeviceSaved saved = slots.get(ctx.slot);  // keeps the bits / values alive below
  slots.release(ctx.slot);
  const Shape& xs = saved.shape();
  const Shape ys{xs[0], xs[1], xs[2] / 3, xs[3]};  // [T, N, C, L]
  SM_CHECK(dy.device().is_cuda() && dy.shape() == ys && dy.dtype() == saved.dtype(),
           "ssa backward: dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()) << " on "
                               << dy.device().str() << " does not match output " << shape_str(ys) << " "
                               << dtype_name(saved.dtype()));
  const cpu::SsaGeom g = geometry(xs);
  Tensor dx = Tensor::empty(xs, dy.dtype(), dy.device());  // [T, N, 3C, L]
  const Tensor work = workspace(cuda::ssa_backward_workspace_floats(g), dy.device());
  const Tensor qkv = saved.packed() ? Tensor() : saved.restore();  // the kept input when not bits
  const uint32_t* bits = saved.packed() ? saved.bits() : nullptr;
  cudaStream_t st = cuda_layer::stream_of(dy);
  cuda_layer::dispatch_activation(dy.dtype(), "ssa", [&](auto t) {
    using T = decltype(t);
    cuda::ssa_backward_cuda<T>(static_cast<const T*>(dy.raw()),
                               qkv.defined() ? static_cast<const T*>(qkv.raw()) : nullptr, bits, g, scale_,
                               work.data<float>(), static_cast<T*>(dx.raw()), st);
  });
  return dx;
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
