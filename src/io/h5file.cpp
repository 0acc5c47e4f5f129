// h5file.cpp — RAII HDF5 files/groups, whole-tensor datasets and scalar attributes.
// Every HDF5 call goes through H5_CALL, which names the file and object in the message.
#include "spikemesh/io/h5file.h"

#include <algorithm>
#include <cstring>
#include <fstream>

namespace sm {

namespace {

// Runs an HDF5 call that returns negative on failure; the error names `what` (file:object).
template <typename R>
R h5_checked(R rc, const char* call, const std::string& what, const char* file, int line) {
  if (rc < 0) {
    try {
      throw_hdf5_error(call, file, line);
    } catch (const Error& e) {
      throw Error(e.kind(), what + ": " + e.what());
    }
  }
  return rc;
}
#define H5_CALL(call, what) h5_checked((call), #call, (what), __FILE__, __LINE__)

void silence_hdf5_auto_errors() {
  // We report errors ourselves (with context); HDF5 would otherwise print its stack.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : path) {
    if (c == '/') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

std::string join_path(const std::string& base, const std::string& child) {
  if (!child.empty() && child[0] == '/') return child;
  if (base.empty() || base == "/") return "/" + child;
  return base + "/" + child;
}

DType dtype_of_h5_type(hid_t type, const std::string& what) {
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 4) return DType::F32;
    if (size == 8) return DType::F64;
  } else if (cls == H5T_INTEGER) {
    bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size == 1 && !is_signed) return DType::U8;
    if (size == 4 && is_signed) return DType::I32;
    if (size == 8 && is_signed) return DType::I64;
  }
  SM_INPUT_ERROR(what << ": unsupported element type (class " << static_cast<int>(cls) << ", " << size
                      << " bytes); spikemesh reads f32, f64, i32, i64 and u8");
}

H5Handle open_attr_for_write(hid_t loc, const std::string& object, const std::string& key, hid_t type,
                             const std::string& what) {
  if (H5_CALL(H5Aexists_by_name(loc, object.c_str(), key.c_str(), H5P_DEFAULT), what) > 0)
    H5_CALL(H5Adelete_by_name(loc, object.c_str(), key.c_str(), H5P_DEFAULT), what);
  H5Handle space(H5_CALL(H5Screate(H5S_SCALAR), what), H5Sclose);
  return H5Handle(H5_CALL(H5Acreate_by_name(loc, object.c_str(), key.c_str(), type, space.get(), H5P_DEFAULT,
                                            H5P_DEFAULT, H5P_DEFAULT),
                          what),
                  H5Aclose);
}

}  // namespace

H5Handle& H5Handle::operator=(H5Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

herr_t H5Handle::close_checked() {
  herr_t rc = 0;
  if (id_ >= 0 && close_) rc = close_(id_);
  id_ = H5I_INVALID_HID;
  return rc;
}

void H5Handle::reset() {
  if (id_ >= 0 && close_) close_(id_);  // destructor path: never throws
  id_ = H5I_INVALID_HID;
}

hid_t h5_native_type(DType dt) {
  switch (dt) {
    case DType::F32: return H5T_NATIVE_FLOAT;
    case DType::F64: return H5T_NATIVE_DOUBLE;
    case DType::U8: return H5T_NATIVE_UINT8;
    case DType::I32: return H5T_NATIVE_INT32;
    case DType::I64: return H5T_NATIVE_INT64;
    default: break;
  }
  SM_CHECK(false, "no HDF5 element type for " << dtype_name(dt));
  return H5I_INVALID_HID;
}

namespace {
// Adds to `space` the blocks covering flat range [a, b) of dims[d..] (0 <= a < b <=
// prod(dims[d..])); start/count[0..d) are already fixed by the caller's outer rows.
void select_flat_blocks(hid_t space, const Shape& dims, size_t d, int64_t a, int64_t b, std::vector<hsize_t>& start,
                        std::vector<hsize_t>& count) {
  const size_t n = dims.size();
  if (d + 1 == n) {
    start[d] = static_cast<hsize_t>(a);
    count[d] = static_cast<hsize_t>(b - a);
    SM_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
    return;
  }
  int64_t inner = 1;
  for (size_t k = d + 1; k < n; ++k) inner *= dims[k];
  int64_t row_a = a / inner;
  const int64_t row_b = b / inner;  // rows [row_a, row_b) end before b
  if (row_a == row_b) {             // a and b inside one row
    start[d] = static_cast<hsize_t>(row_a);
    count[d] = 1;
    select_flat_blocks(space, dims, d + 1, a - row_a * inner, b - row_a * inner, start, count);
    return;
  }
  if (a % inner) {  // head: the rest of row_a
    start[d] = static_cast<hsize_t>(row_a);
    count[d] = 1;
    select_flat_blocks(space, dims, d + 1, a % inner, inner, start, count);
    ++row_a;
  }
  if (row_b > row_a) {  // whole rows
    start[d] = static_cast<hsize_t>(row_a);
    count[d] = static_cast<hsize_t>(row_b - row_a);
    for (size_t k = d + 1; k < n; ++k) {
      start[k] = 0;
      count[k] = static_cast<hsize_t>(dims[k]);
    }
    SM_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
  }
  if (b % inner) {  // tail: the start of row_b
    start[d] = static_cast<hsize_t>(row_b);
    count[d] = 1;
    select_flat_blocks(space, dims, d + 1, 0, b % inner, start, count);
  }
}
}  // namespace

void h5_select_rows(hid_t space, const std::vector<int64_t>& sorted, const Shape& full) {
  H5Sselect_none(space);
  std::vector<hsize_t> start(full.size(), 0), count(full.begin(), full.end());
  size_t i = 0;
  while (i < sorted.size()) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    start[0] = static_cast<hsize_t>(sorted[i]);
    count[0] = static_cast<hsize_t>(j - i + 1);
    SM_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, count.data(), nullptr));
    i = j + 1;
  }
}

int64_t h5_row_runs(const std::vector<int64_t>& sorted) {
  int64_t runs = 0;
  for (size_t i = 0; i < sorted.size(); ++i) runs += i == 0 || sorted[i] != sorted[i - 1] + 1;
  return runs;
}

void h5_transfer_rows(hid_t ds, hid_t mem_type, const std::vector<int64_t>& sorted, const Shape& full, hid_t dxpl,
                      void* buf, bool write, int64_t calls) {
  const size_t esize = H5Tget_size(mem_type);
  int64_t row = 1;
  for (size_t d = 1; d < full.size(); ++d) row *= full[d];
  H5Handle fs(SM_H5_CHECK(H5Dget_space(ds)), H5Sclose);
  std::vector<hsize_t> start(full.size(), 0), count(full.begin(), full.end());
  size_t i = 0;
  int64_t done = 0;  // rows transferred so far (the buffer offset)
  for (int64_t c = 0; c < calls || i < sorted.size(); ++c) {
    size_t j = i;
    while (j < sorted.size() && (j == i || sorted[j] == sorted[j - 1] + 1)) ++j;
    const hsize_t n = static_cast<hsize_t>(j - i);
    H5Handle ms;
    if (n == 0) {  // this rank has no run left: an empty selection in a collective call
      SM_H5_CHECK(H5Sselect_none(fs.get()));
      const hsize_t one = 1;
      ms = H5Handle(SM_H5_CHECK(H5Screate_simple(1, &one, nullptr)), H5Sclose);
      SM_H5_CHECK(H5Sselect_none(ms.get()));
    } else {
      start[0] = static_cast<hsize_t>(sorted[i]);
      count[0] = n;
      SM_H5_CHECK(H5Sselect_hyperslab(fs.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
      ms = H5Handle(SM_H5_CHECK(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr)), H5Sclose);
    }
    static const uint64_t dummy = 0;
    char* p = static_cast<char*>(buf) + static_cast<size_t>(done * row) * esize;
    void* at = n ? static_cast<void*>(p) : const_cast<uint64_t*>(&dummy);
    if (write) SM_H5_CHECK(H5Dwrite(ds, mem_type, ms.get(), fs.get(), dxpl, at));
    else SM_H5_CHECK(H5Dread(ds, mem_type, ms.get(), fs.get(), dxpl, at));
    done += static_cast<int64_t>(n);
    i = j;
  }
}

void h5_select_flat_range(hid_t space, const Shape& shape, int64_t offset, int64_t count) {
  const int64_t numel = shape_numel(shape);
  SM_CHECK(offset >= 0 && count >= 0 && offset + count <= numel,
           "flat range [" << offset << ", " << offset + count << ") of " << shape_str(shape));
  SM_H5_CHECK(H5Sselect_none(space));
  if (count == 0) return;
  if (shape.empty()) {  // scalar
    SM_H5_CHECK(H5Sselect_all(space));
    return;
  }
  std::vector<hsize_t> start(shape.size(), 0), cnt(shape.size(), 1);
  select_flat_blocks(space, shape, 0, offset, offset + count, start, cnt);
}

// ---- files ------------------------------------------------------------------------------

H5File H5File::rooted(const std::shared_ptr<H5Handle>& fh, const std::string& path, const std::string& what) {
  auto root = std::make_shared<H5Handle>(H5_CALL(H5Gopen2(fh->get(), "/", H5P_DEFAULT), what), H5Gclose);
  H5File f;
  f.file_h_ = fh;
  f.id_ = root;
  f.file_ = path;
  f.path_ = "/";
  return f;
}

H5File H5File::create(const std::string& path, hid_t fapl) {
  silence_hdf5_auto_errors();
  std::string what = "cannot create HDF5 file '" + path + "'";
  auto fh = std::make_shared<H5Handle>(H5_CALL(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), what),
                                       H5Fclose);
  return rooted(fh, path, what);
}

H5File H5File::open(const std::string& path, bool writable, hid_t fapl) {
  silence_hdf5_auto_errors();
  if (!std::ifstream(path).good()) SM_INPUT_ERROR("cannot open HDF5 file '" << path << "': no such file or not readable");
  htri_t is_h5 = H5Fis_hdf5(path.c_str());
  if (is_h5 <= 0) SM_INPUT_ERROR("'" << path << "' is not an HDF5 file");
  std::string what = "cannot open HDF5 file '" + path + "'";
  auto fh = std::make_shared<H5Handle>(
      H5_CALL(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl), what), H5Fclose);
  return rooted(fh, path, what);
}

void H5File::close() {
  if (!file_h_) return;
  SM_CHECK(file_h_.use_count() == 1, describe() << ": closed while " << file_h_.use_count() - 1
                                                << " group handles still use it");
  id_.reset();  // the root group
  std::shared_ptr<H5Handle> fh = std::move(file_h_);
  if (fh->close_checked() < 0) {
    try {
      throw_hdf5_error("H5Fclose", __FILE__, __LINE__);
    } catch (const Error& e) {
      throw Error(e.kind(), "cannot close HDF5 file '" + file_ + "' (data may not have reached the disk): " + e.what());
    }
  }
}

void H5File::release() {
  if (!file_h_) return;
  id_.reset();  // the root group
  file_h_->release();
  file_h_.reset();
}

void H5File::flush() const { H5_CALL(H5Fflush(file_id(), H5F_SCOPE_GLOBAL), describe()); }

// ---- groups -----------------------------------------------------------------------------

std::string H5Group::describe(const std::string& child) const {
  return file_ + ":" + (child.empty() ? path_ : join_path(path_, child));
}

bool H5Group::exists(const std::string& path) const {
  SM_CHECK(id_, "H5Group used before it was opened");
  // Walk component by component: H5Lexists needs every intermediate link to exist.
  std::vector<std::string> parts = split_path(path);
  std::string cur = (!path.empty() && path[0] == '/') ? "/" : "";
  for (const std::string& p : parts) {
    cur = cur.empty() ? p : (cur == "/" ? "/" + p : cur + "/" + p);
    if (H5_CALL(H5Lexists(id(), cur.c_str(), H5P_DEFAULT), describe(cur)) <= 0) return false;
    if (H5_CALL(H5Oexists_by_name(id(), cur.c_str(), H5P_DEFAULT), describe(cur)) <= 0) return false;
  }
  return true;
}

namespace {
H5I_type_t object_type(hid_t loc, const std::string& path, const std::string& what) {
  H5Handle obj(H5_CALL(H5Oopen(loc, path.c_str(), H5P_DEFAULT), what), H5Oclose);
  return H5Iget_type(obj.get());
}
}  // namespace

bool H5Group::has_dataset(const std::string& path) const {
  return exists(path) && object_type(id(), path, describe(path)) == H5I_DATASET;
}

bool H5Group::has_group(const std::string& path) const {
  return exists(path) && object_type(id(), path, describe(path)) == H5I_GROUP;
}

H5Group H5Group::open_group(const std::string& path) const {
  if (!has_group(path)) SM_INPUT_ERROR(describe(path) << ": no such group");
  auto h = std::make_shared<H5Handle>(H5_CALL(H5Gopen2(id(), path.c_str(), H5P_DEFAULT), describe(path)), H5Gclose);
  return H5Group(file_h_, h, file_, join_path(path_, path));
}

H5Group H5Group::require_group(const std::string& path) const {
  std::vector<std::string> parts = split_path(path);
  std::string cur = (!path.empty() && path[0] == '/') ? "/" : "";
  for (const std::string& p : parts) {
    cur = cur.empty() ? p : (cur == "/" ? "/" + p : cur + "/" + p);
    if (!exists(cur)) {
      H5Handle g(H5_CALL(H5Gcreate2(id(), cur.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), describe(cur)),
                 H5Gclose);
    } else if (object_type(id(), cur, describe(cur)) != H5I_GROUP) {
      SM_INPUT_ERROR(describe(cur) << ": exists and is not a group");
    }
  }
  if (parts.empty()) return *this;
  return open_group(path);
}

namespace {
struct ListState {
  std::vector<std::string> names;
  H5I_type_t want;
};
herr_t list_cb(hid_t loc, const char* name, const H5L_info_t* info, void* data) {
  auto* st = static_cast<ListState*>(data);
  if (info->type != H5L_TYPE_HARD) return 0;
  hid_t obj = H5Oopen(loc, name, H5P_DEFAULT);
  if (obj < 0) return -1;
  if (H5Iget_type(obj) == st->want) st->names.emplace_back(name);
  H5Oclose(obj);
  return 0;
}
std::vector<std::string> list_children(hid_t id, H5I_type_t want, const std::string& what) {
  ListState st{{}, want};
  H5_CALL(H5Literate(id, H5_INDEX_NAME, H5_ITER_INC, nullptr, list_cb, &st), what);
  std::sort(st.names.begin(), st.names.end());
  return st.names;
}
}  // namespace

std::vector<std::string> H5Group::list_datasets() const { return list_children(id(), H5I_DATASET, describe()); }
std::vector<std::string> H5Group::list_groups() const { return list_children(id(), H5I_GROUP, describe()); }

// ---- datasets ---------------------------------------------------------------------------

void H5Group::write(const std::string& name, const Tensor& t) const {
  SM_CHECK(t.defined(), "writing an undefined tensor to " << describe(name));
  Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
  write_raw(name, host.dtype(), host.shape(), host.raw());
}

void H5Group::write_raw(const std::string& name, DType dt, const Shape& shape, const void* data) const {
  std::string what = describe(name);
  if (exists(name)) H5_CALL(H5Ldelete(id(), name.c_str(), H5P_DEFAULT), what);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Handle space(H5_CALL(shape.empty() ? H5Screate(H5S_SCALAR)
                                       : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                         what),
                 H5Sclose);
  // Create intermediate groups for "a/b/c" names.
  H5Handle lcpl(H5_CALL(H5Pcreate(H5P_LINK_CREATE), what), H5Pclose);
  H5_CALL(H5Pset_create_intermediate_group(lcpl.get(), 1), what);
  hid_t type = h5_native_type(dt);
  H5Handle ds(H5_CALL(H5Dcreate2(id(), name.c_str(), type, space.get(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), what),
              H5Dclose);
  if (shape_numel(shape) > 0) H5_CALL(H5Dwrite(ds.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), what);
}

namespace {
H5Handle open_dataset(const H5Group& g, const std::string& name) {
  if (!g.has_dataset(name)) SM_INPUT_ERROR(g.describe(name) << ": no such dataset");
  return H5Handle(H5_CALL(H5Dopen2(g.id(), name.c_str(), H5P_DEFAULT), g.describe(name)), H5Dclose);
}
}  // namespace

Shape H5Group::dataset_shape(const std::string& name) const {
  H5Handle ds = open_dataset(*this, name);
  H5Handle space(H5_CALL(H5Dget_space(ds.get()), describe(name)), H5Sclose);
  int nd = H5_CALL(H5Sget_simple_extent_ndims(space.get()), describe(name));
  if (nd > kMaxDims) SM_INPUT_ERROR(describe(name) << ": " << nd << " dims; spikemesh tensors have at most " << kMaxDims);
  std::vector<hsize_t> dims(nd);
  if (nd > 0) H5_CALL(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), describe(name));
  // A damaged or foreign file may declare any extent: refuse one whose element count (or byte
  // size) would not fit in int64, before shape_numel / an allocation overflows on it.
  const hsize_t limit = static_cast<hsize_t>(INT64_MAX / 8);
  hsize_t nonzero = 1;
  for (hsize_t d : dims) {
    if (d == 0) continue;
    if (d > limit / nonzero)
      SM_INPUT_ERROR(describe(name) << ": " << nd << "-d extent too large (dimension " << d << ")");
    nonzero *= d;
  }
  return Shape(dims.begin(), dims.end());
}

DType H5Group::dataset_dtype(const std::string& name) const {
  H5Handle ds = open_dataset(*this, name);
  H5Handle type(H5_CALL(H5Dget_type(ds.get()), describe(name)), H5Tclose);
  return dtype_of_h5_type(type.get(), describe(name));
}

Tensor H5Group::read(const std::string& name) const { return read(name, dataset_dtype(name)); }

Tensor H5Group::read(const std::string& name, DType as) const {
  Tensor t = Tensor::empty(dataset_shape(name), as);
  read_into(name, t);
  return t;
}

void H5Group::read_into(const std::string& name, Tensor& out) const {
  SM_CHECK(out.defined(), "read_into needs a defined tensor (" << describe(name) << ")");
  if (!out.device().is_cpu()) {  // a device tensor: read into host memory, then one copy
    Tensor host = Tensor::empty(out.shape(), out.dtype());
    read_into(name, host);
    out.copy_from(host);
    return;
  }
  Shape s = dataset_shape(name);
  if (s != out.shape())
    SM_INPUT_ERROR(describe(name) << ": shape " << shape_str(s) << " in the file, expected " << shape_str(out.shape()));
  (void)dataset_dtype(name);  // rejects element types we cannot convert
  H5Handle ds = open_dataset(*this, name);
  if (out.numel() > 0)
    H5_CALL(H5Dread(ds.get(), h5_native_type(out.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.raw()), describe(name));
}

// ---- attributes -------------------------------------------------------------------------

void H5Group::set_attr(const std::string& key, const std::string& value) const { set_attr_on(".", key, value); }
void H5Group::set_attr(const std::string& key, int64_t value) const { set_attr_on(".", key, value); }
void H5Group::set_attr(const std::string& key, double value) const { set_attr_on(".", key, value); }

void H5Group::set_attr_on(const std::string& object, const std::string& key, const std::string& value) const {
  std::string what = describe(object == "." ? "" : object) + "@" + key;
  H5Handle type(H5_CALL(H5Tcopy(H5T_C_S1), what), H5Tclose);
  H5_CALL(H5Tset_size(type.get(), H5T_VARIABLE), what);
  H5_CALL(H5Tset_cset(type.get(), H5T_CSET_UTF8), what);
  H5Handle attr = open_attr_for_write(id(), object, key, type.get(), what);
  const char* ptr = value.c_str();
  H5_CALL(H5Awrite(attr.get(), type.get(), &ptr), what);
}

void H5Group::set_attr_on(const std::string& object, const std::string& key, int64_t value) const {
  std::string what = describe(object == "." ? "" : object) + "@" + key;
  H5Handle attr = open_attr_for_write(id(), object, key, H5T_NATIVE_INT64, what);
  H5_CALL(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), what);
}

void H5Group::set_attr_on(const std::string& object, const std::string& key, double value) const {
  std::string what = describe(object == "." ? "" : object) + "@" + key;
  H5Handle attr = open_attr_for_write(id(), object, key, H5T_NATIVE_DOUBLE, what);
  H5_CALL(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value), what);
}

bool H5Group::has_attr(const std::string& key) const {
  return H5_CALL(H5Aexists(id(), key.c_str()), describe() + "@" + key) > 0;
}

namespace {
H5Handle open_attr(const H5Group& g, const std::string& key) {
  if (!g.has_attr(key)) SM_INPUT_ERROR(g.describe() << ": no attribute '" << key << "'");
  H5Handle attr(H5_CALL(H5Aopen(g.id(), key.c_str(), H5P_DEFAULT), g.describe() + "@" + key), H5Aclose);
  // The readers below read exactly one value: an array (or empty) attribute would overflow it.
  H5Handle space(H5_CALL(H5Aget_space(attr.get()), g.describe() + "@" + key), H5Sclose);
  const hssize_t n = H5_CALL(H5Sget_simple_extent_npoints(space.get()), g.describe() + "@" + key);
  if (n != 1) SM_INPUT_ERROR(g.describe() << "@" << key << ": " << n << " values, expected a single value");
  return attr;
}
}  // namespace

std::string H5Group::attr_string(const std::string& key) const {
  std::string what = describe() + "@" + key;
  H5Handle attr = open_attr(*this, key);
  H5Handle ftype(H5_CALL(H5Aget_type(attr.get()), what), H5Tclose);
  if (H5Tget_class(ftype.get()) != H5T_STRING) SM_INPUT_ERROR(what << ": not a string attribute");
  H5Handle mtype(H5_CALL(H5Tcopy(H5T_C_S1), what), H5Tclose);
  H5_CALL(H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get())), what);  // UTF-8 or ASCII, as stored
  if (H5_CALL(H5Tis_variable_str(ftype.get()), what) > 0) {
    H5_CALL(H5Tset_size(mtype.get(), H5T_VARIABLE), what);
    char* s = nullptr;
    H5_CALL(H5Aread(attr.get(), mtype.get(), &s), what);
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  size_t n = H5Tget_size(ftype.get());  // fixed length (e.g. numpy bytes from h5py)
  H5_CALL(H5Tset_size(mtype.get(), n + 1), what);
  std::vector<char> buf(n + 1, '\0');
  H5_CALL(H5Aread(attr.get(), mtype.get(), buf.data()), what);
  return std::string(buf.data());
}

int64_t H5Group::attr_int(const std::string& key) const {
  std::string what = describe() + "@" + key;
  H5Handle attr = open_attr(*this, key);
  H5Handle ftype(H5_CALL(H5Aget_type(attr.get()), what), H5Tclose);
  if (H5Tget_class(ftype.get()) != H5T_INTEGER) SM_INPUT_ERROR(what << ": not an integer attribute");
  int64_t v = 0;
  H5_CALL(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), what);
  return v;
}

double H5Group::attr_double(const std::string& key) const {
  std::string what = describe() + "@" + key;
  H5Handle attr = open_attr(*this, key);
  H5Handle ftype(H5_CALL(H5Aget_type(attr.get()), what), H5Tclose);
  H5T_class_t cls = H5Tget_class(ftype.get());
  if (cls != H5T_FLOAT && cls != H5T_INTEGER) SM_INPUT_ERROR(what << ": not a numeric attribute");
  double v = 0;
  H5_CALL(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v), what);
  return v;
}

}  // namespace sm
