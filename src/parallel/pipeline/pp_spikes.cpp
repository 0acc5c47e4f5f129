// pp_spikes.cpp — spike messages (pp_spikes.h): the host reference (core/bitpack.h) and the
// device path (kernels/cuda/bitpack.h, work on the compute stream of the tensor's GPU).
#include "spikemesh/parallel/pipeline/pp_spikes.h"

#include <cstring>

#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/error.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include "../../layers/layer_util_cuda.h"  // dispatch_activation (f32, bf16, f16)
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/kernels/cuda/bitpack.h"
#endif

namespace sm {

int64_t spike_message_bytes(int64_t n) { return (n + 7) / 8; }

#ifdef SPIKEMESH_HAVE_CUDA
namespace {

int64_t word_bytes(int64_t n) { return 4 * cuda::spike_words(n); }

Tensor pack_on_device(const Tensor& x, Device where) {
  const int64_t n = x.numel(), wb = word_bytes(n), nb = spike_message_bytes(n);
  Tensor buf = Tensor::empty({wb + 4}, DType::U8, x.device());  // [u32 words | u32 flag]
  Tensor flag = buf.slice0(wb, wb + 4);
  flag.zero();
  cudaStream_t st = cuda::stream_for(x.device());
  uint32_t* words = static_cast<uint32_t*>(buf.raw());
  uint32_t* nonbinary = static_cast<uint32_t*>(flag.raw());
  cuda_layer::dispatch_activation(x.dtype(), "pipeline spike packing", [&](auto t) {
    using T = decltype(t);
    cuda::pack_bits_checked_cuda<T>(static_cast<const T*>(x.raw()), n, words, nonbinary, st);
  });
  uint32_t bad = 0;
  if (where.is_cuda()) {
    const Tensor h = flag.to(Device::cpu());  // synchronises: the one read-back
    std::memcpy(&bad, h.raw(), 4);
    return bad ? Tensor() : buf.slice0(0, nb);
  }
  Tensor h = Tensor::empty_pinned({wb + 4}, DType::U8);  // words and flag in one copy (nb + at most 7 bytes)
  h.copy_from(buf);
  std::memcpy(&bad, static_cast<const uint8_t*>(h.raw()) + wb, 4);
  return bad ? Tensor() : h.slice0(0, nb);
}

Tensor unpack_on_device(const Tensor& bits, const Shape& shape, DType dt, Device dev) {
  Tensor out = Tensor::empty(shape, dt, dev);  // [shape]
  const int64_t n = out.numel();
  const uint32_t* words = static_cast<const uint32_t*>(bits.raw());
  cudaStream_t st = cuda::stream_for(dev);
  cuda_layer::dispatch_activation(dt, "pipeline spike unpacking", [&](auto t) {
    using T = decltype(t);
    cuda::unpack_bits_cuda<T>(words, n, static_cast<T*>(out.raw()), st);
  });
  return out.set_binary(true);
}

}  // namespace
#endif

Tensor pack_spike_message(const Tensor& spikes, Device where) {
  if (spikes.device().is_cpu()) {
    SM_CHECK(where.is_cpu(), "pack_spike_message: host spikes asked for on " << where.str());
    return pack_spikes_on_host(spikes);
  }
#ifdef SPIKEMESH_HAVE_CUDA
  SM_CHECK(where.is_cpu() || where == spikes.device(),
           "pack_spike_message: spikes on " << spikes.device().str() << " asked for on " << where.str());
  return pack_on_device(spikes, where);
#else
  SM_CHECK(false, "pack_spike_message: a device tensor in a build without CUDA");
  return Tensor();
#endif
}

Tensor spike_message_buffer(int64_t n, Device dev, bool pinned) {
  const int64_t nb = spike_message_bytes(n);
  if (dev.is_cpu()) return pinned ? Tensor::empty_pinned({nb}, DType::U8) : Tensor::empty({nb}, DType::U8);
#ifdef SPIKEMESH_HAVE_CUDA
  return Tensor::empty({word_bytes(n)}, DType::U8, dev).slice0(0, nb);  // whole words behind the view
#else
  SM_CHECK(false, "spike_message_buffer on " << dev.str() << " in a build without CUDA");
  return Tensor();
#endif
}

Tensor unpack_spike_message(const Tensor& bits, const Shape& shape, DType dt, Device dev) {
  const int64_t n = shape_numel(shape);
  SM_CHECK(bits.dtype() == DType::U8 && bits.numel() == spike_message_bytes(n),
           "spike message of " << bits.numel() << " x " << dtype_name(bits.dtype()) << " for " << shape_str(shape));
  if (dev.is_cpu()) return unpack_spikes_on_host(bits, shape, dt);
#ifdef SPIKEMESH_HAVE_CUDA
  if (bits.device() == dev) return unpack_on_device(bits, shape, dt, dev);
  SM_CHECK(bits.device().is_cpu(), "spike message on " << bits.device().str() << " unpacked on " << dev.str());
  Tensor up = spike_message_buffer(n, dev);
  up.copy_from(bits);  // the packed bytes cross, not the spikes
  return unpack_on_device(up, shape, dt, dev);
#else
  SM_CHECK(false, "unpack_spike_message on " << dev.str() << " in a build without CUDA");
  return Tensor();
#endif
}

}  // namespace sm
