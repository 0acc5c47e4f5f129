// h5_perturb.h — structure-aware damage for the HDF5 harnesses (fuzz_h5_dataset.cpp,
// fuzz_checkpoint.cpp): with the HDF5 C API it deletes objects and attributes, replaces a
// dataset by one of another rank / shape (0, 1, ..., 2^40, up to 2^62) / element type
// (every integer and float width, strings, compounds, enums) with or without data, rewrites an
// attribute with another type, value or shape (int64 edge values, NaN/Inf doubles,
// variable and fixed-length strings, 2- and 0-element arrays), and pokes single elements.
// Every choice comes from fuzz::Bytes, so libFuzzer mutates the file's structure rather than
// its bytes (raw byte mutation would mostly exercise libhdf5's own parser). All handles are
// RAII (sm::H5Handle); HDF5 failures here are ignored (the damage is simply not applied).
#pragma once
#include <hdf5.h>

#include <string>
#include <vector>

#include "fuzz_util.h"
#include "spikemesh/io/h5file.h"

namespace fuzz {

inline sm::H5Handle h5(hid_t id, herr_t (*close)(hid_t)) { return sm::H5Handle(id, close); }

// A file element type chosen by the input (caller closes it).
inline hid_t pick_type(Bytes& in) {
  switch (in.u8() % 16) {
    case 0: return H5Tcopy(H5T_NATIVE_UINT8);
    case 1: return H5Tcopy(H5T_NATIVE_INT8);
    case 2: return H5Tcopy(H5T_NATIVE_INT16);
    case 3: return H5Tcopy(H5T_NATIVE_UINT16);
    case 4: return H5Tcopy(H5T_NATIVE_INT32);
    case 5: return H5Tcopy(H5T_NATIVE_UINT32);
    case 6: return H5Tcopy(H5T_NATIVE_INT64);
    case 7: return H5Tcopy(H5T_NATIVE_UINT64);
    case 8: return H5Tcopy(H5T_NATIVE_FLOAT);
    case 9: return H5Tcopy(H5T_NATIVE_DOUBLE);
    case 10: return H5Tcopy(H5T_STD_I64BE);
    case 11: return H5Tcopy(H5T_IEEE_F32BE);
    case 12: {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, 1 + in.u8() % 16);
      return t;
    }
    case 13: {
      hid_t t = H5Tcreate(H5T_COMPOUND, 12);
      H5Tinsert(t, "a", 0, H5T_NATIVE_INT32);
      H5Tinsert(t, "b", 4, H5T_NATIVE_DOUBLE);
      return t;
    }
    case 14: {
      hid_t t = H5Tenum_create(H5T_NATIVE_INT32);
      int v0 = 0, v1 = 1;
      H5Tenum_insert(t, "zero", &v0);
      H5Tenum_insert(t, "one", &v1);
      return t;
    }
    default: {
      hid_t t = H5Tcopy(H5T_NATIVE_UINT8);
      H5Tset_precision(t, 1 + in.u8() % 8);
      return t;
    }
  }
}

// One dimension: mostly small, sometimes 0 or huge.
inline hsize_t pick_dim(Bytes& in) {
  switch (in.u8() % 10) {
    case 0: return 0;
    case 1: return hsize_t(1) << 40;
    case 2: return hsize_t(1) << 31;
    case 3: return (hsize_t(1) << 62) + in.u8();
    default: return 1 + in.u8() % 5;
  }
}

// Replaces (or creates) dataset `path` below `loc` with a chosen rank/shape/type; small
// datasets get data (fuzz bytes), large ones are chunked and left unwritten (fill value).
inline void replace_dataset(hid_t loc, const std::string& path, Bytes& in) {
  H5E_BEGIN_TRY { H5Ldelete(loc, path.c_str(), H5P_DEFAULT); }
  H5E_END_TRY;
  const int rank = int(in.u8() % 7);
  std::vector<hsize_t> dims(size_t(rank) + 1, 1);
  long double total = 1;
  for (int i = 0; i < rank; ++i) total *= double(dims[size_t(i)] = pick_dim(in));
  auto type = h5(pick_type(in), H5Tclose);
  auto space = h5(in.u8() % 16 == 0 ? H5Screate(H5S_NULL) : rank == 0 ? H5Screate(H5S_SCALAR)
                                                                        : H5Screate_simple(rank, dims.data(), nullptr),
                  H5Sclose);
  auto dcpl = h5(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const bool small = total <= 256;
  if (!small) {
    std::vector<hsize_t> chunk(size_t(rank), 1);
    H5Pset_chunk(dcpl.get(), rank, chunk.data());
  }
  auto lcpl = h5(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  H5E_BEGIN_TRY {
    auto ds = h5(H5Dcreate2(loc, path.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                 H5Dclose);
    if (ds.valid() && small && total > 0 && in.flag()) {
      const size_t bytes = size_t(total) * H5Tget_size(type.get());
      std::vector<uint8_t> buf(bytes);
      for (uint8_t& b : buf) b = in.u8();
      // Strings and compounds: write raw bytes of the file type (no conversion).
      H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    }
  }
  H5E_END_TRY;
}

// Replaces attribute `key` of object `obj` (relative to loc) by a chosen type/value/shape, or deletes it.
inline void replace_attr(hid_t loc, const std::string& obj, const std::string& key, Bytes& in) {
  H5E_BEGIN_TRY {
    H5Adelete_by_name(loc, obj.c_str(), key.c_str(), H5P_DEFAULT);
    const uint8_t how = in.u8() % 9;
    if (how == 0) return;  // deleted
    hsize_t n = 1;
    const uint8_t shape = in.u8() % 8;
    auto space = h5(shape == 0 ? H5Screate_simple(1, &(n = 2), nullptr)
                    : shape == 1 ? H5Screate(H5S_NULL)
                    : shape == 2 ? H5Screate_simple(1, &(n = 1), nullptr)
                                 : H5Screate(H5S_SCALAR),
                    H5Sclose);
    const hsize_t count = shape == 1 ? 0 : n;
    hid_t mem = -1;
    std::vector<uint8_t> buf;
    std::vector<std::string> strs;
    std::vector<const char*> ptrs;
    auto owned = h5(-1, H5Tclose);
    switch (how) {
      case 1: case 2: {  // int64 (edge values)
        mem = H5T_NATIVE_INT64;
        for (hsize_t i = 0; i < count; ++i) {
          int64_t v = in.edgy_int(-3, 12);
          buf.insert(buf.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8);
        }
        break;
      }
      case 3: case 4: {  // double (NaN, Inf, huge, ...)
        mem = H5T_NATIVE_DOUBLE;
        for (hsize_t i = 0; i < count; ++i) {
          double v = in.edgy_double(1.0);
          buf.insert(buf.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8);
        }
        break;
      }
      case 5: case 6: {  // variable-length string
        owned = h5(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(owned.get(), H5T_VARIABLE);
        H5Tset_cset(owned.get(), H5T_CSET_UTF8);
        mem = owned.get();
        for (hsize_t i = 0; i < count; ++i) strs.push_back(in.str(12));
        for (auto& s : strs) ptrs.push_back(s.c_str());
        break;
      }
      case 7: {  // fixed-length string
        owned = h5(H5Tcopy(H5T_C_S1), H5Tclose);
        const size_t len = 1 + in.u8() % 8;
        H5Tset_size(owned.get(), len);
        mem = owned.get();
        for (hsize_t i = 0; i < count * len; ++i) buf.push_back(in.u8() % 4 ? 'N' + in.u8() % 12 : 0);
        break;
      }
      default: {  // a small-integer type of another width
        mem = in.flag() ? H5T_NATIVE_UINT8 : H5T_NATIVE_INT32;
        for (hsize_t i = 0; i < count * H5Tget_size(mem); ++i) buf.push_back(in.u8());
      }
    }
    auto a = h5(H5Acreate_by_name(loc, obj.c_str(), key.c_str(), mem, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT),
                H5Aclose);
    if (a.valid() && count > 0) H5Awrite(a.get(), mem, ptrs.empty() ? static_cast<const void*>(buf.data()) : ptrs.data());
  }
  H5E_END_TRY;
}

// Deletes the link `path` (a dataset or a group).
inline void delete_link(hid_t loc, const std::string& path) {
  H5E_BEGIN_TRY { H5Ldelete(loc, path.c_str(), H5P_DEFAULT); }
  H5E_END_TRY;
}

// Writes one element (index from the input) of a 1-d..n-d dataset with a chosen value,
// converted by HDF5 to the file type (out-of-range conversions clip; NaN stays NaN in floats).
inline void poke_element(hid_t loc, const std::string& path, Bytes& in) {
  H5E_BEGIN_TRY {
    auto ds = h5(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), H5Dclose);
    if (!ds.valid()) return;
    auto space = h5(H5Dget_space(ds.get()), H5Sclose);
    const hssize_t n = H5Sget_select_npoints(space.get());
    if (n <= 0 || n > (1 << 20)) return;
    const int nd = H5Sget_simple_extent_ndims(space.get());
    if (nd < 1) return;
    std::vector<hsize_t> dims(static_cast<size_t>(nd)), coord(static_cast<size_t>(nd));
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    for (int i = 0; i < nd; ++i) coord[size_t(i)] = dims[size_t(i)] ? in.u32() % dims[size_t(i)] : 0;
    H5Sselect_elements(space.get(), H5S_SELECT_SET, 1, coord.data());
    hsize_t one = 1;
    auto mspace = h5(H5Screate_simple(1, &one, nullptr), H5Sclose);
    if (in.flag()) {
      int64_t v = in.edgy_int(-2, 12);
      H5Dwrite(ds.get(), H5T_NATIVE_INT64, mspace.get(), space.get(), H5P_DEFAULT, &v);
    } else {
      double v = in.edgy_double(1.0);
      H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, mspace.get(), space.get(), H5P_DEFAULT, &v);
    }
  }
  H5E_END_TRY;
}

// Replaces `path` by a group (where a dataset is expected) or by a dataset (where a group is).
inline void swap_kind(hid_t loc, const std::string& path, bool make_group, Bytes& in) {
  delete_link(loc, path);
  if (make_group) {
    H5E_BEGIN_TRY {
      auto lcpl = h5(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
      H5Pset_create_intermediate_group(lcpl.get(), 1);
      auto g = h5(H5Gcreate2(loc, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
    }
    H5E_END_TRY;
  } else {
    replace_dataset(loc, path, in);
  }
}

}  // namespace fuzz
