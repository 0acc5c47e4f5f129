// event_h5_writer.cpp — dataset creation (chunks, deflate, unlimited first dim), collective
// hyperslab writes of each rank's rows, extents, the f16 file type.
#include "spikemesh/data/event_h5_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/tensor.h"

namespace sm {

const char* stored_type_name(StoredType t) {
  switch (t) {
    case StoredType::U8: return "u8";
    case StoredType::U16: return "u16";
    case StoredType::F16: return "f16";
    case StoredType::F32: return "f32";
  }
  return "?";
}

StoredType stored_type_from_name(const std::string& s) {
  if (s == "u8") return StoredType::U8;
  if (s == "u16") return StoredType::U16;
  if (s == "f16") return StoredType::F16;
  if (s == "f32") return StoredType::F32;
  SM_INPUT_ERROR("--dtype " << s << ": expected u8, u16, f16 or f32");
}

size_t stored_type_size(StoredType t) { return t == StoredType::U8 ? 1 : t == StoredType::F32 ? 4 : 2; }

int64_t frames_to_stored(const float* v, int64_t n, StoredType t, std::vector<uint8_t>& out) {
  out.resize(static_cast<size_t>(n) * stored_type_size(t));
  int64_t sat = 0;
  if (t == StoredType::F32) {
    std::memcpy(out.data(), v, out.size());
  } else if (t == StoredType::F16) {
    Tensor f = Tensor::empty({n}, DType::F32);
    float* pf = f.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      sat += v[i] > 65504.0f;
      pf[i] = std::min(v[i], 65504.0f);
    }
    Tensor h = f.to_dtype(DType::F16);
    std::memcpy(out.data(), h.raw(), out.size());
  } else {
    const float hi = t == StoredType::U8 ? 255.0f : 65535.0f;
    for (int64_t i = 0; i < n; ++i) {
      float r = std::nearbyint(v[i]);
      if (r > hi) {
        ++sat;
        r = hi;
      }
      if (r < 0) r = 0;
      if (t == StoredType::U8) out[static_cast<size_t>(i)] = static_cast<uint8_t>(r);
      else {
        const uint16_t u = static_cast<uint16_t>(r);
        std::memcpy(out.data() + 2 * i, &u, 2);
      }
    }
  }
  return sat;
}

namespace {
// IEEE binary16, little-endian (what numpy / h5py call float16). Caller closes.
hid_t f16_type() {
  hid_t t = SM_H5_CHECK(H5Tcopy(H5T_IEEE_F32LE));
  SM_H5_CHECK(H5Tset_fields(t, 15, 10, 5, 0, 10));
  SM_H5_CHECK(H5Tset_size(t, 2));
  SM_H5_CHECK(H5Tset_ebias(t, 15));
  return t;
}

H5Handle file_type(StoredType t) {
  switch (t) {
    case StoredType::U8: return H5Handle(SM_H5_CHECK(H5Tcopy(H5T_NATIVE_UINT8)), H5Tclose);
    case StoredType::U16: return H5Handle(SM_H5_CHECK(H5Tcopy(H5T_NATIVE_UINT16)), H5Tclose);
    case StoredType::F16: return H5Handle(f16_type(), H5Tclose);
    case StoredType::F32: return H5Handle(SM_H5_CHECK(H5Tcopy(H5T_NATIVE_FLOAT)), H5Tclose);
  }
  return H5Handle();
}

H5Handle file_access(Comm* group) {
  H5Handle fapl(SM_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  if (group) SM_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), group->mpi_comm(), MPI_INFO_NULL));
  return fapl;
}

// Creates `name` of `type`, dims `dims` (first unlimited), chunk `chunk`, deflate `level`.
void create_dataset(const H5File& f, const std::string& name, hid_t type, std::vector<hsize_t> dims,
                    std::vector<hsize_t> chunk, int level, bool early = false) {
  std::vector<hsize_t> maxdims(dims);
  maxdims[0] = H5S_UNLIMITED;
  H5Handle space(SM_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data())), H5Sclose);
  H5Handle dcpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  chunk[0] = std::max<hsize_t>(chunk[0], 1);
  SM_H5_CHECK(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()));
  SM_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  if (level > 0) SM_H5_CHECK(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(level)));
  // The small per-row datasets (y, n_frames, offsets: not re-read by a resume) get every chunk
  // at creation, so their chunk index never changes and a killed round cannot damage finished
  // rows. Not x: allocating it whole would extend the file before the room check of each round
  // (x's rows are re-read against their crc32 by a resume instead).
  if (early && level == 0 && dims[0] > 0) SM_H5_CHECK(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  H5Handle ds(SM_H5_CHECK(H5Dcreate2(f.id(), name.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT)),
              H5Dclose);
}

// One collective (or, alone, plain) write of `mem` into the selection `fspace` of `ds`.
void write_selected(Comm* group, hid_t ds, hid_t mem_type, hid_t fspace, int64_t n, const void* mem) {
  hsize_t m = static_cast<hsize_t>(std::max<int64_t>(n, 1));
  H5Handle ms(SM_H5_CHECK(H5Screate_simple(1, &m, nullptr)), H5Sclose);
  if (n == 0) SM_H5_CHECK(H5Sselect_none(ms.get()));
  H5Handle dxpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  if (group) SM_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  static const uint64_t dummy = 0;
  if (n > 0 || group) SM_H5_CHECK(H5Dwrite(ds, mem_type, ms.get(), fspace, dxpl.get(), n ? mem : &dummy));
}

H5Handle open_ds(const H5File& f, const std::string& name) {
  return H5Handle(SM_H5_CHECK(H5Dopen2(f.id(), name.c_str(), H5P_DEFAULT)), H5Dclose);
}

Shape extent_of(hid_t ds) {
  H5Handle sp(SM_H5_CHECK(H5Dget_space(ds)), H5Sclose);
  int nd = H5Sget_simple_extent_ndims(sp.get());
  std::vector<hsize_t> d(static_cast<size_t>(std::max(nd, 0)));
  H5Sget_simple_extent_dims(sp.get(), d.data(), nullptr);
  return Shape(d.begin(), d.end());
}

void set_rows(hid_t ds, int64_t rows) {
  std::vector<hsize_t> d;
  for (int64_t v : extent_of(ds)) d.push_back(static_cast<hsize_t>(v));
  d[0] = static_cast<hsize_t>(rows);
  SM_H5_CHECK(H5Dset_extent(ds, d.data()));
}

std::string g(Split s) { return std::string("/") + split_name(s); }
}  // namespace

int64_t EventH5Writer::row_bytes() const {
  return static_cast<int64_t>(shape_.T) * 2 * shape_.height * shape_.width *
         static_cast<int64_t>(stored_type_size(shape_.stored));
}

EventH5Writer EventH5Writer::create(const std::string& path, Comm* group, const EventFileShape& shape) {
  EventH5Writer w;
  w.group_ = group;
  w.shape_ = shape;
  H5Handle fapl = file_access(group);
  w.file_ = H5File::create(path, fapl.get());
  const hsize_t T = static_cast<hsize_t>(shape.T), H = static_cast<hsize_t>(shape.height),
                W = static_cast<hsize_t>(shape.width);
  H5Handle xt = file_type(shape.stored);
  for (Split s : {Split::Train, Split::Test}) {
    const hsize_t n = static_cast<hsize_t>(s == Split::Train ? shape.train_rows : shape.test_rows);
    w.file_.require_group(g(s));
    create_dataset(w.file_, g(s) + "/x", xt.get(), {n, T, 2, H, W}, {1, T, 2, H, W}, shape.deflate);
    create_dataset(w.file_, g(s) + "/y", H5T_STD_I64LE, {n}, {std::min<hsize_t>(std::max<hsize_t>(n, 1), 65536)}, 0, true);
    if (shape.n_frames)
      create_dataset(w.file_, g(s) + "/n_frames", H5T_STD_I32LE, {n}, {std::min<hsize_t>(std::max<hsize_t>(n, 1), 65536)}, 0,
                     true);
    if (shape.events) {
      w.file_.require_group(g(s) + "/events");
      const std::string e = g(s) + "/events/";
      // Not deflated: a round then writes only its own events' bytes, never rewriting (and, when
      // killed, tearing) a compressed chunk that holds an earlier round's events.
      create_dataset(w.file_, e + "t", H5T_STD_I64LE, {0}, {1 << 16}, 0);
      create_dataset(w.file_, e + "x", H5T_STD_U16LE, {0}, {1 << 16}, 0);
      create_dataset(w.file_, e + "y", H5T_STD_U16LE, {0}, {1 << 16}, 0);
      create_dataset(w.file_, e + "p", H5T_STD_U8LE, {0}, {1 << 16}, 0);
      create_dataset(w.file_, e + "offsets", H5T_STD_I64LE, {n + 1}, {std::min<hsize_t>(n + 1, 65536)}, 0, true);
    }
  }
  return w;
}

EventH5Writer EventH5Writer::open(const std::string& path, Comm* group, const EventFileShape& shape) {
  EventH5Writer w;
  w.group_ = group;
  w.shape_ = shape;
  H5Handle fapl = file_access(group);
  w.file_ = H5File::open(path, true, fapl.get());
  for (Split s : {Split::Train, Split::Test})
    for (const char* d : {"/x", "/y"})
      if (!w.file_.has_dataset(g(s) + d)) SM_INPUT_ERROR(path << ": no " << g(s) << d);
  return w;
}

void EventH5Writer::write(Split s, const EventRows& mine, int64_t events_total) {
  const int64_t n = static_cast<int64_t>(mine.rows.size());
  const int64_t total = s == Split::Train ? shape_.train_rows : shape_.test_rows;
  {  // one collective write per run of rows (HDF5's fast path), as many on every rank
    H5Handle ds = open_ds(file_, g(s) + "/x");
    const Shape full = {total, shape_.T, 2, shape_.height, shape_.width};
    int64_t calls = h5_row_runs(mine.rows);
    if (group_) {
      std::vector<double> most = {static_cast<double>(calls)};
      all_reduce_doubles(*group_, most, ReduceOp::Max);
      calls = static_cast<int64_t>(most[0]);
    }
    H5Handle dxpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
    if (group_) SM_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
    H5Handle mt = file_type(shape_.stored);
    h5_transfer_rows(ds.get(), mt.get(), mine.rows, full, dxpl.get(), const_cast<uint8_t*>(mine.x.data()), true, calls);
  }
  auto put_per_row = [&](const std::string& name, hid_t mem_type, const void* data) {
    H5Handle ds = open_ds(file_, name);
    H5Handle fs(SM_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
    h5_select_rows(fs.get(), mine.rows, extent_of(ds.get()));
    write_selected(group_, ds.get(), mem_type, fs.get(), n, data);
  };
  put_per_row(g(s) + "/y", H5T_NATIVE_INT64, mine.y.data());
  if (shape_.n_frames) put_per_row(g(s) + "/n_frames", H5T_NATIVE_INT32, mine.n_frames.data());
  if (!shape_.events) return;
  const std::string e = g(s) + "/events/";
  put_per_row(e + "offsets", H5T_NATIVE_INT64, mine.ev_first.data());
  const int64_t mine_events = static_cast<int64_t>(mine.ev_t.size());
  auto put_events = [&](const std::string& name, hid_t mem_type, const void* data) {
    H5Handle ds = open_ds(file_, e + name);
    set_rows(ds.get(), events_total);
    H5Handle fs(SM_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
    SM_H5_CHECK(H5Sselect_none(fs.get()));
    for (size_t i = 0; i < mine.rows.size(); ++i) {
      if (mine.ev_count[i] == 0) continue;
      hsize_t start = static_cast<hsize_t>(mine.ev_first[i]), count = static_cast<hsize_t>(mine.ev_count[i]);
      SM_H5_CHECK(H5Sselect_hyperslab(fs.get(), H5S_SELECT_OR, &start, nullptr, &count, nullptr));
    }
    write_selected(group_, ds.get(), mem_type, fs.get(), mine_events, data);
  };
  put_events("t", H5T_NATIVE_INT64, mine.ev_t.data());
  put_events("x", H5T_NATIVE_UINT16, mine.ev_x.data());
  put_events("y", H5T_NATIVE_UINT16, mine.ev_y.data());
  put_events("p", H5T_NATIVE_UINT8, mine.ev_p.data());
}

void EventH5Writer::finish(int64_t train_rows, int64_t test_rows, int64_t train_events, int64_t test_events) {
  for (Split s : {Split::Train, Split::Test}) {
    const int64_t rows = s == Split::Train ? train_rows : test_rows;
    std::vector<std::string> per_row = {"/x", "/y"};
    if (shape_.n_frames) per_row.push_back("/n_frames");
    for (const std::string& d : per_row) {
      H5Handle ds = open_ds(file_, g(s) + d);
      set_rows(ds.get(), rows);
    }
    if (!shape_.events) continue;
    // offsets[rows] = the split's event count, written by the first rank; then shrink to rows + 1.
    H5Handle ds = open_ds(file_, g(s) + "/events/offsets");
    H5Handle fs(SM_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
    const bool first = !group_ || group_->rank() == 0;
    const int64_t total = s == Split::Train ? train_events : test_events;
    h5_select_rows(fs.get(), first ? std::vector<int64_t>{rows} : std::vector<int64_t>{}, extent_of(ds.get()));
    write_selected(group_, ds.get(), H5T_NATIVE_INT64, fs.get(), first ? 1 : 0, &total);
    set_rows(ds.get(), rows + 1);
    for (const char* k : {"t", "x", "y", "p"}) {
      H5Handle e = open_ds(file_, g(s) + "/events/" + k);
      set_rows(e.get(), total);
    }
  }
  flush();
}

void EventH5Writer::flush() { file_.flush(); }

void EventH5Writer::close() { file_.close(); }

}  // namespace sm
