// tensor.cpp — Tensor storage, views and explicit copies: CPU code, plus the CUDA paths
// (device allocation, stream-ordered copies, fill/convert kernels) in CUDA builds.
#include "spikemesh/core/tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "spikemesh/core/allocator.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/float_bits.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/stream_cuda.h"
#include "spikemesh/core/tensor_cuda.h"
#endif

namespace sm {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

namespace {
Allocator& storage_allocator(const Device& dev, bool pinned) {
  if (pinned) return pinned_host_allocator();
  return allocator_for(dev);
}
}  // namespace

Storage::Storage(size_t bytes, Device dev, bool pinned) : bytes_(bytes), dev_(dev), pinned_(pinned) {
  SM_CHECK(!pinned || dev.is_cpu(), "pinned storage lives on the host, not " << dev.str());
  ptr_ = storage_allocator(dev, pinned).allocate(bytes ? bytes : 1);
}
Storage::~Storage() { storage_allocator(dev_, pinned_).deallocate(ptr_, bytes_ ? bytes_ : 1); }

namespace {
void check_shape(const Shape& shape) {
  SM_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "at most " << kMaxDims << " dims, got " << shape_str(shape));
  for (int64_t d : shape) SM_CHECK(d >= 0, "negative dimension in " << shape_str(shape));
}

bool pinned_memory_usable() {
  static const bool usable = built_with_cuda() && cuda_device_count() > 0;
  return usable;
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dt, Device dev) {
  check_shape(shape);
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dt;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(t.numel_) * dtype_size(dt), dev);
  return t;
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dt) {
  if (!pinned_memory_usable()) return empty(shape, dt, Device::cpu());
  check_shape(shape);
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dt;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(t.numel_) * dtype_size(dt), Device::cpu(), true);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dt, Device dev) {
  Tensor t = empty(shape, dt, dev);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dt, Device dev) {
  Tensor t = empty(shape, dt, dev);
  t.fill(value);
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  SM_CHECK(i >= 0 && i < n, "dim " << i << " out of range for " << shape_str(shape_));
  return shape_[i];
}

void* Tensor::raw() const {
  SM_CHECK(storage_, "undefined tensor");
  return static_cast<char*>(storage_->ptr()) + offset_;
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      SM_CHECK(infer < 0, "view: more than one -1 in " << shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    SM_CHECK(known > 0 && numel_ % known == 0, "view " << shape_str(shape) << " of " << shape_str(shape_));
    s[infer] = numel_ / known;
  }
  SM_CHECK(shape_numel(s) == numel_, "view " << shape_str(s) << " does not match " << shape_str(shape_));
  SM_CHECK(s.size() <= static_cast<size_t>(kMaxDims), "at most " << kMaxDims << " dims");
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  SM_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
           "slice0 [" << begin << ", " << end << ") of " << shape_str(shape_));
  Tensor t = *this;
  int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  t.offset_ = offset_ + static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  t.numel_ = row * (end - begin);
  return t;
}

// ---- copies --------------------------------------------------------------------------------

namespace {

// Copies src's bytes into dst (same byte size). stream: the caller's stream (asynchronous
// variant) or nullptr (synchronous variant, see tensor.h).
void copy_bytes(const Tensor& dst, const Tensor& src, const Stream* stream) {
  const size_t n = src.nbytes();
  if (n == 0) return;
  const Device dd = dst.device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu()) {
    std::memcpy(dst.raw(), src.raw(), n);
    return;
  }
#ifdef SPIKEMESH_HAVE_CUDA
  if (dd.is_cuda() && sd.is_cuda() && dd.ordinal != sd.ordinal) {
    // GPU to GPU: on the destination's stream, after the source's pending work; then wait,
    // so that neither block can be reused by its own stream before the copy read/wrote it.
    cudaStream_t ss = cuda::stream_for(sd.ordinal), ds = cuda::stream_for(dd.ordinal);
    cudaEvent_t ev = nullptr;
    {
      cuda::DeviceGuard g(sd.ordinal);
      SM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      SM_CUDA_CHECK(cudaEventRecord(ev, ss));
    }
    cuda::DeviceGuard g(dd.ordinal);
    SM_CUDA_CHECK(cudaStreamWaitEvent(ds, ev, 0));
    SM_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw(), dd.ordinal, src.raw(), sd.ordinal, n, ds));
    SM_CUDA_CHECK(cudaStreamSynchronize(ds));
    SM_CUDA_CHECK(cudaEventDestroy(ev));
    return;
  }
  const int ordinal = dd.is_cuda() ? dd.ordinal : sd.ordinal;
  cuda::DeviceGuard guard(ordinal);
  cudaStream_t compute = cuda::stream_for(ordinal);
  cudaStream_t s = compute;
  if (stream) {
    SM_CHECK(stream->device == ordinal, "copy " << sd.str() << " -> " << dd.str() << " on a stream of cuda:"
                                                << stream->device);
    s = cuda::raw_stream(*stream);
  }
  // A side stream first waits for the compute stream (which produced the source and may
  // still use a reused destination block); the compute stream then waits for the copy.
  cuda::stream_wait(s, compute);
  SM_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), n, cudaMemcpyDefault, s));
  cuda::stream_wait(compute, s);
  // Synchronous variant: a host destination must be readable and a pinned host source
  // reusable on return (a pageable source is staged by cudaMemcpyAsync before it returns).
  if (!stream && (dd.is_cpu() || src.is_pinned())) SM_CUDA_CHECK(cudaStreamSynchronize(s));
#else
  (void)stream;
  SM_CHECK(false, "copy " << sd.str() << " -> " << dd.str() << ": this build has no CUDA support");
#endif
}

void check_copy(const Tensor& dst, const Tensor& src) {
  SM_CHECK(src.numel() == dst.numel() && src.dtype() == dst.dtype(),
           "copy_from " << shape_str(src.shape()) << " " << dtype_name(src.dtype()) << " into "
                        << shape_str(dst.shape()) << " " << dtype_name(dst.dtype()));
}

}  // namespace

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  t.binary_ = binary_;
  return t;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor t = empty(shape_, dtype_, dev);
  copy_bytes(t, *this, nullptr);
  t.binary_ = binary_;
  return t;
}

Tensor Tensor::to(Device dev, const Stream& s) const {
  if (dev == device()) return *this;
  Tensor t = empty(shape_, dtype_, dev);
  copy_bytes(t, *this, &s);
  t.binary_ = binary_;
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  check_copy(*this, src);
  copy_bytes(*this, src, nullptr);
}

void Tensor::copy_from(const Tensor& src, const Stream& s) {
  check_copy(*this, src);
  copy_bytes(*this, src, &s);
}

// ---- dtype conversion on the host ------------------------------------------------------------

namespace {

// bf16 / f16 as stored bits; conversions round to nearest even.
struct Bf16 { uint16_t bits; };
struct Half { uint16_t bits; };

float bf16_to_float(Bf16 h) { return bf16_bits_to_float(h.bits); }
Bf16 float_to_bf16(float f) { return Bf16{float_to_bf16_bits(f)}; }

float half_to_float(Half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu, man = h.bits & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man · 2^-24
    const float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

Half float_to_half(float f) {
  uint32_t u = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return Half{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (u >= 0x477ff000u) return Half{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: inf
  if (u < 0x38800000u) {  // below 2^-14: subnormal (units of 2^-24), round to nearest even
    const float scaled = bits_to_float(u) * 16777216.0f;  // exact (power-of-two scaling)
    const uint16_t m = static_cast<uint16_t>(std::nearbyint(scaled));  // 1024 = smallest normal
    return Half{static_cast<uint16_t>(sign | m)};
  }
  uint32_t h = (((u >> 23) - 112u) << 10) | ((u & 0x7fffffu) >> 13);
  const uint32_t rest = u & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;  // may carry into the exponent
  return Half{static_cast<uint16_t>(sign | h)};
}

template <typename D, typename S> D cvt(S v) { return static_cast<D>(v); }
template <> float cvt<float, Bf16>(Bf16 v) { return bf16_to_float(v); }
template <> double cvt<double, Bf16>(Bf16 v) { return bf16_to_float(v); }
template <> float cvt<float, Half>(Half v) { return half_to_float(v); }
template <> double cvt<double, Half>(Half v) { return half_to_float(v); }
template <> Bf16 cvt<Bf16, float>(float v) { return float_to_bf16(v); }
template <> Bf16 cvt<Bf16, double>(double v) { return float_to_bf16(static_cast<float>(v)); }
template <> Half cvt<Half, float>(float v) { return float_to_half(v); }
template <> Half cvt<Half, double>(double v) { return float_to_half(static_cast<float>(v)); }
template <> Bf16 cvt<Bf16, Bf16>(Bf16 v) { return v; }
template <> Half cvt<Half, Half>(Half v) { return v; }
template <> Bf16 cvt<Bf16, Half>(Half v) { return float_to_bf16(half_to_float(v)); }
template <> Half cvt<Half, Bf16>(Bf16 v) { return float_to_half(bf16_to_float(v)); }
// Integers to/from the half types go through float.
#define SM_HALF_INT_CVT(I)                                                                   \
  template <> Bf16 cvt<Bf16, I>(I v) { return float_to_bf16(static_cast<float>(v)); }       \
  template <> Half cvt<Half, I>(I v) { return float_to_half(static_cast<float>(v)); }       \
  template <> I cvt<I, Bf16>(Bf16 v) { return static_cast<I>(bf16_to_float(v)); }          \
  template <> I cvt<I, Half>(Half v) { return static_cast<I>(half_to_float(v)); }
SM_HALF_INT_CVT(uint8_t)
SM_HALF_INT_CVT(int32_t)
SM_HALF_INT_CVT(int64_t)
#undef SM_HALF_INT_CVT

template <typename S, typename D>
void convert(const void* src, void* dst, int64_t n) {
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = cvt<D, S>(s[i]);
}
template <typename S>
void convert_from(const void* src, DType dt, void* dst, int64_t n) {
  switch (dt) {
    case DType::F32: convert<S, float>(src, dst, n); return;
    case DType::F64: convert<S, double>(src, dst, n); return;
    case DType::BF16: convert<S, Bf16>(src, dst, n); return;
    case DType::F16: convert<S, Half>(src, dst, n); return;
    case DType::U8: convert<S, uint8_t>(src, dst, n); return;
    case DType::I32: convert<S, int32_t>(src, dst, n); return;
    case DType::I64: convert<S, int64_t>(src, dst, n); return;
  }
  SM_CHECK(false, "conversion to " << dtype_name(dt));
}

// Element i of host memory p holding dtype dt, as double.
double host_element(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::BF16: return bf16_to_float(static_cast<const Bf16*>(p)[i]);
    case DType::F16: return half_to_float(static_cast<const Half*>(p)[i]);
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  SM_CHECK(false, "element of " << dtype_name(dt));
  return 0.0;
}

}  // namespace

Tensor Tensor::to_dtype(DType dt) const {
  if (dt == dtype_) return *this;
  Tensor t = empty(shape_, dt, device());
  if (device().is_cuda()) {
#ifdef SPIKEMESH_HAVE_CUDA
    cuda::DeviceGuard guard(device().ordinal);
    cuda::convert(raw(), dtype_, t.raw(), dt, numel_, cuda::stream_for(device().ordinal));
#endif
  } else {
    switch (dtype_) {
      case DType::F32: convert_from<float>(raw(), dt, t.raw(), numel_); break;
      case DType::F64: convert_from<double>(raw(), dt, t.raw(), numel_); break;
      case DType::BF16: convert_from<Bf16>(raw(), dt, t.raw(), numel_); break;
      case DType::F16: convert_from<Half>(raw(), dt, t.raw(), numel_); break;
      case DType::U8: convert_from<uint8_t>(raw(), dt, t.raw(), numel_); break;
      case DType::I32: convert_from<int32_t>(raw(), dt, t.raw(), numel_); break;
      case DType::I64: convert_from<int64_t>(raw(), dt, t.raw(), numel_); break;
    }
  }
  t.binary_ = binary_;
  return t;
}

void Tensor::fill(double v) {
  if (device().is_cuda()) {
#ifdef SPIKEMESH_HAVE_CUDA
    cuda::DeviceGuard guard(device().ordinal);
    cuda::fill(raw(), dtype_, numel_, v, cuda::stream_for(device().ordinal));
#endif
    return;
  }
  switch (dtype_) {
    case DType::F32: { float* p = data<float>(); for (int64_t i = 0; i < numel_; ++i) p[i] = static_cast<float>(v); break; }
    case DType::F64: { double* p = data<double>(); for (int64_t i = 0; i < numel_; ++i) p[i] = v; break; }
    case DType::U8: std::memset(raw(), static_cast<int>(v), numel_); break;
    case DType::I32: { int32_t* p = data<int32_t>(); for (int64_t i = 0; i < numel_; ++i) p[i] = static_cast<int32_t>(v); break; }
    case DType::I64: { int64_t* p = data<int64_t>(); for (int64_t i = 0; i < numel_; ++i) p[i] = static_cast<int64_t>(v); break; }
    case DType::BF16: { Bf16* p = static_cast<Bf16*>(raw()); const Bf16 h = cvt<Bf16, double>(v); for (int64_t i = 0; i < numel_; ++i) p[i] = h; break; }
    case DType::F16: { Half* p = static_cast<Half*>(raw()); const Half h = cvt<Half, double>(v); for (int64_t i = 0; i < numel_; ++i) p[i] = h; break; }
  }
}

void Tensor::zero() {
  if (!numel_) return;
  if (device().is_cuda()) {
#ifdef SPIKEMESH_HAVE_CUDA
    cuda::DeviceGuard guard(device().ordinal);
    SM_CUDA_CHECK(cudaMemsetAsync(raw(), 0, nbytes(), cuda::stream_for(device().ordinal)));
#endif
    return;
  }
  std::memset(raw(), 0, nbytes());
}

double Tensor::at(int64_t i) const {
  SM_CHECK(i >= 0 && i < numel_, "index " << i << " out of " << numel_);
  if (device().is_cuda()) {
    alignas(8) unsigned char buf[8] = {0};
#ifdef SPIKEMESH_HAVE_CUDA
    const size_t es = dtype_size(dtype_);
    cuda::DeviceGuard guard(device().ordinal);
    cudaStream_t s = cuda::stream_for(device().ordinal);
    SM_CUDA_CHECK(cudaMemcpyAsync(buf, static_cast<const char*>(raw()) + static_cast<size_t>(i) * es, es,
                                  cudaMemcpyDeviceToHost, s));
    SM_CUDA_CHECK(cudaStreamSynchronize(s));
#endif
    return host_element(buf, dtype_, 0);
  }
  return host_element(raw(), dtype_, i);
}

double Tensor::item() const {
  SM_CHECK(numel_ == 1, "item() of a tensor with " << numel_ << " elements");
  return at(0);
}

}  // namespace sm
