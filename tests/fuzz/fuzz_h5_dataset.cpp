// fuzz_h5_dataset.cpp — structure-aware libFuzzer harness for the HDF5 dataset validator
// (src/data/h5_dataset.cpp H5Dataset::open and, on an accepted file, H5Dataset::read).
// Each input builds a real dataset file: first a valid one written by the project's own
// H5DatasetWriter (layout NTCHW or NCHW, sample shape, split sizes 0..4, u8 or f32, labels,
// attributes: all chosen by the input bytes), then up to 8 perturbations (tests/fuzz/
// h5_perturb.h: missing / replaced datasets of any rank, shape incl. 0 and 2^40.., and type,
// groups where datasets belong, attributes num_classes / T / layout / x_scale / encoding /
// source rewritten with other types, NaN/Inf/huge/negative values, arrays, or deleted, single
// labels set out of range). Expected outcomes: the file is accepted, or sm::Error. Properties
// of an accepted file: every label read back is in [0, num_classes), x has [n, ...sample]
// elements, splits and sample shape agree with the file.
#include <hdf5.h>

#include <string>
#include <vector>

#include "fuzz_util.h"
#include "h5_perturb.h"
#include "spikemesh/data/h5_dataset.h"

namespace {

const char* const kObjects[] = {"/train/x", "/train/y", "/test/x", "/test/y", "/train", "/test"};
const char* const kAttrs[] = {"num_classes", "T", "layout", "x_scale", "encoding", "source", "format_version"};

// A valid dataset file from the project's writer; returns false when the writer refused.
bool write_base(const std::string& path, fuzz::Bytes& in) {
  sm::DatasetInfo info;
  const bool events = in.flag();
  info.layout = events ? "NTCHW" : "NCHW";
  info.num_classes = int(2 + in.u8() % 4);
  info.encoding = events ? "events" : "image";
  info.source = "fuzz";
  info.stored = in.flag() ? sm::DType::F32 : sm::DType::U8;
  info.x_scale = in.flag() ? 1.0 / 255 : 1.0;
  for (int d = 0; d < (events ? 4 : 3); ++d) info.sample_shape.push_back(1 + in.u8() % 3);
  info.T = events ? int(info.sample_shape[0]) : 0;
  info.train_size = in.u8() % 5;
  info.test_size = in.u8() % 5;
  sm::H5DatasetWriter w(path, info);
  for (sm::Split s : {sm::Split::Train, sm::Split::Test}) {
    const int64_t n = s == sm::Split::Train ? info.train_size : info.test_size;
    sm::Shape xs = {n};
    xs.insert(xs.end(), info.sample_shape.begin(), info.sample_shape.end());
    sm::Tensor x = sm::Tensor::zeros(xs, info.stored);
    sm::Tensor y = sm::Tensor::zeros({n}, sm::DType::I64);
    for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = in.u8() % info.num_classes;
    if (info.stored == sm::DType::U8)
      for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = in.u8();
    else
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = in.u8() / 16.0f;
    w.write(s, 0, x, y);
  }
  w.commit();
  return true;
}

void perturb(const std::string& path, fuzz::Bytes& in) {
  const int ops = in.u8() % 9;
  if (ops == 0) return;
  auto f = fuzz::h5(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!f.valid()) fuzz::fail("cannot reopen the dataset file the writer made");
  for (int k = 0; k < ops; ++k) {
    const std::string obj = kObjects[in.u8() % 6];
    switch (in.u8() % 6) {
      case 0: fuzz::delete_link(f.get(), obj); break;
      case 1: fuzz::replace_dataset(f.get(), obj.size() > 6 ? obj : obj + "/x", in); break;
      case 2: case 3: fuzz::replace_attr(f.get(), ".", kAttrs[in.u8() % 7], in); break;
      case 4: fuzz::poke_element(f.get(), obj, in); break;
      default: fuzz::swap_kind(f.get(), obj, obj.size() > 6, in); break;
    }
  }
}

// Overflow-safe element count of a shape; -1 when it exceeds `limit`.
int64_t bounded_numel(const sm::Shape& s, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1;
    if (d != 0 && n > limit / d) return -1;
    n *= d;
  }
  return n;
}

void check_accepted(const sm::H5Dataset& d, fuzz::Bytes& in) {
  const sm::DatasetInfo& info = d.info();
  if (info.num_classes < 2) fuzz::fail("accepted num_classes < 2");
  if (info.layout != "NTCHW" && info.layout != "NCHW") fuzz::fail("accepted layout " + info.layout);
  if (info.sample_shape.size() != (info.is_events() ? 4u : 3u)) fuzz::fail("accepted sample rank");
  if (info.train_size < 0 || info.test_size < 0) fuzz::fail("negative split size");
  if (info.is_events() && info.T != info.sample_shape[0]) fuzz::fail("accepted T != sample steps");
  // Reading is what training does next; only for samples a test can afford to allocate.
  const int64_t row = bounded_numel(info.sample_shape, 1 << 16);
  if (row < 0) return;
  for (sm::Split s : {sm::Split::Train, sm::Split::Test}) {
    const int64_t size = d.size(s);
    if (size == 0) continue;
    std::vector<int64_t> idx;
    const int n = int(in.u8() % 4);
    for (int i = 0; i < n; ++i) idx.push_back(int64_t(in.u32() % uint64_t(size)));
    sm::Tensor x, y;
    d.read(s, idx, x, y);
    if (x.numel() != int64_t(idx.size()) * row || y.numel() != int64_t(idx.size()))
      fuzz::fail("read returned the wrong number of elements");
    for (int64_t i = 0; i < y.numel(); ++i)
      if (y.data<int64_t>()[i] < 0 || y.data<int64_t>()[i] >= info.num_classes)
        fuzz::fail("read returned a label outside [0, num_classes)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path("fuzz_dataset.h5");
  static const bool quiet = (fuzz::quiet_logs(), H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr), true);
  (void)quiet;
  fuzz::Bytes in(data, size);
  if (!write_base(path, in)) return 0;
  perturb(path, in);
  fuzz::expect_ok_or_input_error([&] {
    const sm::H5Dataset d = sm::H5Dataset::open(path);
    check_accepted(d, in);
  });
  return 0;
}
