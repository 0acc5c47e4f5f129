// tensor.h — a dense, contiguous, row-major n-d array (at most 6 dims) on one device.
// Storage is reference counted and comes from the device's caching allocator; views
// (reshape, dim-0 slices) share storage. Copies are explicit. Activations inside a model
// are time-major [T, N, C, H, W]; conv/BN kernels see them as [T*N, C, H, W].
//
// CUDA tensors: every operation on a CUDA tensor (fill, zero, clone, to_dtype, copies) is
// enqueued on the compute stream of its device (core/device.h) and is asynchronous unless
// documented otherwise; data<T>()/raw() of a CUDA tensor is a device pointer. Host-side
// reads of device data (at, item, to(cpu)) synchronise.
// Copies between devices run on the CUDA side's compute stream:
//  to(dev), copy_from(src)         on return the result is complete as far as the host is
//                                   concerned: a host destination is readable, a host source
//                                   may be changed or freed (device destinations are ready
//                                   for any later work on the compute stream);
//  to(dev, s), copy_from(src, s)   asynchronous on stream s of the CUDA side: a host
//                                   destination may be read only after synchronize(s); a
//                                   host source must stay unchanged until then (pinned
//                                   buffers, see empty_pinned, are protected from reuse by
//                                   their allocator). Copies between two GPUs always
//                                   synchronise.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/core/dtype.h"
#include "spikemesh/core/error.h"

namespace sm {

using Shape = std::vector<int64_t>;
constexpr int kMaxDims = 6;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"

class Storage {
 public:
  // pinned: page-locked host memory (dev must be the CPU; core/allocator_cuda.h).
  Storage(size_t bytes, Device dev, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return dev_; }
  bool pinned() const { return pinned_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Device dev_;
  bool pinned_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dt, Device dev = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dt, Device dev = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dt, Device dev = Device::cpu());
  // A CPU tensor in page-locked memory (for asynchronous host<->device copies) when a GPU is
  // usable; an ordinary CPU tensor otherwise (CPU-only build, no driver, no GPU).
  static Tensor empty_pinned(const Shape& shape, DType dt);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_pinned() const { return storage_ && storage_->pinned(); }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  // Whether this is the only handle to its storage (no view, copy or saved reference shares
  // it): a backward may then write its result over it (layers/layer.h).
  bool sole_handle() const { return storage_ && storage_.use_count() == 1; }

  void* raw() const;
  template <typename T> T* data() const {
    SM_CHECK(DTypeOf<T>::value == dtype_, "tensor holds " << dtype_name(dtype_) << ", asked for "
                                                          << dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(raw());
  }

  // Views sharing storage.
  Tensor view(const Shape& shape) const;          // same numel; one -1 allowed
  Tensor slice0(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0

  // Binary flag: values are exactly 0 or 1 (spikes). Set by neurons; consumers that save
  // their input for backward store such tensors as bits.
  bool is_binary() const { return binary_; }
  Tensor& set_binary(bool b) { binary_ = b; return *this; }

  // Explicit copies (see the top comment for the CUDA semantics).
  Tensor clone() const;
  Tensor to(Device dev) const;                   // same device: *this (no copy)
  Tensor to(Device dev, const Stream& s) const;  // asynchronous on s (a CUDA side's stream)
  // CPU: between f32, f64, bf16, f16 and integer types (round to nearest even to bf16/f16);
  // CUDA: any dtype to any dtype on the compute stream. Same dtype: *this.
  Tensor to_dtype(DType dt) const;
  void copy_from(const Tensor& src);                   // numel and dtype must match
  void copy_from(const Tensor& src, const Stream& s);  // asynchronous on s
  void fill(double value);
  void zero();

  double item() const;               // numel()==1, any dtype (a CUDA tensor: synchronises)
  double at(int64_t flat) const;     // element as double (tests and I/O; CUDA: synchronises)

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
  bool binary_ = false;
};

}  // namespace sm
