// device_ops.cpp — layers/device_ops.h: CPU kernels (kernels/cpu/elementwise.h, memcpy) and,
// in CUDA builds, their device counterparts (kernels/cuda/elementwise.h, cudaMemcpy2DAsync on
// the compute stream).
#include "device_ops.h"

#include <cstring>

#include "spikemesh/kernels/cpu/elementwise.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "layer_util_cuda.h"
#include "spikemesh/core/error_cuda.h"
#endif

namespace sm::layer_ops {
namespace {

void check_same(const Tensor& a, const Tensor& b, const char* what) {
  SM_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype() && a.device() == b.device(),
           what << ": " << shape_str(a.shape()) << " " << dtype_name(a.dtype()) << " on " << a.device().str() << " vs "
                << shape_str(b.shape()) << " " << dtype_name(b.dtype()) << " on " << b.device().str());
}

}  // namespace

void check_activation(const Tensor& x, const char* what, const std::string& name) {
  const DType dt = x.dtype();
  const bool ok = x.device().is_cuda() ? (dt == DType::F32 || dt == DType::BF16 || dt == DType::F16)
                                       : (dt == DType::F32 || dt == DType::F64);
  SM_CHECK(ok, what << " '" << name << "' runs f32 or f64 on the CPU, f32, bf16 or f16 on CUDA; got "
                    << dtype_name(dt) << " on " << x.device().str());
}

Tensor add(const Tensor& a, const Tensor& b, const char* what) {
  check_same(a, b, what);
  SM_CHECK(a.shape() == b.shape(), what << ": " << shape_str(a.shape()) << " + " << shape_str(b.shape()));
#ifdef SPIKEMESH_HAVE_CUDA
  if (a.device().is_cuda()) {
    Tensor c = Tensor::empty(a.shape(), a.dtype(), a.device());
    cudaStream_t st = cuda_layer::stream_of(a);
    cuda_layer::dispatch_activation(a.dtype(), what, [&](auto t) {
      using T = decltype(t);
      cuda::add_cuda<T>(static_cast<const T*>(a.raw()), static_cast<const T*>(b.raw()), static_cast<T*>(c.raw()),
                        a.numel(), st);
    });
    return c;
  }
#endif
  return cpu::add(a, b);
}

void add_inplace(Tensor& acc, const Tensor& x, const char* what) {
  check_same(acc, x, what);
#ifdef SPIKEMESH_HAVE_CUDA
  if (acc.device().is_cuda()) {
    cudaStream_t st = cuda_layer::stream_of(acc);
    cuda_layer::dispatch_activation(acc.dtype(), what, [&](auto t) {
      using T = decltype(t);
      cuda::add_inplace_cuda<T>(static_cast<T*>(acc.raw()), static_cast<const T*>(x.raw()), acc.numel(), st);
    });
    return;
  }
#endif
  cpu::add_inplace(acc, x);
}

void copy_channels(const Tensor& src, int64_t src_channels, int64_t src_c0, Tensor& dst, int64_t dst_channels,
                   int64_t dst_c0, const ChannelBlock& b) {
  SM_CHECK(src.dtype() == dst.dtype() && src.device() == dst.device() &&
               src.numel() == b.outer * src_channels * b.inner && dst.numel() == b.outer * dst_channels * b.inner &&
               src_c0 >= 0 && dst_c0 >= 0 && src_c0 + b.count <= src_channels && dst_c0 + b.count <= dst_channels,
           "copy_channels: channels [" << src_c0 << ", " << src_c0 + b.count << ") of " << shape_str(src.shape())
                                       << " to [" << dst_c0 << ", " << dst_c0 + b.count << ") of "
                                       << shape_str(dst.shape()));
  const size_t es = dtype_size(src.dtype());
  const size_t width = static_cast<size_t>(b.count * b.inner) * es;  // bytes per outer row
  const size_t spitch = static_cast<size_t>(src_channels * b.inner) * es;
  const size_t dpitch = static_cast<size_t>(dst_channels * b.inner) * es;
  const char* s = static_cast<const char*>(src.raw()) + static_cast<size_t>(src_c0 * b.inner) * es;
  char* d = static_cast<char*>(dst.raw()) + static_cast<size_t>(dst_c0 * b.inner) * es;
  if (width == 0 || b.outer == 0) return;
#ifdef SPIKEMESH_HAVE_CUDA
  if (src.device().is_cuda()) {
    SM_CUDA_CHECK(cudaMemcpy2DAsync(d, dpitch, s, spitch, width, static_cast<size_t>(b.outer),
                                    cudaMemcpyDeviceToDevice, cuda_layer::stream_of(src)));
    return;
  }
#endif
#pragma omp parallel for schedule(static) if (b.outer * b.count * b.inner > 32768)
  for (int64_t o = 0; o < b.outer; ++o) std::memcpy(d + o * dpitch, s + o * spitch, width);
}

}  // namespace sm::layer_ops
