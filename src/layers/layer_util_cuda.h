// layer_util_cuda.h — shared pieces of the layers' CUDA hooks (src/layers/*_cuda.cpp):
// activation-dtype dispatch, the per-forward compute copy of f32 master weights in the
// activation dtype (mixed precision), and DeviceSaved (an activation kept for backward:
// spikes packed as bits with kernels/cuda/bitpack.h, or the bits the neuron that made them
// already wrote, anything else by reference).
// Invariants: activations on the GPU are f32, bf16 or f16; master parameters, gradients and
// buffers are f32; all work goes to the compute stream of the tensor's device.
#pragma once
#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/spike_bits_cache.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/kernels/cuda/bitpack.h"
#include "spikemesh/kernels/cuda/elementwise.h"
#include "spikemesh/kernels/cuda/neuron.h"

namespace sm {
namespace cuda_layer {

inline cudaStream_t stream_of(const Tensor& t) { return cuda::stream_for(t.device().ordinal); }

inline bool is_activation_dtype(DType dt) { return dt == DType::F32 || dt == DType::BF16 || dt == DType::F16; }

// Calls f(T{}) with T = float, __nv_bfloat16 or __half for dt.
template <typename F>
void dispatch_activation(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::F32: f(float{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F16: f(__half{}); return;
    default: SM_CHECK(false, what << " on CUDA runs f32, bf16 or f16 activations, got " << dtype_name(dt));
  }
}

// The layer's checks shared by every hook: an activation dtype on a CUDA device and f32
// master parameters (fp64 runs on the CPU only).
inline void check_activation(const Tensor& x, const char* what, const std::string& name) {
  SM_CHECK(x.device().is_cuda(), what << " '" << name << "': CUDA hook with a " << x.device().str() << " tensor");
  SM_CHECK(is_activation_dtype(x.dtype()),
           what << " '" << name << "' on CUDA runs f32, bf16 or f16 activations, got " << dtype_name(x.dtype()));
}
inline void check_master(const Tensor& p, const Tensor& x, const char* what, const std::string& name) {
  SM_CHECK(p.defined(), what << " '" << name << "': parameters not bound (finalize the owning Unit first)");
  SM_CHECK(p.dtype() == DType::F32, what << " '" << name << "' on CUDA keeps f32 master parameters, got "
                                        << dtype_name(p.dtype()));
  SM_CHECK(p.device() == x.device(), what << " '" << name << "': parameters on " << p.device().str()
                                          << ", input on " << x.device().str());
}

// The weight as the kernels read it: the f32 master itself for f32 activations, else a
// copy cast to dt into `cache` (reallocated only when its shape or dtype changes). Called
// by every forward and backward, so it always reflects the current master values.
inline const Tensor& compute_weight(const Tensor& master, DType dt, Tensor& cache) {
  if (dt == master.dtype()) return master;
  if (!cache.defined() || cache.dtype() != dt || cache.shape() != master.shape() || cache.device() != master.device())
    cache = Tensor::empty(master.shape(), dt, master.device());
  cudaStream_t s = stream_of(master);
  const float* src = master.data<float>();
  if (dt == DType::BF16)
    cuda::cast_cuda<float, __nv_bfloat16>(src, static_cast<__nv_bfloat16*>(cache.raw()), master.numel(), s);
  else if (dt == DType::F16)
    cuda::cast_cuda<float, __half>(src, static_cast<__half*>(cache.raw()), master.numel(), s);
  else
    SM_CHECK(false, "compute copy of a weight in " << dtype_name(dt));
  return cache;
}

// An activation kept for backward: spikes (is_binary) as packed bits, else by reference.
// Bits a neuron already wrote next to x (core/spike_bits_cache.h) are shared, not re-packed.
class DeviceSaved {
 public:
  static DeviceSaved save(const Tensor& x) {
    DeviceSaved s;
    s.shape_ = x.shape();
    s.dtype_ = x.dtype();
    if (x.is_binary() && is_activation_dtype(x.dtype())) {
      s.packed_ = true;
      s.kept_ = spike_bits_find(x);  // the neuron's own bits
      if (s.kept_.defined()) return s;
      const int64_t n = x.numel();
      s.kept_ = Tensor::empty({cuda::spike_words(n)}, DType::I32, x.device());  // uint32 words
      uint32_t* bits = static_cast<uint32_t*>(s.kept_.raw());
      cudaStream_t st = stream_of(x);
      dispatch_activation(x.dtype(), "bit packing", [&](auto t) {
        using T = decltype(t);
        cuda::pack_bits_cuda<T>(static_cast<const T*>(x.raw()), n, bits, st);
      });
    } else {
      s.kept_ = x;
    }
    return s;
  }
  bool defined() const { return kept_.defined(); }
  bool packed() const { return packed_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  // Packed words (packed() only): the layout of kernels/cuda/bitpack.h.
  const uint32_t* bits() const { return static_cast<const uint32_t*>(kept_.raw()); }
  // The kept tensor itself (not packed) or a fresh unpacked copy flagged binary.
  Tensor restore() const {
    SM_CHECK(kept_.defined(), "restore of an empty DeviceSaved");
    if (!packed_) return kept_;
    Tensor out = Tensor::empty(shape_, dtype_, kept_.device());
    const int64_t n = out.numel();
    cudaStream_t st = stream_of(out);
    const uint32_t* b = bits();
    dispatch_activation(dtype_, "bit unpacking", [&](auto t) {
      using T = decltype(t);
      cuda::unpack_bits_cuda<T>(b, n, static_cast<T*>(out.raw()), st);
    });
    out.set_binary(true);
    return out;
  }

 private:
  Tensor kept_;
  Shape shape_;
  DType dtype_ = DType::F32;
  bool packed_ = false;
};

// Batch norm's affine apply handed to the neuron after it (the fused epilogue on the GPU,
// BatchNorm::forward_cuda_then): the kernel's view plus the tensors its pointers point
// into, kept alive by the neuron's slot until its backward.
struct FusedBnApply {
  cuda::NeuronAffineCuda kernel;  // center = the mean row, scale = the scale row of stats
  Tensor stats;                   // batch norm's per-channel rows (device double)
  Tensor offset;                  // β as of this forward (device f32 [C], a copy)
};

}  // namespace cuda_layer
}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
