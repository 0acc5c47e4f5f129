// checkpoint_sharded.cpp — collective checkpoints of sharded state with parallel HDF5
// (MPI-IO), format identical to the single-rank writer (checkpoint.cpp).
// Invariants:
//  * every exception leaves a collective function on every rank of the communicator at the
//    same point (agree_on_error after each step), so no rank waits alone in a collective;
//  * data is written with one collective H5Dwrite per dataset, each rank selecting its flat
//    range as hyperslabs (h5_select_flat_range); crc32 of each logical dataset is combined
//    on rank 0 from the ranks' per-range crcs (crc32_combine), so no data is read back and the
//    value equals the single-rank writer's crc of the whole tensor;
//  * before any data is written, rank 0 checks the free space and every rank its file-size
//    limit, and the file's extent is reserved (fallocate) once its layout is known, so a full
//    disk fails before HDF5 writes raw data (HDF5 1.10 cannot close a file whose writes
//    failed); the previous checkpoints are never touched before the rename.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "checkpoint_internal.h"
#include "spikemesh/io/byte_pack.h"
#include "spikemesh/io/mpi_agree.h"
#include "spikemesh/io/state_dict.h"

namespace sm {

namespace {

bool is_file_dtype(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::I32 || d == DType::I64 || d == DType::U8;
}
bool is_float(DType d) { return d == DType::F32 || d == DType::F64 || d == DType::BF16 || d == DType::F16; }

int64_t bytes_of(const TensorShard& s) { return shape_numel(s.shape) * static_cast<int64_t>(dtype_size(s.dtype)); }

// ---- checks --------------------------------------------------------------------------------

// What must be identical on every rank, folded into 64 bits (crc32 of the text and its length).
uint64_t signature(const std::vector<TensorShard>& shards, const std::string& extra) {
  std::string s = extra;
  for (const TensorShard& t : shards) {
    s += t.path;
    s += '\0';
    s += shape_str(t.shape);
    s += dtype_name(t.dtype);
    s += '\0';
  }
  return (static_cast<uint64_t>(s.size()) << 32) | ckpt::crc32_bytes(s.data(), s.size());
}

// Collective over comm: throws the same Internal error on every rank when the signatures differ.
void require_same_everywhere(MPI_Comm comm, uint64_t sig, const char* what) {
  uint64_t lo = 0, hi = 0;
  SM_MPI_CHECK(MPI_Allreduce(&sig, &lo, 1, MPI_UINT64_T, MPI_MIN, comm));
  SM_MPI_CHECK(MPI_Allreduce(&sig, &hi, 1, MPI_UINT64_T, MPI_MAX, comm));
  SM_CHECK(lo == hi, what << ": the ranks pass different tensor lists (paths, shapes, dtypes, order) or settings");
}

void check_local(const std::vector<TensorShard>& shards, bool saving) {
  std::set<std::string> seen;
  for (const TensorShard& s : shards) {
    SM_CHECK(!s.path.empty() && s.path[0] != '/' && s.path.rfind("meta", 0) != 0,
             "checkpoint tensor path '" << s.path << "' (relative, not under meta/)");
    SM_CHECK(seen.insert(s.path).second, "checkpoint tensor '" << s.path << "' listed twice");
    SM_CHECK(is_file_dtype(s.dtype), "checkpoint tensor '" << s.path << "': dtype " << dtype_name(s.dtype));
    SM_CHECK(s.shape.size() <= static_cast<size_t>(kMaxDims), "checkpoint tensor '" << s.path << "' rank");
    for (int64_t d : s.shape) SM_CHECK(d >= 0, "checkpoint tensor '" << s.path << "' shape " << shape_str(s.shape));
    const int64_t n = shape_numel(s.shape);
    SM_CHECK(s.offset >= 0 && s.count >= 0 && s.offset + s.count <= n,
             "checkpoint tensor '" << s.path << "': range [" << s.offset << ", " << s.offset + s.count << ") of "
                                   << n << " elements");
    if (s.count > 0) {
      SM_CHECK(s.data.defined() && s.data.numel() == s.count,
               "checkpoint tensor '" << s.path << "': data holds " << (s.data.defined() ? s.data.numel() : 0)
                                     << " elements, the range " << s.count);
      SM_CHECK(s.data.dtype() == s.dtype || (is_float(s.data.dtype()) && is_float(s.dtype)) || !saving,
               "checkpoint tensor '" << s.path << "': data " << dtype_name(s.data.dtype()) << ", file "
                                     << dtype_name(s.dtype));
    }
  }
}

// Collective over comm: rank 0 receives every rank's rows of `width` int64 (concatenated in
// rank order); the others get nothing.
std::vector<int64_t> gather_rows(MPI_Comm comm, const std::vector<int64_t>& mine) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(rank == 0 ? size : 0), displs(rank == 0 ? size : 0);
  SM_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm));
  std::vector<int64_t> all;
  if (rank == 0) {
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = static_cast<int>(total);
      total += counts[r];
    }
    SM_CHECK(total < (int64_t(1) << 31), "too many checkpoint pieces to gather (" << total << ")");
    all.resize(static_cast<size_t>(total));
  }
  SM_MPI_CHECK(MPI_Gatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T, 0,
                           comm));
  return all;
}

// Rows {tensor index, offset, count, x} grouped per tensor and sorted by offset.
std::vector<std::vector<std::array<int64_t, 3>>> pieces_by_tensor(const std::vector<int64_t>& rows, size_t n) {
  std::vector<std::vector<std::array<int64_t, 3>>> out(n);
  for (size_t i = 0; i + 4 <= rows.size(); i += 4)
    out[static_cast<size_t>(rows[i])].push_back({rows[i + 1], rows[i + 2], rows[i + 3]});
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

// ---- HDF5 pieces -----------------------------------------------------------------------------

H5Handle mpio_fapl(MPI_Comm comm, hsize_t meta_block) {
  H5Handle fapl(SM_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  SM_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  if (meta_block) SM_H5_CHECK(H5Pset_meta_block_size(fapl.get(), meta_block));
  return fapl;
}

H5Handle collective_dxpl() {
  H5Handle dxpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  SM_H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

H5Handle file_space(const Shape& shape) {
  if (shape.empty()) return H5Handle(SM_H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  return H5Handle(SM_H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
}

H5Handle memory_space(int64_t count) {
  hsize_t m = static_cast<hsize_t>(std::max<int64_t>(count, 1));
  H5Handle ms(SM_H5_CHECK(H5Screate_simple(1, &m, nullptr)), H5Sclose);
  if (count == 0) SM_H5_CHECK(H5Sselect_none(ms.get()));
  return ms;
}

// Contiguous, allocated at creation, never filled (every element is written by some rank).
void create_dataset(const H5File& f, const TensorShard& s) {
  const std::string what = f.describe(s.path);
  H5Handle space = file_space(s.shape);
  H5Handle lcpl(SM_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  SM_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1));
  H5Handle dcpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  SM_H5_CHECK(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS));
  SM_H5_CHECK(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  SM_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  hid_t ds = H5Dcreate2(f.id(), s.path.c_str(), h5_native_type(s.dtype), space.get(), lcpl.get(), dcpl.get(),
                        H5P_DEFAULT);
  if (ds < 0) SM_INPUT_ERROR(what << ": cannot create the dataset");
  H5Dclose(ds);
}

// The rank's elements of a shard as a host tensor [count] in the file dtype (a view when possible).
Tensor staged_for_write(const TensorShard& s) {
  Tensor t = s.data.view({s.count});
  if (!t.device().is_cpu()) t = t.to(Device::cpu());
  if (t.dtype() != s.dtype) t = t.to_dtype(s.dtype);
  return t;
}

// Collective over the file's communicator: every rank transfers its range (count 0: none).
void transfer(const H5File& f, const TensorShard& s, void* buf, bool write, DType mem_type) {
  H5Handle ds(SM_H5_CHECK(H5Dopen2(f.id(), s.path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle fs(SM_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
  h5_select_flat_range(fs.get(), s.shape, s.offset, s.count);
  H5Handle ms = memory_space(s.count);
  H5Handle dxpl = collective_dxpl();
  static char dummy[16];
  void* p = s.count ? buf : dummy;
  if (write)
    SM_H5_CHECK(H5Dwrite(ds.get(), h5_native_type(mem_type), ms.get(), fs.get(), dxpl.get(), p));
  else
    SM_H5_CHECK(H5Dread(ds.get(), h5_native_type(mem_type), ms.get(), fs.get(), dxpl.get(), p));
}

// Reserves [0, bytes) of `path` on disk without changing its size (no-op where unsupported).
void reserve_space(const std::string& path, int64_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY);
  if (fd < 0) SM_INPUT_ERROR(path << ": cannot open to reserve space (" << std::strerror(errno) << ")");
  int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes));
  int e = errno;
  ::close(fd);
  if (rc != 0 && e != EOPNOTSUPP && e != ENOSYS)
    SM_INPUT_ERROR(path << ": cannot reserve " << bytes << " bytes (" << std::strerror(e) << ")");
}

// ---- CheckpointInfo over the wire ----------------------------------------------------------

using bytes::get_i;
using bytes::get_s;
using bytes::put;

void bcast_info(MPI_Comm comm, CheckpointInfo& ci) {
  std::string b;
  if (comm_rank(comm) == 0) {
    for (const std::string* s : {&ci.path, &ci.model, &ci.precision, &ci.mesh, &ci.config_toml, &ci.optimizer})
      put(b, *s);
    int64_t scale_bits = 0;
    std::memcpy(&scale_bits, &ci.state.loss_scale, sizeof scale_bits);
    for (int64_t v : {ci.state.step, ci.state.epoch, ci.state.batch_in_epoch, ci.state.seed, ci.optimizer_step,
                      ci.format_version, ci.num_params, ci.num_optim_states, scale_bits,
                      ci.state.loss_scale_finite_in_row, ci.state.skipped_steps})
      put(b, v);
  }
  bcast_string(comm, b);
  if (comm_rank(comm) == 0) return;
  size_t at = 0;
  for (std::string* s : {&ci.path, &ci.model, &ci.precision, &ci.mesh, &ci.config_toml, &ci.optimizer})
    *s = get_s(b, at);
  int64_t scale_bits = 0;
  for (int64_t* v : {&ci.state.step, &ci.state.epoch, &ci.state.batch_in_epoch, &ci.state.seed, &ci.optimizer_step,
                     &ci.format_version, &ci.num_params, &ci.num_optim_states, &scale_bits,
                     &ci.state.loss_scale_finite_in_row, &ci.state.skipped_steps})
    *v = get_i(b, at);
  std::memcpy(&ci.state.loss_scale, &scale_bits, sizeof scale_bits);
}

// ---- load validation (rank 0, serial open) -------------------------------------------------

// Checks the file against the requested tensors; returns per tensor {file dtype, stored crc}.
std::vector<int64_t> validate_for_load(const std::string& path, const std::vector<TensorShard>& shards,
                                       const CheckpointMeta& expect, const CheckpointInfo& ci) {
  H5File f = H5File::open(path);
  const std::string models = "checkpoint of model '" + ci.model + "', this run builds '" + expect.model + "'";
  auto misfit = [&](const std::string& what) {
    SM_INPUT_ERROR(path << ": does not fit this run's model and optimizer: " << what << " (" << models << ")");
  };
  std::vector<int64_t> out;
  std::set<std::string> wanted;
  int64_t wanted_optim = 0;
  for (const TensorShard& s : shards) {
    wanted.insert(s.path);
    const bool optim = s.path.rfind("optim/", 0) == 0;
    wanted_optim += optim;
    if (!f.has_dataset(s.path)) {
      if (optim)
        misfit("no optimizer state /" + s.path + " (written by optimizer '" + ci.optimizer + "', this run uses '" +
               expect.optimizer + "')");
      misfit("tensor /" + s.path + " of shape " + shape_str(s.shape) + " is missing");
    }
    Shape fs = f.dataset_shape(s.path);
    if (fs != s.shape)
      misfit("tensor /" + s.path + " has shape " + shape_str(fs) + " in the file, expected " + shape_str(s.shape));
    out.push_back(static_cast<int64_t>(f.dataset_dtype(s.path)));
    out.push_back(ckpt::stored_crc(f, s.path));
  }
  for (const char* g : {"params", "buffers"}) {
    if (!f.has_group(g)) continue;
    for (const std::string& n : f.open_group(g).list_datasets())
      if (!wanted.count(std::string(g) + "/" + n)) misfit("tensor /" + std::string(g) + "/" + n + " is not in this model");
  }
  int64_t file_optim = 0;
  if (f.has_group("optim"))
    ckpt::for_each_dataset(f.open_group("optim"), "", [&](const H5Group&, const std::string&, const std::string&) {
      ++file_optim;
    });
  if (file_optim != wanted_optim)
    SM_INPUT_ERROR(path << ": holds " << file_optim << " optimizer state tensors, this run's optimizer ('"
                        << expect.optimizer << "') has " << wanted_optim);
  if (!expect.model.empty() && ci.model != expect.model)
    SM_INPUT_ERROR(path << ": checkpoint of model '" << ci.model << "', but this run builds '" << expect.model << "'");
  return out;
}

}  // namespace

// ---- save ----------------------------------------------------------------------------------

std::string save_checkpoint_sharded(MPI_Comm comm, const std::string& dir, const std::vector<TensorShard>& shards,
                                    const CheckpointMeta& meta, int keep) {
  const int rank = comm_rank(comm);
  const std::string final_path = checkpoint_path(dir, meta.state.step), tmp = final_path + ".tmp";
  const size_t n = shards.size();

  // 1. Arguments: locally sane, identical lists everywhere, ranges tiling every tensor.
  agree_on_error(comm, [&] { check_local(shards, true); });
  std::string settings = "save|" + dir + "|" + std::to_string(keep) + "|" + meta.model + "|" + meta.optimizer + "|" +
                         meta.precision + "|" + meta.mesh + "|" + std::to_string(meta.state.step) + "|" +
                         std::to_string(meta.optimizer_step) + "|" + meta.config_toml;
  require_same_everywhere(comm, signature(shards, settings), "save_checkpoint_sharded");
  std::vector<int64_t> mine;
  for (size_t i = 0; i < n; ++i)
    if (shards[i].count) mine.insert(mine.end(), {static_cast<int64_t>(i), shards[i].offset, shards[i].count, rank});
  std::vector<int64_t> rows = gather_rows(comm, mine);
  agree_on_error(comm, [&] {
    if (rank != 0) return;
    auto pieces = pieces_by_tensor(rows, n);
    for (size_t i = 0; i < n; ++i) {
      int64_t cursor = 0;
      for (const auto& p : pieces[i]) {
        if (p[0] != cursor)
          SM_CHECK(false, "checkpoint tensor '" << shards[i].path << "': the ranks' ranges do not tile it: "
                                                << (p[0] > cursor ? "no rank holds [" : "two ranks hold [") << std::min(cursor, p[0])
                                                << ", " << std::max(cursor, p[0]) << ") (next range from rank " << p[2] << ")");
        cursor += p[1];
      }
      SM_CHECK(cursor == shape_numel(shards[i].shape), "checkpoint tensor '" << shards[i].path << "': the ranks hold "
                                                                              << cursor << " of its "
                                                                              << shape_numel(shards[i].shape) << " elements");
    }
  });

  // 2. Room on disk: free space (rank 0) and every writer's file-size limit, before any write.
  int64_t data_bytes = 0, name_bytes = 0;
  for (const TensorShard& s : shards) {
    data_bytes += bytes_of(s);
    name_bytes += static_cast<int64_t>(s.path.size());
  }
  // Metadata (object headers, crc attributes, links, /meta) kept in one block at the start.
  const int64_t meta_block =
      ((32768 + 1024 * static_cast<int64_t>(n) + 4 * name_bytes + 2 * static_cast<int64_t>(meta.config_toml.size())) +
       4095) / 4096 * 4096;
  const int64_t estimate = data_bytes + meta_block + 65536;
  agree_on_error(comm, [&] {
    rlimit rl{};
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(rl.rlim_cur) < estimate)
      SM_INPUT_ERROR("checkpoint " << final_path << " not written (the previous checkpoint is intact): it needs about "
                                   << estimate << " bytes, above the file-size limit (ulimit -f) of "
                                   << rl.rlim_cur << " bytes (" << where_am_i() << ")");
    if (rank != 0) return;
    std::remove(tmp.c_str());  // a stale .tmp of a crashed run would count as used space
    struct statvfs sv {};
    if (statvfs(dir.c_str(), &sv) != 0)
      SM_INPUT_ERROR("checkpoint " << final_path << " not written: cannot access directory " << dir << " ("
                                   << std::strerror(errno) << ")");
    const double avail = static_cast<double>(sv.f_bavail) * static_cast<double>(sv.f_frsize);
    if (avail < static_cast<double>(estimate))
      SM_INPUT_ERROR("checkpoint " << final_path << " not written (the previous checkpoint is intact): disk full, it needs about "
                                   << estimate << " bytes, " << static_cast<int64_t>(avail) << " are free in " << dir);
  });

  // 3. Write <final>.tmp collectively. Any failure: close, remove, same error everywhere.
  try {
    H5File f;
    agree_on_error(comm, [&] {
      H5Handle fapl = mpio_fapl(comm, static_cast<hsize_t>(meta_block));
      f = H5File::create(tmp, fapl.get());
    });
    // Reserve the whole estimated extent before HDF5 allocates anything but the superblock and
    // the metadata block, so the metadata written when the file is closed (also on the error
    // path) lands in reserved space; then top up to the real extent once it is known.
    agree_on_error(comm, [&] {
      if (rank == 0) reserve_space(tmp, estimate);
    });
    agree_on_error(comm, [&] {
      for (const char* g : {"params", "buffers", "optim", "meta"}) f.require_group(g);
      for (const TensorShard& s : shards) create_dataset(f, s);
    });
    agree_on_error(comm, [&] {
      hsize_t extent = 0;  // max(EOF, EOA): every dataset is allocated by now
      SM_H5_CHECK(H5Fget_filesize(f.file_id(), &extent));
      if (rank == 0 && static_cast<int64_t>(extent) + 65536 > estimate)
        reserve_space(tmp, static_cast<int64_t>(extent) + 65536);
    });
    std::vector<int64_t> crc_rows;
    for (size_t i = 0; i < n; ++i) {
      const TensorShard& s = shards[i];
      agree_on_error(comm, [&] {
        Tensor host = s.count ? staged_for_write(s) : Tensor();
        if (s.count)
          crc_rows.insert(crc_rows.end(), {static_cast<int64_t>(i), s.offset, s.count,
                                           static_cast<int64_t>(ckpt::crc_of(host))});
        transfer(f, s, s.count ? host.raw() : nullptr, true, s.dtype);
      });
    }
    // crc32 of each whole tensor, combined in offset order on rank 0.
    std::vector<int64_t> all = gather_rows(comm, crc_rows), crcs(n, 0);
    if (rank == 0) {
      auto pieces = pieces_by_tensor(all, n);
      for (size_t i = 0; i < n; ++i) {
        uint32_t c = 0;
        for (const auto& p : pieces[i])
          c = ckpt::crc32_concat(c, static_cast<uint32_t>(p[2]), p[1] * static_cast<int64_t>(dtype_size(shards[i].dtype)));
        crcs[i] = c;
      }
    }
    bcast_i64s(comm, crcs);
    agree_on_error(comm, [&] {
      for (size_t i = 0; i < n; ++i) f.set_attr_on(shards[i].path, "crc32", crcs[i]);
      std::string dtype = "f32";
      for (const TensorShard& s : shards)
        if (s.path.rfind("params/", 0) == 0) {
          dtype = dtype_name(s.dtype);
          break;
        }
      f.set_attr("model", meta.model);
      f.set_attr("format", std::string("spikemesh-state-dict"));
      f.set_attr("format_version", static_cast<int64_t>(kStateDictFormatVersion));
      f.set_attr("dtype", dtype);
      int64_t nstate = 0;
      for (const TensorShard& s : shards) nstate += s.path.rfind("optim/", 0) == 0;
      ckpt::write_meta(f.open_group("meta"), meta, nstate);
      f.flush();  // data and metadata on disk (MPI_File_sync) ...
      f.open_group("meta").set_attr("complete", int64_t(1));  // ... before the completion mark
      f.flush();
    });
    agree_on_error(comm, [&] { f.close(); });  // collective; fails if HDF5 could not flush
    agree_on_error(comm, [&] {
      if (rank != 0) return;
      ckpt::fsync_path(tmp, false);
      if (std::rename(tmp.c_str(), final_path.c_str()) != 0)
        SM_INPUT_ERROR(final_path << ": rename failed (" << std::strerror(errno) << ")");
      ckpt::fsync_path(dir, true);
    });
  } catch (const Error& e) {
    // Every rank is here (errors were agreed); H5File destructors have closed the file.
    if (rank == 0) std::remove(tmp.c_str());
    MPI_Barrier(comm);
    const std::string what = e.what();
    if (what.rfind("checkpoint " + final_path + " not written", 0) == 0) throw Error(ErrorKind::Input, what);
    SM_INPUT_ERROR("checkpoint " << final_path << " not written (the previous checkpoint is intact): " << what);
  }
  // 4. Only now: prune older complete checkpoints (damaged ones are left alone).
  if (rank == 0) ckpt::prune_checkpoints(dir, final_path, keep);
  SM_MPI_CHECK(MPI_Barrier(comm));
  return final_path;
}

// ---- info / latest -------------------------------------------------------------------------

CheckpointInfo read_checkpoint_info(MPI_Comm comm, const std::string& path) {
  CheckpointInfo ci;
  agree_on_error(comm, [&] {
    if (comm_rank(comm) == 0) ci = read_checkpoint_info(path);
  });
  bcast_info(comm, ci);
  return ci;
}

std::string find_latest_checkpoint(MPI_Comm comm, const std::string& dir) {
  std::string latest;
  agree_on_error(comm, [&] {
    if (comm_rank(comm) == 0) latest = find_latest_checkpoint(dir);
  });
  bcast_string(comm, latest);
  return latest;
}

// ---- load ----------------------------------------------------------------------------------

CheckpointInfo load_checkpoint_sharded(MPI_Comm comm, const std::string& path, std::vector<TensorShard>& shards,
                                       const CheckpointMeta& expect) {
  const int rank = comm_rank(comm), size = comm_size(comm);
  const size_t n = shards.size();
  agree_on_error(comm, [&] { check_local(shards, false); });
  require_same_everywhere(comm, signature(shards, "load|" + path + "|" + expect.model + "|" + expect.optimizer),
                          "load_checkpoint_sharded");

  // 1. Rank 0 checks the file against the request; everyone learns dtypes and stored crcs.
  CheckpointInfo ci;
  std::vector<int64_t> file_facts;  // per tensor: dtype, stored crc (-1: none)
  agree_on_error(comm, [&] {
    if (rank != 0) return;
    ci = read_checkpoint_info(path);
    file_facts = validate_for_load(path, shards, expect, ci);
  });
  bcast_info(comm, ci);
  bcast_i64s(comm, file_facts);

  // 2. Collective reads into host staging buffers in the file's dtype.
  std::vector<Tensor> staged(n);
  std::vector<int64_t> crc_rows;
  {
    H5File f;
    agree_on_error(comm, [&] {
      H5Handle fapl = mpio_fapl(comm, 0);
      f = H5File::open(path, false, fapl.get());
    });
    for (size_t i = 0; i < n; ++i) {
      const TensorShard& s = shards[i];
      const DType file_dt = static_cast<DType>(file_facts[2 * i]);
      agree_on_error(comm, [&] {
        if (s.count) staged[i] = Tensor::empty({s.count}, file_dt);
        transfer(f, s, s.count ? staged[i].raw() : nullptr, false, file_dt);
        if (s.count)
          crc_rows.insert(crc_rows.end(), {static_cast<int64_t>(i), s.offset, s.count,
                                           static_cast<int64_t>(ckpt::crc_of(staged[i]))});
      });
    }
    agree_on_error(comm, [&] { f.close(); });
  }

  // 3. Checksums: combined on rank 0 where the ranks' ranges tile a tensor; the rest are read
  //    whole by one rank each (round robin).
  std::vector<int64_t> all = gather_rows(comm, crc_rows), reader(n, -1);
  agree_on_error(comm, [&] {
    if (rank != 0) return;
    auto pieces = pieces_by_tensor(all, n);
    int next = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t want = file_facts[2 * i + 1], numel = shape_numel(shards[i].shape);
      if (want < 0) continue;
      const int64_t esize = static_cast<int64_t>(dtype_size(static_cast<DType>(file_facts[2 * i])));
      std::map<int64_t, uint32_t> reached{{0, 0u}};  // offset -> crc of [0, offset)
      for (const auto& p : pieces[i]) {
        auto it = reached.find(p[0]);
        if (it != reached.end() && !reached.count(p[0] + p[1]))
          reached[p[0] + p[1]] = ckpt::crc32_concat(it->second, static_cast<uint32_t>(p[2]), p[1] * esize);
      }
      auto whole = reached.find(numel);
      if (whole == reached.end()) {
        reader[i] = next++ % size;
      } else if (static_cast<uint32_t>(want) != whole->second) {
        SM_INPUT_ERROR(path << ": dataset /" << shards[i].path << " is corrupted (checksum mismatch)");
      }
    }
  });
  bcast_i64s(comm, reader);
  agree_on_error(comm, [&] {
    H5File f;
    for (size_t i = 0; i < n; ++i) {
      if (reader[i] != rank) continue;
      if (f.file_id() < 0) f = H5File::open(path);
      Tensor t = f.read(shards[i].path);
      if (static_cast<uint32_t>(file_facts[2 * i + 1]) != ckpt::crc_of(t))
        SM_INPUT_ERROR(path << ": dataset /" << shards[i].path << " is corrupted (checksum mismatch)");
    }
  });

  // 4. Only now write into the callers' tensors.
  agree_on_error(comm, [&] {
    for (size_t i = 0; i < n; ++i) {
      TensorShard& s = shards[i];
      if (!s.count) continue;
      Tensor src = staged[i];
      if (src.dtype() != s.data.dtype()) src = src.to_dtype(s.data.dtype());
      Tensor dst = s.data.view({s.count});
      dst.copy_from(src);
    }
  });
  return ci;
}

}  // namespace sm
