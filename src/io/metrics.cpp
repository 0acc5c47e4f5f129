// metrics.cpp — appendable HDF5 columns for per-step and per-evaluation metrics.
#include "spikemesh/io/metrics.h"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/io/h5file.h"

namespace sm {

namespace {
// A column's chunk cache: the chunk being appended to and the one before (rows are appended and
// never read back while training). HDF5's default (1 MiB per dataset) kept every chunk a run had
// written — about 8 bytes per column and step, 30 columns: RSS grew with the run's length.
hid_t small_chunk_cache(hsize_t width) {
  hid_t dapl = SM_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS));
  const size_t chunk_bytes = (width ? 64 * width : 1024) * sizeof(double);
  SM_H5_CHECK(H5Pset_chunk_cache(dapl, 11, 2 * chunk_bytes, 1.0));
  return dapl;
}

// One dataset of shape [rows] or [rows, width] (f64), unlimited rows.
class Column {
 public:
  Column(hid_t file, const std::string& name, hsize_t width) : name_(name), width_(width) {
    const hid_t dapl = small_chunk_cache(width);
    open_or_create(file, dapl);
    H5Pclose(dapl);
  }
  void open_or_create(hid_t file, hid_t dapl) {
    const std::string& name = name_;
    const hsize_t width = width_;
    if (H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0) {
      ds_ = SM_H5_CHECK(H5Dopen2(file, name.c_str(), dapl));
      hid_t sp = SM_H5_CHECK(H5Dget_space(ds_));
      hsize_t dims[2] = {0, 0};
      H5Sget_simple_extent_dims(sp, dims, nullptr);
      H5Sclose(sp);
      rows_ = dims[0];
      return;
    }
    int rank = width ? 2 : 1;
    hsize_t dims[2] = {0, width}, maxd[2] = {H5S_UNLIMITED, width}, chunk[2] = {width ? 64u : 1024u, width};
    hid_t sp = SM_H5_CHECK(H5Screate_simple(rank, dims, maxd));
    hid_t dcpl = SM_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE));
    SM_H5_CHECK(H5Pset_chunk(dcpl, rank, chunk));
    hid_t lcpl = SM_H5_CHECK(H5Pcreate(H5P_LINK_CREATE));
    SM_H5_CHECK(H5Pset_create_intermediate_group(lcpl, 1));
    ds_ = SM_H5_CHECK(H5Dcreate2(file, name.c_str(), H5T_NATIVE_DOUBLE, sp, lcpl, dcpl, dapl));
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(sp);
  }
  ~Column() {
    if (ds_ >= 0) H5Dclose(ds_);
  }
  void push(const std::vector<double>& row) {
    SM_CHECK(row.size() == std::max<hsize_t>(1, width_), "metrics column " << name_ << " width");
    pending_.insert(pending_.end(), row.begin(), row.end());
  }
  void truncate(hsize_t rows) {
    if (rows >= rows_) return;
    hsize_t dims[2] = {rows, width_};
    SM_H5_CHECK(H5Dset_extent(ds_, dims));
    rows_ = rows;
  }
  hsize_t rows() const { return rows_; }
  hsize_t rows_with_pending() const { return rows_ + pending_.size() / std::max<hsize_t>(1, width_); }
  void read_all(std::vector<double>& out) const {
    out.resize(rows_ * std::max<hsize_t>(1, width_));
    if (rows_) SM_H5_CHECK(H5Dread(ds_, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()));
  }
  void flush() {
    if (pending_.empty()) return;
    hsize_t w = std::max<hsize_t>(1, width_), n = pending_.size() / w;
    hsize_t dims[2] = {rows_ + n, width_};
    SM_H5_CHECK(H5Dset_extent(ds_, dims));
    hid_t fs = SM_H5_CHECK(H5Dget_space(ds_));
    hsize_t start[2] = {rows_, 0}, count[2] = {n, width_};
    SM_H5_CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr));
    hid_t ms = SM_H5_CHECK(H5Screate_simple(width_ ? 2 : 1, count, nullptr));
    SM_H5_CHECK(H5Dwrite(ds_, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, pending_.data()));
    H5Sclose(ms);
    H5Sclose(fs);
    rows_ += n;
    pending_.clear();
  }
  hid_t id() const { return ds_; }

 private:
  std::string name_;
  hsize_t width_;
  hid_t ds_ = -1;
  hsize_t rows_ = 0;
  std::vector<double> pending_;
};

std::string join_names(const std::vector<std::string>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}
}  // namespace

struct MetricsWriter::Impl {
  H5File file;
  std::map<std::string, std::unique_ptr<Column>> cols;
  int flush_every = 20;
  int since_flush = 0;
  Column& col(const std::string& name, hsize_t width) {
    auto it = cols.find(name);
    if (it != cols.end()) return *it->second;
    auto c = std::make_unique<Column>(file.file_id(), name, width);
    Column& ref = *c;
    cols[name] = std::move(c);
    return ref;
  }
  void names_attr(const std::string& ds, const std::vector<std::string>& names) {
    file.set_attr_on(ds, "layer_names", join_names(names));
  }
};

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step, int flush_every)
    : impl_(std::make_unique<Impl>()), path_(path) {
  impl_->flush_every = flush_every;
  bool resume = resume_step >= 0;
  if (resume) {
    try {
      impl_->file = H5File::open(path, true);
    } catch (const Error&) {
      resume = false;  // no previous metrics: start a fresh file
    }
  }
  if (!resume) {
    impl_->file = H5File::create(path);
    impl_->file.set_attr("format_version", int64_t(1));
    return;
  }
  // Drop rows logged after the checkpoint we resume from.
  for (const char* grp : {"/step", "/eval"}) {
    if (!impl_->file.has_group(grp)) continue;
    H5Group g = impl_->file.open_group(grp);
    if (!g.has_dataset("step")) continue;
    Column& steps = impl_->col(std::string(grp) + "/step", 0);
    std::vector<double> s;
    steps.read_all(s);
    hsize_t keep = 0;
    while (keep < s.size() && s[keep] <= resume_step) ++keep;
    for (const std::string& name : g.list_datasets()) {
      Shape sh = g.dataset_shape(name);
      impl_->col(std::string(grp) + "/" + name, sh.size() == 2 ? sh[1] : 0).truncate(keep);
    }
  }
}

MetricsWriter::~MetricsWriter() {
  try {
    flush();
  } catch (...) {
  }
}

void MetricsWriter::log_step(const std::map<std::string, double>& scalars, const std::vector<double>& fr,
                             const std::vector<std::string>& names) {
  // A column that appears after earlier rows (a resumed run of an older version, a scalar logged
  // from some step on) starts with NaN rows, so that row i of every column is one step.
  auto step_col = impl_->cols.find("/step/step");
  const hsize_t before = step_col != impl_->cols.end() ? step_col->second->rows_with_pending() : 0;
  for (const auto& kv : scalars) {
    const std::string name = "/step/" + kv.first;
    const bool fresh = impl_->cols.find(name) == impl_->cols.end() && !impl_->file.has_dataset(name);
    Column& c = impl_->col(name, 0);
    if (fresh && name != "/step/step")
      for (hsize_t r = c.rows_with_pending(); r < before; ++r) c.push({std::nan("")});
    c.push({kv.second});
  }
  if (!fr.empty()) {
    bool fresh = impl_->cols.find("/step/firing_rate") == impl_->cols.end() && !impl_->file.has_dataset("/step/firing_rate");
    impl_->col("/step/firing_rate", fr.size()).push(fr);
    if (fresh) {
      impl_->col("/step/firing_rate", fr.size()).flush();
      impl_->names_attr("/step/firing_rate", names);
    }
  }
  if (++impl_->since_flush >= impl_->flush_every) flush();
}

void MetricsWriter::log_eval(int64_t step, int64_t epoch, double loss, double acc, const std::vector<double>& fr,
                             const std::vector<std::string>& names) {
  impl_->col("/eval/step", 0).push({static_cast<double>(step)});
  impl_->col("/eval/epoch", 0).push({static_cast<double>(epoch)});
  impl_->col("/eval/loss", 0).push({loss});
  impl_->col("/eval/accuracy", 0).push({acc});
  if (!fr.empty()) {
    impl_->col("/eval/firing_rate", fr.size()).push(fr);
    impl_->col("/eval/firing_rate", fr.size()).flush();
    impl_->names_attr("/eval/firing_rate", names);
  }
  flush();
}

void MetricsWriter::flush() {
  for (auto& kv : impl_->cols) kv.second->flush();
  if (impl_->file.file_id() >= 0) impl_->file.flush();
  impl_->since_flush = 0;
}

}  // namespace sm
