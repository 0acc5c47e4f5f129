// h5file.h — a small RAII wrapper over the HDF5 C API: files, groups by path, whole-tensor
// datasets (f32/f64/i32/i64/u8, any shape up to kMaxDims) and scalar attributes.
// Invariants: every handle is closed by its owner's destructor; a group keeps its file
// open; every failure throws sm::Error naming the file and the object (user errors such as
// a missing file or dataset are ErrorKind::Input, library failures ErrorKind::Library).
// Paths are HDF5 paths relative to the group ("params/conv.weight"); a leading '/'
// is taken from the file root. Strings are stored as variable-length UTF-8 (h5py: str).
// Serial by default; `fapl` lets the caller pass an MPI-IO file-access property list.
#pragma once
#include <hdf5.h>

#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

// Owns one hid_t and closes it with the matching H5*close on destruction.
class H5Handle {
 public:
  H5Handle() = default;
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() { reset(); }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  H5Handle(H5Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  H5Handle& operator=(H5Handle&& o) noexcept;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Closes now and returns the close call's status (reset() ignores it).
  herr_t close_checked();
  // Forgets the id without closing it (a collective file on a rank that is failing alone).
  void release() { id_ = H5I_INVALID_HID; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

class H5Group {
 public:
  H5Group() = default;

  // Sub-groups. open_group: must exist (Input error otherwise). require_group: opens or
  // creates, intermediate groups included.
  H5Group open_group(const std::string& path) const;
  H5Group require_group(const std::string& path) const;

  bool exists(const std::string& path) const;          // any object at that path
  bool has_dataset(const std::string& path) const;
  bool has_group(const std::string& path) const;
  std::vector<std::string> list_datasets() const;      // direct children that are datasets, sorted
  std::vector<std::string> list_groups() const;        // direct children that are groups, sorted

  // Datasets. write replaces an existing dataset of the same name. The tensor may live on
  // any device (copied to host). File element type = the tensor's dtype.
  void write(const std::string& name, const Tensor& t) const;
  void write_raw(const std::string& name, DType dt, const Shape& shape, const void* data) const;
  Shape dataset_shape(const std::string& name) const;
  DType dataset_dtype(const std::string& name) const;
  // Reads the whole dataset; `as` converts (float <-> double, integers); default: file type.
  Tensor read(const std::string& name) const;
  Tensor read(const std::string& name, DType as) const;
  // Reads into an existing tensor whose shape must equal the dataset's (converting to the
  // tensor's dtype; a CUDA tensor is filled through a host copy); the message of a mismatch
  // names file, dataset and both shapes.
  void read_into(const std::string& name, Tensor& out) const;

  // Scalar attributes on this group; the *_on variants address an object below it.
  void set_attr(const std::string& key, const std::string& value) const;
  void set_attr(const std::string& key, const char* value) const { set_attr(key, std::string(value)); }
  void set_attr(const std::string& key, int64_t value) const;
  void set_attr(const std::string& key, int value) const { set_attr(key, static_cast<int64_t>(value)); }
  void set_attr(const std::string& key, double value) const;
  bool has_attr(const std::string& key) const;
  std::string attr_string(const std::string& key) const;
  int64_t attr_int(const std::string& key) const;
  double attr_double(const std::string& key) const;
  // The same on a dataset (or sub-group) below this group.
  void set_attr_on(const std::string& object, const std::string& key, const std::string& value) const;
  void set_attr_on(const std::string& object, const std::string& key, int64_t value) const;
  void set_attr_on(const std::string& object, const std::string& key, double value) const;

  hid_t id() const { return id_ ? id_->get() : H5I_INVALID_HID; }
  const std::string& file_name() const { return file_; }
  const std::string& path() const { return path_; }  // "/" for the root
  // "file.h5:/params/x" — for messages.
  std::string describe(const std::string& child = "") const;

 protected:
  H5Group(std::shared_ptr<H5Handle> file, std::shared_ptr<H5Handle> id, std::string file_name,
          std::string path)
      : file_h_(std::move(file)), id_(std::move(id)), file_(std::move(file_name)), path_(std::move(path)) {}
  std::shared_ptr<H5Handle> file_h_;  // keeps the file open while any group lives
  std::shared_ptr<H5Handle> id_;
  std::string file_;
  std::string path_;

  friend class H5File;
};

class H5File : public H5Group {
 public:
  H5File() = default;
  // Creates (truncating) a file. `fapl` defaults to serial access.
  static H5File create(const std::string& path, hid_t fapl = H5P_DEFAULT);
  // Opens an existing file; Input error if it is missing or not HDF5.
  static H5File open(const std::string& path, bool writable = false, hid_t fapl = H5P_DEFAULT);
  H5Group root() const { return *this; }
  void flush() const;
  // Closes the file now, checking the result (a parallel file: collective). Every group
  // obtained from this file must be gone; afterwards this object is empty.
  void close();
  // Drops this object WITHOUT closing the file (the id stays open until the process exits):
  // for a collective (MPI-IO) file on a rank that unwinds alone, where H5Fclose would wait
  // for the other ranks. Every group obtained from this file must be gone.
  void release();
  hid_t file_id() const { return file_h_ ? file_h_->get() : H5I_INVALID_HID; }

 private:
  // The object for the open file `fh` at `path`, on its root group ("/"); `what` for errors.
  static H5File rooted(const std::shared_ptr<H5Handle>& fh, const std::string& path, const std::string& what);
};

hid_t h5_native_type(DType dt);  // H5T_NATIVE_* for a dtype (throws for BF16/F16)

// Sets the selection of `space` (a simple dataspace of `shape`, or scalar for shape {}) to the
// elements [offset, offset + count) of its row-major flattening: a union of at most
// 2*ndims-1 hyperslab blocks (none selected when count == 0). The selection's row-major
// order is the flat order, so a 1-d memory space of `count` elements maps onto it in order.
void h5_select_flat_range(hid_t space, const Shape& shape, int64_t offset, int64_t count);

// Sets the selection of `space` (a simple dataspace of `full` = [rows, ...]) to the whole rows
// `sorted` (ascending, unique) as a union of runs of consecutive rows (none when empty); its
// row-major order is the rows' order.
void h5_select_rows(hid_t space, const std::vector<int64_t>& sorted, const Shape& full);

// The runs of consecutive rows in `sorted` (ascending, unique): how many H5D calls
// h5_transfer_rows makes for them.
int64_t h5_row_runs(const std::vector<int64_t>& sorted);

// Reads (`write` false) or writes the whole rows `sorted` (ascending, unique) of dataset `ds`,
// whose extent is `full` = [rows, ...], from/to the contiguous buffer `buf` (rows in order, each
// shape_numel(full)/full[0] elements of `mem_type`). One H5Dread/H5Dwrite per run of consecutive
// rows with a memory space shaped like the run's block: HDF5's fast path for chunked datasets
// (a selection of another shape is mapped to chunks element by element, ~100x slower). With a
// collective `dxpl` the call is collective over the file's communicator: every rank passes the
// same `calls` (>= its own runs; the extra calls select nothing).
void h5_transfer_rows(hid_t ds, hid_t mem_type, const std::vector<int64_t>& sorted, const Shape& full, hid_t dxpl,
                      void* buf, bool write, int64_t calls);

}  // namespace sm
