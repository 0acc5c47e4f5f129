// h5_dataset.h — datasets in HDF5 (DESIGN §7): /train/x, /train/y, /test/x, /test/y;
// root attributes num_classes, T, layout ("NTCHW" events or "NCHW" static), encoding,
// source, x_scale (multiplied into x on load; e.g. 1/255 for u8 images). x is u8 or f32,
// chunked by sample; y is an integer vector. open() validates the whole schema and every
// label up front so a bad file fails before any training with one message naming it.
#pragma once
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/io/h5file.h"

namespace sm {

enum class Split { Train, Test };
const char* split_name(Split s);

struct DatasetInfo {
  std::string path;
  int num_classes = 0;
  int T = 0;               // time steps stored (NTCHW) or 0 for static images
  std::string layout;      // "NTCHW" | "NCHW"
  std::string encoding;    // how the file's x was made ("events", "image", ...)
  std::string source;
  double x_scale = 1.0;
  Shape sample_shape;      // per sample: [T, C, H, W] or [C, H, W]
  DType stored = DType::U8;
  int64_t train_size = 0, test_size = 0;
  bool is_events() const { return layout == "NTCHW"; }
};

class H5Dataset {
 public:
  // Opens and validates. `fapl` may be an MPI-IO access list (collective reads).
  static H5Dataset open(const std::string& path, hid_t fapl = H5P_DEFAULT);
  const DatasetInfo& info() const { return info_; }
  int64_t size(Split s) const { return s == Split::Train ? info_.train_size : info_.test_size; }
  // Samples `indices` (any order, duplicates allowed) of split `s`:
  // x f32 [n, ...sample_shape] scaled by x_scale, y i64 [n].
  void read(Split s, const std::vector<int64_t>& indices, Tensor& x, Tensor& y) const;

 private:
  H5File file_;
  DatasetInfo info_;
};

// Writes a dataset file split by split. Creates the file under a temporary name; commit()
// renames it into place, so an interrupted import never leaves a half-written dataset.
class H5DatasetWriter {
 public:
  H5DatasetWriter(const std::string& path, const DatasetInfo& info);
  ~H5DatasetWriter();
  // x: stored dtype (u8 or f32) [n, ...sample_shape]; y: i64 [n]. Creates the split's
  // datasets on first call (size = info train/test size) and appends at `offset`.
  void write(Split s, int64_t offset, const Tensor& x, const Tensor& y);
  void commit();

 private:
  std::string path_, tmp_;
  DatasetInfo info_;
  H5File file_;
  bool committed_ = false;
};

}  // namespace sm
