// tensor.cpp — Tensor storage, views and explicit CPU copies.
#include "spikemesh/core/tensor.h"

#include <cstring>
#include <sstream>

#include "spikemesh/core/allocator.h"

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

Storage::Storage(size_t bytes, Device dev) : bytes_(bytes), dev_(dev) {
  ptr_ = allocator_for(dev).allocate(bytes ? bytes : 1);
}
Storage::~Storage() { allocator_for(dev_).deallocate(ptr_, bytes_ ? bytes_ : 1); }

Tensor Tensor::empty(const Shape& shape, DType dt, Device dev) {
  SM_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "at most " << kMaxDims << " dims, got " << shape_str(shape));
  for (int64_t d : shape) SM_CHECK(d >= 0, "negative dimension in " << shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dt;
  t.storage_ = std::make_shared<Storage>(static_cast<size_t>(t.numel_) * dtype_size(dt), dev);
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

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  t.binary_ = binary_;
  return t;
}

Tensor Tensor::to(Device dev) const {
  SM_CHECK(dev == device(), "device copies need the CUDA back end (" << device().str() << " -> " << dev.str() << ")");
  return *this;
}

namespace {
template <typename S, typename D>
void convert(const void* src, void* dst, int64_t n) {
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
}
template <typename S>
void convert_from(const void* src, DType dt, void* dst, int64_t n) {
  switch (dt) {
    case DType::F32: convert<S, float>(src, dst, n); break;
    case DType::F64: convert<S, double>(src, dst, n); break;
    case DType::U8: convert<S, uint8_t>(src, dst, n); break;
    case DType::I32: convert<S, int32_t>(src, dst, n); break;
    case DType::I64: convert<S, int64_t>(src, dst, n); break;
    default: SM_CHECK(false, "conversion to " << dtype_name(dt) << " needs the CUDA back end");
  }
}
}  // namespace

Tensor Tensor::to_dtype(DType dt) const {
  if (dt == dtype_) return *this;
  SM_CHECK(device().is_cpu(), "to_dtype on " << device().str());
  Tensor t = empty(shape_, dt);
  switch (dtype_) {
    case DType::F32: convert_from<float>(raw(), dt, t.raw(), numel_); break;
    case DType::F64: convert_from<double>(raw(), dt, t.raw(), numel_); break;
    case DType::U8: convert_from<uint8_t>(raw(), dt, t.raw(), numel_); break;
    case DType::I32: convert_from<int32_t>(raw(), dt, t.raw(), numel_); break;
    case DType::I64: convert_from<int64_t>(raw(), dt, t.raw(), numel_); break;
    default: SM_CHECK(false, "conversion from " << dtype_name(dtype_) << " needs the CUDA back end");
  }
  t.binary_ = binary_;
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  SM_CHECK(src.numel_ == numel_ && src.dtype_ == dtype_,
           "copy_from " << shape_str(src.shape_) << " " << dtype_name(src.dtype_) << " into "
                        << shape_str(shape_) << " " << dtype_name(dtype_));
  SM_CHECK(device().is_cpu() && src.device().is_cpu(), "device copies need the CUDA back end");
  if (numel_) std::memcpy(raw(), src.raw(), nbytes());
}

void Tensor::fill(double v) {
  SM_CHECK(device().is_cpu(), "fill on " << device().str());
  switch (dtype_) {
    case DType::F32: { float* p = data<float>(); for (int64_t i = 0; i < numel_; ++i) p[i] = static_cast<float>(v); break; }
    case DType::F64: { double* p = data<double>(); for (int64_t i = 0; i < numel_; ++i) p[i] = v; break; }
    case DType::U8: std::memset(raw(), static_cast<int>(v), numel_); break;
    case DType::I32: { int32_t* p = data<int32_t>(); for (int64_t i = 0; i < numel_; ++i) p[i] = static_cast<int32_t>(v); break; }
    case DType::I64: { int64_t* p = data<int64_t>(); for (int64_t i = 0; i < numel_; ++i) p[i] = static_cast<int64_t>(v); break; }
    default: SM_CHECK(v == 0.0, "fill of " << dtype_name(dtype_)); zero();
  }
}

void Tensor::zero() {
  SM_CHECK(device().is_cpu(), "zero on " << device().str());
  if (numel_) std::memset(raw(), 0, nbytes());
}

double Tensor::at(int64_t i) const {
  SM_CHECK(i >= 0 && i < numel_, "index " << i << " out of " << numel_);
  SM_CHECK(device().is_cpu(), "at() on " << device().str());
  switch (dtype_) {
    case DType::F32: return static_cast<const float*>(raw())[i];
    case DType::F64: return static_cast<const double*>(raw())[i];
    case DType::U8: return static_cast<const uint8_t*>(raw())[i];
    case DType::I32: return static_cast<const int32_t*>(raw())[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(raw())[i]);
    default: SM_CHECK(false, "at() of " << dtype_name(dtype_));
  }
  return 0.0;
}

double Tensor::item() const {
  SM_CHECK(numel_ == 1, "item() of a tensor with " << numel_ << " elements");
  return at(0);
}

}  // namespace sm
