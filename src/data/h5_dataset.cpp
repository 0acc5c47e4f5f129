// h5_dataset.cpp — schema validation (serial and collective open), gathered hyperslab reads
// (independent on a sec2 handle, collective on an MPI-IO handle), chunked writes.
#include "spikemesh/data/h5_dataset.h"

#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/blocking_guard.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/io_retry.h"
#include "spikemesh/data/event_frames_reader.h"
#include "spikemesh/io/crc32.h"
#include "spikemesh/io/hdf5_thread.h"

namespace sm {

const char* split_name(Split s) { return s == Split::Train ? "train" : "test"; }

namespace {
bool is_integer(DType d) { return d == DType::U8 || d == DType::I32 || d == DType::I64; }

// The type x is read as: u16 and f16 (imported event datasets) are converted to f32 by HDF5
// while reading; `name_out` is the file's element type ("u8", "u16", "f16", "f32").
DType x_read_type(const H5File& f, const std::string& name, std::string& name_out) {
  H5Handle ds(SM_H5_CHECK(H5Dopen2(f.id(), name.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle type(SM_H5_CHECK(H5Dget_type(ds.get())), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  const size_t size = H5Tget_size(type.get());
  if (size == 2 && (cls == H5T_FLOAT || (cls == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_NONE))) {
    name_out = cls == H5T_FLOAT ? "f16" : "u16";
    return DType::F32;
  }
  const DType d = f.dataset_dtype(name);
  name_out = dtype_name(d);
  return d;
}

}  // namespace

H5Dataset H5Dataset::open(const std::string& path, hid_t fapl) {
  H5Dataset d;
  d.file_ = H5File::open(path, false, fapl);
  DatasetInfo& in = d.info_;
  in.path = path;
  for (const char* need : {"/train/x", "/train/y", "/test/x", "/test/y"})
    if (!d.file_.has_dataset(need))
      SM_INPUT_ERROR(path << ": not a spikemesh dataset: missing " << need
                          << " (expected /train/x, /train/y, /test/x, /test/y)");
  if (!d.file_.has_attr("num_classes")) SM_INPUT_ERROR(path << ": missing root attribute num_classes");
  in.num_classes = static_cast<int>(d.file_.attr_int("num_classes"));
  if (in.num_classes < 2) SM_INPUT_ERROR(path << ": num_classes = " << in.num_classes << " (need >= 2)");
  in.layout = d.file_.has_attr("layout") ? d.file_.attr_string("layout") : "";
  if (in.layout != "NTCHW" && in.layout != "NCHW")
    SM_INPUT_ERROR(path << ": attribute layout = '" << in.layout << "' (expected NTCHW or NCHW)");
  in.T = d.file_.has_attr("T") ? static_cast<int>(d.file_.attr_int("T")) : 0;
  in.encoding = d.file_.has_attr("encoding") ? d.file_.attr_string("encoding") : "";
  in.source = d.file_.has_attr("source") ? d.file_.attr_string("source") : "";
  in.x_scale = d.file_.has_attr("x_scale") ? d.file_.attr_double("x_scale") : 1.0;
  // an event importer's --size resize (its `resize` attribute; "none" for the sensor's frames)
  in.resized = d.file_.has_attr("resize") && d.file_.attr_string("resize") != "none";
  if (!std::isfinite(in.x_scale) || in.x_scale == 0)
    SM_INPUT_ERROR(path << ": attribute x_scale = " << in.x_scale << " (must be finite and non-zero)");
  size_t rank = in.layout == "NTCHW" ? 5 : 4;
  for (Split s : {Split::Train, Split::Test}) {
    std::string g = std::string("/") + split_name(s);
    Shape xs = d.file_.dataset_shape(g + "/x"), ys = d.file_.dataset_shape(g + "/y");
    std::string x_name;
    DType xt = x_read_type(d.file_, g + "/x", x_name), yt = d.file_.dataset_dtype(g + "/y");
    if (xs.size() != rank)
      SM_INPUT_ERROR(path << ": " << g << "/x has shape " << shape_str(xs) << " but layout " << in.layout
                          << " needs " << rank << " dims");
    if (xt != DType::U8 && xt != DType::F32)
      SM_INPUT_ERROR(path << ": " << g << "/x has dtype " << dtype_name(xt) << " (expected u8, u16, f16 or f32)");
    if (ys.size() != 1 || !is_integer(yt))
      SM_INPUT_ERROR(path << ": " << g << "/y must be a 1-d integer vector, got " << dtype_name(yt) << " "
                          << shape_str(ys));
    if (ys[0] != xs[0])
      SM_INPUT_ERROR(path << ": " << g << "/x has " << xs[0] << " samples but " << g << "/y has " << ys[0]);
    Shape sample(xs.begin() + 1, xs.end());
    if (s == Split::Train) {
      in.sample_shape = sample;
      in.stored = xt;
      in.stored_name = x_name;
      in.train_size = xs[0];
    } else {
      if (sample != in.sample_shape || xt != in.stored)
        SM_INPUT_ERROR(path << ": /test/x samples " << shape_str(sample) << " differ from /train/x samples "
                            << shape_str(in.sample_shape));
      in.test_size = xs[0];
    }
    Tensor y = d.file_.read(g + "/y", DType::I64);
    const int64_t* py = y.data<int64_t>();
    for (int64_t i = 0; i < y.numel(); ++i)
      if (py[i] < 0 || py[i] >= in.num_classes)
        SM_INPUT_ERROR(path << ": " << g << "/y[" << i << "] = " << py[i] << " is out of range [0, "
                            << in.num_classes << ")");
    auto labels = std::make_shared<const std::vector<int64_t>>(py, py + y.numel());
    (s == Split::Train ? d.train_labels_ : d.test_labels_) = labels;
  }
  if (in.is_events() && in.T == 0) in.T = static_cast<int>(in.sample_shape[0]);
  if (in.is_events() && in.T != in.sample_shape[0])
    SM_INPUT_ERROR(path << ": attribute T = " << in.T << " but samples have " << in.sample_shape[0] << " steps");
  return d;
}

namespace {
// What a rank saw of the file: compared across ranks before any collective read. Everything
// the collective reads depend on (schema, sizes, dtypes, sample shape) and a hash of every
// label; the path is shown, not compared (node-local copies may live at different paths).
std::string dataset_fingerprint(const DatasetInfo& in, const std::vector<int64_t>& train,
                                const std::vector<int64_t>& test) {
  std::ostringstream os;
  os << in.train_size << " train + " << in.test_size << " test samples of " << shape_str(in.sample_shape) << " "
     << dtype_name(in.stored) << ", layout " << in.layout << ", " << in.num_classes << " classes, T " << in.T
     << ", x_scale " << in.x_scale << ", labels hash " << std::hex
     << text_hash(std::string(reinterpret_cast<const char*>(train.data()), train.size() * sizeof(int64_t)) + "|" +
                  std::string(reinterpret_cast<const char*>(test.data()), test.size() * sizeof(int64_t)));
  return os.str();
}

// `indices` sorted, without duplicates, each checked to be a row of a split of `limit` rows.
std::vector<int64_t> sorted_rows(const std::vector<int64_t>& indices, int64_t limit) {
  for (int64_t i : indices) SM_CHECK(i >= 0 && i < limit, "sample " << i << " of " << limit);
  std::vector<int64_t> sorted(indices);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  return sorted;
}

std::string absolute_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}
}  // namespace

void H5Dataset::make_frames_from_events(const FramesOption& frames) {
  if (!frames.on) return;
  auto reader = std::make_shared<const EventFramesReader>(file_, info_, frames);
  info_.T = static_cast<int>(frames.spec.T);
  info_.sample_shape = reader->sample_shape();
  info_.frames = frames.text;
  frames_ = std::move(reader);
}

H5Dataset H5Dataset::open(const std::string& path, Comm* group, bool collective_handle, const FramesOption* frames) {
  if (!group) {
    H5Dataset d = open(path);
    if (frames) d.make_frames_from_events(*frames);
    return d;
  }
  Comm& comm = *group;
  const int rank = comm.rank();
  H5Dataset d;
  // 1. Every rank validates the file it sees; the lowest failing rank's message is everyone's.
  agree_on_error(&comm, [&] {
    try {
      d = open(path);
      if (frames) d.make_frames_from_events(*frames);
    } catch (const Error& e) {
      if (rank == 0 || e.kind() != ErrorKind::Input) throw;
      SM_INPUT_ERROR(e.what() << " (" << where_am_i() << "; is the path on a shared file system?)");
    }
  });
  // 2. The ranks compare what they saw (collective over the group): no collective read ever
  //    starts on files that differ.
  // One gather of "fingerprint\0absolute path" per rank.
  std::vector<std::string> seen = all_gather_strings(
      comm, dataset_fingerprint(d.info_, *d.train_labels_, *d.test_labels_) + '\0' + absolute_path(path));
  std::vector<std::string> where(seen.size());
  for (size_t q = 0; q < seen.size(); ++q) {
    const size_t cut = seen[q].find('\0');
    where[q] = seen[q].substr(cut + 1);
    seen[q].resize(cut);
  }
  for (int r = 1; r < comm.size(); ++r) {
    if (seen[r] == seen[0]) continue;
    std::ostringstream os;
    os << "--data " << path << ": the ranks read different datasets (a stale node-local copy, or a relative path "
       << "in another working directory?); every rank must read the same file:";
    int shown = 0;
    for (int q = 0; q < comm.size() && shown < 4; ++q)
      if (q == 0 || seen[q] != seen[0] || where[q] != where[0])
        os << (shown++ ? ";" : "") << " rank " << q << " (world rank " << comm.world_ranks()[q] << ") reads "
           << where[q] << ": " << seen[q];
    SM_INPUT_ERROR(os.str());  // the same text on every rank: every rank throws it
  }
  // 3. The MPI-IO handle for collective reads (collective H5Fopen, guarded).
  if (collective_handle) {
    auto h = std::make_shared<CollectiveHandle>();
    guarded_collective(comm, "opening " + path + " for collective MPI-IO reads", [&] {
      agree_on_error(&comm, [&] {
        H5Handle fapl(SM_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
        SM_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm.mpi_comm(), MPI_INFO_NULL));
        h->file = H5File::open(path, false, fapl.get());
      });
    });
    h->group = &comm;
    d.mpio_ = std::move(h);
  }
  return d;
}

H5Dataset::CollectiveHandle::~CollectiveHandle() {
  if (!group || file.file_id() < 0) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding: this rank may be failing alone (the job is about to be aborted) while the
    // others compute; a collective close would wait for them. The handle is left to exit.
    file.release();
    return;
  }
  try {  // collective over the group: every rank drops its last copy at the same point
    guarded_collective(*group, "closing a dataset's MPI-IO handle",
                       [&] { hdf5_call([&] { file.close(); }, Hdf5Task::Collective); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spikemesh: warning: closing a dataset: %s\n", e.what());
  }
}

void H5Dataset::read(Split s, const std::vector<int64_t>& indices, Tensor& x, Tensor& y) const {
  const std::string what = "reading " + std::to_string(indices.size()) + " samples of /" + split_name(s) + "/x of " +
                           info_.path;
  std::vector<int64_t> sorted;
  SampleEvents events;  // --frames: the samples' events, integrated below (outside the HDF5 thread)
  if (frames_) sorted = sorted_rows(indices, size(s));
  try {
    read_retrying(what, s, indices, sorted, events, x, y);
    if (frames_) frames_->frames(events, s, sorted, indices, x);
  } catch (const Error& e) {
    // This rank's own samples (a read that gave up after retries, events off the sensor, a
    // sample that cannot be integrated): the other ranks may be reading fine. The trainer
    // agrees on it; evaluation and `data bench` end the job (MPI_Abort) naming this rank.
    if (e.kind() != ErrorKind::Input) throw;
    throw Error(ErrorKind::RankInput, std::string(e.what()) + " (" + where_am_i() + ")");
  }
  if (frames_) y = labels_of(s, indices);
}

// read()'s HDF5 part under core/io_retry.h's policy: /x rows, or with --frames the samples' events.
void H5Dataset::read_retrying(const std::string& what, Split s, const std::vector<int64_t>& indices,
                              const std::vector<int64_t>& sorted, SampleEvents& events, Tensor& x, Tensor& y) const {
  with_io_retries(
      what,
      [&] {
        hdf5_call([&] {
          if (take_io_fault(IoSite::DatasetRead))
            throw Error(ErrorKind::Library, info_.path + ": H5Dread failed: " + std::strerror(EIO) + " (injected for a test)");
          if (frames_)
            events = frames_->read_events(file_, s, sorted);
          else
            read_from(file_, false, s, indices, x, y);
        });
      },
      [](const Error& e) { return e.kind() == ErrorKind::Library; },
      [&] {  // a stale handle (ESTALE after a server failover) needs a fresh open
        hdf5_call([&] {
          file_ = H5File();  // closed first: HDF5 would hand back the same open file (and its stale descriptor)
          try {
            file_ = H5File::open(info_.path);  // the default (sec2) driver
          } catch (const Error&) {  // still failing: the next attempt says so
          }
        });
      });
}

Tensor H5Dataset::labels_of(Split s, const std::vector<int64_t>& indices) const {
  const std::vector<int64_t>& all = labels(s);
  Tensor y = Tensor::empty({static_cast<int64_t>(indices.size())}, DType::I64);
  for (size_t k = 0; k < indices.size(); ++k) y.data<int64_t>()[k] = all[static_cast<size_t>(indices[k])];
  return y;
}

void H5Dataset::read_collective(Split s, const std::vector<int64_t>& indices, Tensor& x, Tensor& y) const {
  if (!has_collective_handle() || frames_) {  // frames made on the fly: independent reads of the events
    read(s, indices, x, y);
    return;
  }
  guarded_collective(*mpio_->group, std::string("a collective read of /") + split_name(s) + "/x of the dataset", [&] {
    hdf5_call([&] { read_from(mpio_->file, true, s, indices, x, y); }, Hdf5Task::Collective);
  });
}

void H5Dataset::read_from(const H5File& f, bool collective, Split s, const std::vector<int64_t>& indices, Tensor& x,
                          Tensor& y) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t limit = size(s);
  const std::vector<int64_t> sorted = sorted_rows(indices, limit);
  const int64_t row = shape_numel(info_.sample_shape);
  Shape full = {limit};
  full.insert(full.end(), info_.sample_shape.begin(), info_.sample_shape.end());

  std::string g = std::string("/") + split_name(s);
  H5Handle dx(SM_H5_CHECK(H5Dopen2(f.id(), (g + "/x").c_str(), H5P_DEFAULT)), H5Dclose);
  const hsize_t mdim = static_cast<hsize_t>(sorted.size() * row);
  H5Handle dxpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  if (collective) SM_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  Tensor raw = Tensor::empty({std::max<int64_t>(static_cast<int64_t>(mdim), 1)}, info_.stored);
  // One read per run of consecutive rows (HDF5's fast path); a collective read makes as many
  // calls on every rank as the rank with the most runs (collective over the open() group).
  int64_t calls = h5_row_runs(sorted);
  if (collective) {
    std::vector<double> most = {static_cast<double>(calls)};
    all_reduce_doubles(*mpio_->group, most, ReduceOp::Max);
    calls = static_cast<int64_t>(most[0]);
  }
  h5_transfer_rows(dx.get(), h5_native_type(info_.stored), sorted, full, dxpl.get(), raw.raw(), false, calls);

  Shape xs = {n};
  xs.insert(xs.end(), info_.sample_shape.begin(), info_.sample_shape.end());
  x = Tensor::empty(xs, DType::F32);
  y = labels_of(s, indices);
  const float scale = static_cast<float>(info_.x_scale);
  int64_t first_bad = n;  // f32 samples holding NaN/Inf: the lowest such position in `indices`
#pragma omp parallel for schedule(static) reduction(min : first_bad)
  for (int64_t k = 0; k < n; ++k) {
    int64_t pos = std::lower_bound(sorted.begin(), sorted.end(), indices[k]) - sorted.begin();
    float* dst = x.data<float>() + k * row;
    if (info_.stored == DType::U8) {
      const uint8_t* src = raw.data<uint8_t>() + pos * row;
      for (int64_t f = 0; f < row; ++f) dst[f] = src[f] * scale;
    } else {
      const float* src = raw.data<float>() + pos * row;
      bool finite = true;
      for (int64_t f = 0; f < row; ++f) {
        dst[f] = src[f] * scale;
        finite &= std::isfinite(dst[f]);
      }
      if (!finite) first_bad = std::min(first_bad, k);
    }
  }
  if (first_bad < n)  // a damaged or unnormalised file: never train on NaN/Inf inputs (found by this rank alone)
    SM_RANK_INPUT_ERROR(info_.path << ": /" << split_name(s) << "/x[" << indices[static_cast<size_t>(first_bad)]
                              << "] holds NaN or Inf (after x_scale " << info_.x_scale << ")");
}

namespace {
herr_t collect_attr(hid_t loc, const char* name, const H5A_info_t*, void* data) {
  auto* out = static_cast<std::vector<std::pair<std::string, std::string>>*>(data);
  H5Handle a(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) return 0;
  H5Handle type(H5Aget_type(a.get()), H5Tclose), space(H5Aget_space(a.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::ostringstream os;
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls == H5T_STRING) {
    if (H5Tis_variable_str(type.get()) > 0) {
      char* v = nullptr;
      H5Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(mt.get(), H5T_VARIABLE);
      H5Tset_cset(mt.get(), H5Tget_cset(type.get()));
      if (H5Aread(a.get(), mt.get(), &v) >= 0 && v) {
        os << v;
        H5free_memory(v);
      }
    } else {
      std::string v(H5Tget_size(type.get()), '\0');
      if (H5Aread(a.get(), type.get(), &v[0]) >= 0) os << v.c_str();
    }
  } else if (cls == H5T_INTEGER && n > 0) {
    std::vector<long long> v(static_cast<size_t>(n));
    if (H5Aread(a.get(), H5T_NATIVE_LLONG, v.data()) >= 0)
      for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  } else if (cls == H5T_FLOAT && n > 0) {
    std::vector<double> v(static_cast<size_t>(n));
    if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, v.data()) >= 0)
      for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  } else {
    os << "(type class " << static_cast<int>(cls) << ")";
  }
  out->emplace_back(name, os.str());
  return 0;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> dataset_attributes(const std::string& path) {
  H5File f = H5File::open(path);
  std::vector<std::pair<std::string, std::string>> out;
  hsize_t idx = 0;
  SM_H5_CHECK(H5Aiterate2(f.id(), H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &out));
  return out;
}

uint32_t dataset_rows_crc32(const H5File& f, const std::string& name, int64_t begin, int64_t end) {
  H5Handle ds(SM_H5_CHECK(H5Dopen2(f.id(), name.c_str(), H5P_DEFAULT)), H5Dclose);
  const Shape full = f.dataset_shape(name);
  H5Handle type(SM_H5_CHECK(H5Dget_type(ds.get())), H5Tclose);
  const size_t row_bytes = H5Tget_size(type.get()) * static_cast<size_t>(shape_numel(full) / std::max<int64_t>(full[0], 1));
  const int64_t step = std::max<int64_t>(1, static_cast<int64_t>((size_t(64) << 20) / std::max<size_t>(row_bytes, 1)));
  uint32_t crc = 0;
  std::vector<uint8_t> buf;
  for (int64_t r = begin; r < end; r += step) {
    std::vector<int64_t> rows;
    for (int64_t k = r; k < std::min(end, r + step); ++k) rows.push_back(k);
    buf.resize(rows.size() * row_bytes);
    h5_transfer_rows(ds.get(), type.get(), rows, full, H5P_DEFAULT, buf.data(), false, 1);
    crc = crc32_bytes(buf.data(), buf.size(), crc);
  }
  return crc;
}

std::vector<std::string> verify_dataset_crc32(const std::string& path, bool& all_ok) {
  H5File f = H5File::open(path);
  std::vector<std::string> out;
  all_ok = true;
  for (const char* name : {"/train/x", "/train/y", "/test/x", "/test/y"}) {
    if (!f.has_dataset(name)) continue;
    H5Handle ds(SM_H5_CHECK(H5Dopen2(f.id(), name, H5P_DEFAULT)), H5Dclose);
    if (H5Aexists(ds.get(), "crc32") <= 0) {
      out.push_back(std::string(name) + ": no crc32 attribute");
      continue;
    }
    int64_t expect = 0;
    {
      H5Handle a(SM_H5_CHECK(H5Aopen(ds.get(), "crc32", H5P_DEFAULT)), H5Aclose);
      SM_H5_CHECK(H5Aread(a.get(), H5T_NATIVE_INT64, &expect));
    }
    const uint32_t crc = dataset_rows_crc32(f, name, 0, f.dataset_shape(name)[0]);
    char line[200];
    const bool ok = static_cast<int64_t>(crc) == expect;
    all_ok = all_ok && ok;
    if (ok) std::snprintf(line, sizeof line, "%s: crc32 %08x ok", name, crc);
    else std::snprintf(line, sizeof line, "%s: crc32 expected %08llx, the data give %08x: damaged", name,
                       static_cast<unsigned long long>(expect), crc);
    out.push_back(line);
  }
  return out;
}

H5DatasetWriter::H5DatasetWriter(const std::string& path, const DatasetInfo& info)
    : path_(path), tmp_(path + ".tmp"), info_(info) {
  file_ = H5File::create(tmp_);
  file_.set_attr("num_classes", static_cast<int64_t>(info.num_classes));
  file_.set_attr("T", static_cast<int64_t>(info.T));
  file_.set_attr("layout", info.layout);
  file_.set_attr("encoding", info.encoding);
  file_.set_attr("source", info.source);
  file_.set_attr("x_scale", info.x_scale);
  file_.set_attr("format_version", static_cast<int64_t>(1));
}

H5DatasetWriter::~H5DatasetWriter() {
  if (!committed_) {
    file_ = H5File();
    std::remove(tmp_.c_str());
  }
}

void H5DatasetWriter::write(Split s, int64_t offset, const Tensor& x, const Tensor& y) {
  write_group(split_name(s), s == Split::Train ? info_.train_size : info_.test_size, offset, x, y);
}

void H5DatasetWriter::write_group(const std::string& group, int64_t total, int64_t offset, const Tensor& x,
                                  const Tensor& y) {
  const std::string g = "/" + group;
  Shape full = {total};
  full.insert(full.end(), info_.sample_shape.begin(), info_.sample_shape.end());
  SM_CHECK(x.dtype() == info_.stored && y.dtype() == DType::I64, "writer dtypes");
  SM_CHECK(offset + x.dim(0) <= total && x.dim(0) == y.dim(0), "writer range");
  file_.require_group(g);
  auto ensure = [&](const std::string& name, DType dt, const Shape& shape) {
    if (file_.has_dataset(name)) return;
    std::vector<hsize_t> dims(shape.begin(), shape.end()), chunk(dims);
    chunk[0] = 1;  // one sample per chunk
    if (shape.size() == 1) chunk[0] = std::min<hsize_t>(dims[0] ? dims[0] : 1, 65536);
    H5Handle space(SM_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
    H5Handle dcpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
    if (dims[0] > 0) SM_H5_CHECK(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()));
    if (dims[0] > 0 && deflate_ > 0 && shape.size() > 1) SM_H5_CHECK(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(deflate_)));
    H5Handle ds(SM_H5_CHECK(H5Dcreate2(file_.id(), name.c_str(), h5_native_type(dt), space.get(), H5P_DEFAULT,
                                       dcpl.get(), H5P_DEFAULT)),
                H5Dclose);
  };
  ensure(g + "/x", info_.stored, full);
  ensure(g + "/y", DType::I64, {total});
  auto put = [&](const std::string& name, const Tensor& t) {
    H5Handle ds(SM_H5_CHECK(H5Dopen2(file_.id(), name.c_str(), H5P_DEFAULT)), H5Dclose);
    H5Handle fs(SM_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
    std::vector<hsize_t> start(t.ndim(), 0), count(t.shape().begin(), t.shape().end());
    start[0] = static_cast<hsize_t>(offset);
    if (count[0] == 0) return;
    SM_H5_CHECK(H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    H5Handle ms(SM_H5_CHECK(H5Screate_simple(t.ndim(), count.data(), nullptr)), H5Sclose);
    SM_H5_CHECK(H5Dwrite(ds.get(), h5_native_type(t.dtype()), ms.get(), fs.get(), H5P_DEFAULT, t.raw()));
  };
  put(g + "/x", x);
  put(g + "/y", y);
}

void H5DatasetWriter::commit() {
  file_.flush();
  file_ = H5File();  // close
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    SM_INPUT_ERROR(path_ << ": cannot move the imported dataset into place");
  committed_ = true;
}

}  // namespace sm
