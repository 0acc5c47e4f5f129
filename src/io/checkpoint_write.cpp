// checkpoint_write.cpp — the one checkpoint writer (io/checkpoint.h write_checkpoint): every
// rank's boxes of every logical tensor written with one hyperslab H5Dwrite per dataset
// (collective MPI-IO over the group; alone: in memory, then one POSIX write).
// Invariants:
//  * every exception leaves the function on every rank of the group at the same point (each
//    step runs under Group::agree), so no rank waits alone in a collective; local work that
//    can fail (staging a tensor) is agreed on BEFORE the collective write that follows it;
//  * before any file is created the shard lists are checked: the same tensors everywhere,
//    and the ranks' boxes tile every tensor exactly (their flat runs, gathered to rank 0);
//  * crc32 of each dataset is combined on rank 0 from the ranks' crcs of their contiguous
//    flat runs (crc32_combine, in flat order), so no data is read back and the value equals
//    the crc of the whole tensor's row-major bytes;
//  * before any data is written, rank 0 checks the free space and every rank its file-size
//    limit, and (MPI-IO) the file's extent is reserved (fallocate) once its layout is known,
//    so a full disk fails before HDF5 writes raw data (HDF5 1.10 cannot close a file whose
//    writes failed); the previous checkpoints are never touched before the rename.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint_internal.h"
#include "spikemesh/core/io_retry.h"
#include "spikemesh/io/hdf5_thread.h"

namespace sm {

using ckpt::Group;
using ckpt::Run;
using ckpt::TensorPlan;

namespace {

int64_t bytes_of(const TensorPlan& t) { return shape_numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype)); }

// Rank 0: every tensor's flat runs (rows {tensor, start, len, rank} of all ranks) must tile it.
void check_tiling(const std::vector<TensorPlan>& plans, const std::vector<int64_t>& rows) {
  std::vector<std::vector<std::array<int64_t, 3>>> runs(plans.size());
  for (size_t i = 0; i + 4 <= rows.size(); i += 4)
    runs[static_cast<size_t>(rows[i])].push_back({rows[i + 1], rows[i + 2], rows[i + 3]});
  for (size_t i = 0; i < plans.size(); ++i) {
    std::sort(runs[i].begin(), runs[i].end());
    const std::string what = "checkpoint tensor '" + plans[i].path + "' of shape " + shape_str(plans[i].shape) +
                             ": the ranks' boxes do not tile it: ";
    int64_t cursor = 0;
    for (const auto& r : runs[i]) {
      SM_CHECK(r[0] <= cursor, what << "no rank holds flat elements [" << cursor << ", " << r[0] << ")");
      SM_CHECK(r[0] >= cursor, what << "flat elements [" << r[0] << ", " << std::min(cursor, r[0] + r[1])
                                    << ") are held twice (one of them by rank " << r[2] << ")");
      cursor += r[1];
    }
    const int64_t n = shape_numel(plans[i].shape);
    SM_CHECK(cursor == n, what << "no rank holds flat elements [" << cursor << ", " << n << ")");
  }
}

// This rank's part of one tensor, ready for the write: the elements of its boxes in file
// (row-major) order and the file dtype, back to back in `buf`, and the merged flat runs
// they form (in order; buf holds run after run).
struct Staged {
  Tensor buf;
  std::vector<Run> runs;
  int64_t count = 0;
};

Staged stage(const TensorPlan& t, const std::vector<TensorShard>& shards) {
  struct Piece {
    int64_t start, len;
    size_t host;
    int64_t pos;  // in host[host]
  };
  std::vector<Tensor> host;
  std::vector<Piece> pieces;
  Staged st;
  for (size_t k : t.shards) {
    const TensorShard& s = shards[k];
    const int64_t n = s.box.numel();
    if (n == 0) continue;
    Tensor h = s.data.view({n});
    if (!h.device().is_cpu()) h = h.to(Device::cpu());
    if (h.dtype() != t.dtype) h = h.to_dtype(t.dtype);
    int64_t pos = 0;
    for (const auto& r : box_flat_runs(t.shape, s.box)) {
      pieces.push_back({r.first, r.second, host.size(), pos});
      pos += r.second;
    }
    host.push_back(h);
    st.count += n;
  }
  if (host.empty()) return st;
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.start < b.start; });
  if (host.size() == 1) {
    st.buf = host[0];  // one box: its runs are in file order already
  } else {             // several boxes: reorder into the selection's (row-major) order
    const size_t es = dtype_size(t.dtype);
    st.buf = Tensor::empty({st.count}, t.dtype);
    char* d = static_cast<char*>(st.buf.raw());
    for (const Piece& p : pieces) {
      std::memcpy(d, static_cast<const char*>(host[p.host].raw()) + p.pos * es, static_cast<size_t>(p.len) * es);
      d += p.len * es;
    }
  }
  for (const Piece& p : pieces) {
    if (!st.runs.empty() && st.runs.back().start + st.runs.back().len == p.start)
      st.runs.back().len += p.len;
    else
      st.runs.push_back({p.start, p.len});
  }
  return st;
}

// Contiguous, allocated at creation, never filled (every element is written by some rank).
void create_dataset(const H5File& f, const TensorPlan& t) {
  const std::string what = f.describe(t.path);
  H5Handle space = ckpt::file_space(t.shape);
  H5Handle lcpl(SM_H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose);
  SM_H5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1));
  H5Handle dcpl(SM_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  SM_H5_CHECK(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS));
  SM_H5_CHECK(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY));
  SM_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  hid_t ds = H5Dcreate2(f.id(), t.path.c_str(), h5_native_type(t.dtype), space.get(), lcpl.get(), dcpl.get(),
                        H5P_DEFAULT);
  if (ds < 0) SM_INPUT_ERROR(what << ": cannot create the dataset");
  H5Dclose(ds);
}

// Collective over the group (one H5Dwrite; alone: skipped when this rank holds nothing);
// `independent`: local (an independent MPI-IO write, skipped when this rank holds nothing).
void write_tensor(const Group& g, const H5File& f, const TensorPlan& t, const std::vector<TensorShard>& shards,
                  const Staged& st, bool independent) {
  if (independent && st.count == 0) return;
  H5Handle ds(SM_H5_CHECK(H5Dopen2(f.id(), t.path.c_str(), H5P_DEFAULT)), H5Dclose);
  H5Handle fs(SM_H5_CHECK(H5Dget_space(ds.get())), H5Sclose);
  std::vector<const Box*> boxes;
  for (size_t k : t.shards) boxes.push_back(&shards[k].box);
  ckpt::select_boxes(fs.get(), t.shape, boxes);
  SM_CHECK(H5Sget_select_npoints(fs.get()) == st.count,
           "'" << t.path << "': " << st.count << " elements staged, " << H5Sget_select_npoints(fs.get()) << " selected");
  H5Handle ms = ckpt::memory_space(st.count);
  H5Handle dxpl = ckpt::transfer_plist(g, independent);
  static char dummy[16];
  if (st.count || g.comm)
    SM_H5_CHECK(H5Dwrite(ds.get(), h5_native_type(t.dtype), ms.get(), fs.get(), dxpl.get(),
                         st.count ? st.buf.raw() : dummy));
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

// The file-access property list: MPI-IO over the group, or (alone) in memory without a backing
// store — the image is written with checked POSIX calls, because a disk-write failure inside
// HDF5 leaves an unclosable file that crashes the library at exit (HDF5 1.10).
// The image grows by `image_bytes` at once (the file's estimated size): one allocation, not a
// reallocation — and a copy of everything so far — every 16 MB.
H5Handle file_access(const Group& g, hsize_t meta_block, int64_t image_bytes) {
  H5Handle fapl(SM_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  if (g.comm)
    SM_H5_CHECK(H5Pset_fapl_mpio(fapl.get(), g.comm->mpi_comm(), MPI_INFO_NULL));
  else
    SM_H5_CHECK(H5Pset_fapl_core(fapl.get(), static_cast<size_t>(std::max<int64_t>(image_bytes, int64_t(1) << 24)), 0));
  SM_H5_CHECK(H5Pset_meta_block_size(fapl.get(), meta_block));
  return fapl;
}

std::vector<char> file_image(const H5File& f, const std::string& tmp) {
  ssize_t size = H5Fget_file_image(f.file_id(), nullptr, 0);
  if (size <= 0) SM_INPUT_ERROR(tmp << ": cannot get the HDF5 file image");
  std::vector<char> image(static_cast<size_t>(size));
  if (H5Fget_file_image(f.file_id(), image.data(), image.size()) != size)
    SM_INPUT_ERROR(tmp << ": cannot get the HDF5 file image");
  return image;
}

// Where the file goes and how big it will be.
struct Target {
  std::string dir, final_path, tmp;  // tmp = <final>.tmp until the rename
  int64_t meta_block = 0;            // object headers, crc attributes, links, /meta: one block at the start
  int64_t estimate = 0;              // bytes the file needs (data + metadata + slack)
};

Target target_of(const std::string& dir, const CheckpointMeta& meta, const std::vector<TensorPlan>& plans) {
  Target t;
  t.dir = dir;
  t.final_path = checkpoint_path(dir, meta.state.step);
  t.tmp = t.final_path + ".tmp";
  int64_t data_bytes = 0, name_bytes = 0;
  for (const TensorPlan& p : plans) {
    data_bytes += bytes_of(p);
    name_bytes += static_cast<int64_t>(p.path.size());
  }
  t.meta_block = ((32768 + 1024 * static_cast<int64_t>(plans.size()) + 4 * name_bytes +
                   2 * static_cast<int64_t>(meta.config_toml.size())) + 4095) / 4096 * 4096;
  t.estimate = data_bytes + t.meta_block + 65536;
  return t;
}

// Step 1, collective over the group: the shard lists locally sane, the same tensors and settings
// everywhere, the ranks' boxes tiling every tensor. Returns the tensor plans.
std::vector<TensorPlan> check_shard_lists(const Group& g, const std::vector<TensorShard>& shards,
                                          const std::string& dir, const CheckpointMeta& meta, int keep) {
  std::vector<TensorPlan> plans;
  g.agree([&] { plans = ckpt::plan_tensors(shards, true); });
  ckpt::require_same_everywhere(g, plans,
                                "save|" + dir + "|" + std::to_string(keep) + "|" + meta.model + "|" + meta.optimizer +
                                    "|" + meta.precision + "|" + meta.mesh + "|" + std::to_string(meta.state.step) +
                                    "|" + std::to_string(meta.optimizer_step) + "|" + meta.config_toml,
                                "write_checkpoint");
  std::vector<int64_t> mine;
  for (size_t i = 0; i < plans.size(); ++i)
    for (size_t k : plans[i].shards)
      for (const auto& r : box_flat_runs(plans[i].shape, shards[k].box))
        mine.insert(mine.end(), {static_cast<int64_t>(i), r.first, r.second, g.rank()});
  const std::vector<int64_t> rows = g.gather(mine);
  g.agree([&] {
    if (g.rank() == 0) check_tiling(plans, rows);
  });
  return plans;
}

// Step 2, collective over the group: room on disk — every writer's file-size limit and (rank 0)
// the free space of the directory — before any write.
void check_room(const Group& g, const Target& t) {
  g.agree([&] {
    rlimit rl{};
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && static_cast<int64_t>(rl.rlim_cur) < t.estimate)
      SM_INPUT_ERROR("checkpoint " << t.final_path << " not written (the previous checkpoint is intact): it needs about "
                                   << t.estimate << " bytes, above the file-size limit (ulimit -f) of "
                                   << rl.rlim_cur << " bytes (" << where_am_i() << ")");
    if (g.rank() != 0) return;
    std::remove(t.tmp.c_str());  // a stale .tmp of a crashed run would count as used space
    struct statvfs sv {};
    if (statvfs(t.dir.c_str(), &sv) != 0)
      SM_INPUT_ERROR("checkpoint " << t.final_path << " not written: cannot access directory " << t.dir << " ("
                                   << std::strerror(errno) << ")");
    const double avail = static_cast<double>(sv.f_bavail) * static_cast<double>(sv.f_frsize);
    if (avail < static_cast<double>(t.estimate))
      SM_INPUT_ERROR("checkpoint " << t.final_path << " not written (the previous checkpoint is intact): disk full, it needs about "
                                   << t.estimate << " bytes, " << static_cast<int64_t>(avail) << " are free in " << t.dir);
  });
}

// Step 3a, collective over the group: creates <final>.tmp with every group and dataset. MPI-IO:
// reserves the whole estimated extent before HDF5 allocates anything but the superblock and the
// metadata block, so the metadata written when the file is closed (also on the error path) lands
// in reserved space; then tops up to the real extent once known.
void create_file(const Group& g, const Target& t, const std::vector<TensorPlan>& plans, H5File& f) {
  g.agree([&] {
    H5Handle fapl = file_access(g, static_cast<hsize_t>(t.meta_block), t.estimate);
    f = H5File::create(t.tmp, fapl.get());
  });
  if (g.comm)
    g.agree([&] {
      if (g.rank() == 0) reserve_space(t.tmp, t.estimate);
    });
  g.agree([&] {
    for (const char* grp : {"params", "buffers", "optim", "meta"}) f.require_group(grp);
    for (const TensorPlan& p : plans) create_dataset(f, p);
  });
  if (g.comm)
    g.agree([&] {
      hsize_t extent = 0;  // max(EOF, EOA): every dataset is allocated by now
      SM_H5_CHECK(H5Fget_filesize(f.file_id(), &extent));
      if (g.rank() == 0 && static_cast<int64_t>(extent) + 65536 > t.estimate)
        reserve_space(t.tmp, static_cast<int64_t>(extent) + 65536);
    });
}

// Rank 0: the crc32 of each whole tensor from the rows {tensor, start, len, crc} of every
// rank's merged runs, combined in flat order.
std::vector<int64_t> combine_crcs(const std::vector<TensorPlan>& plans, const std::vector<int64_t>& all) {
  const size_t n = plans.size();
  std::vector<int64_t> crcs(n, 0);
  std::vector<std::vector<std::array<int64_t, 3>>> runs(n);
  for (size_t k = 0; k + 4 <= all.size(); k += 4)
    runs[static_cast<size_t>(all[k])].push_back({all[k + 1], all[k + 2], all[k + 3]});
  for (size_t i = 0; i < n; ++i) {
    std::sort(runs[i].begin(), runs[i].end());
    uint32_t c = 0;
    for (const auto& r : runs[i])
      c = crc32_concat(c, static_cast<uint32_t>(r[2]), r[1] * static_cast<int64_t>(dtype_size(plans[i].dtype)));
    crcs[i] = c;
  }
  return crcs;
}

// This rank's part of tensor i staged, its crc rows {tensor, start, len, crc} (one per merged
// flat run) appended to `crc_rows`. Local.
Staged stage_with_crcs(size_t i, const TensorPlan& t, const std::vector<TensorShard>& shards,
                       std::vector<int64_t>& crc_rows) {
  Staged st = stage(t, shards);
  const size_t es = dtype_size(t.dtype);
  const char* p = st.count ? static_cast<const char*>(st.buf.raw()) : nullptr;
  for (const Run& r : st.runs) {
    crc_rows.insert(crc_rows.end(), {static_cast<int64_t>(i), r.start, r.len,
                                     static_cast<int64_t>(crc32_bytes(p, static_cast<size_t>(r.len) * es))});
    p += r.len * es;
  }
  return st;
}

// Step 3b, collective over the group: every tensor staged and written; returns every tensor's
// crc32 on every rank. Collective I/O: one collective H5Dwrite per tensor, each agreed on.
// Independent I/O (a background write): every rank writes its own boxes with no collective at
// all (the datasets are contiguous and allocated at creation, so raw-data writes change no
// metadata), and the outcome of all of them is agreed once.
std::vector<int64_t> write_tensors(const Group& g, const H5File& f, const std::vector<TensorPlan>& plans,
                                   const std::vector<TensorShard>& shards, bool independent) {
  std::vector<int64_t> crc_rows;  // {tensor, start, len, crc} per merged run of this rank
  if (independent && g.comm) {
    // Local writes, then one agreement under Comm's watchdog (no deadline on the writes: they
    // wait for no other rank).
    agree_on_error(g.comm, [&] {
      for (size_t i = 0; i < plans.size(); ++i) {
        write_tensor(g, f, plans[i], shards, stage_with_crcs(i, plans[i], shards, crc_rows), true);
        hdf5_yield();  // written in the background: batch reads and metrics rows go first
      }
    });
  } else {
    for (size_t i = 0; i < plans.size(); ++i) {
      Staged st;
      g.agree([&] { st = stage_with_crcs(i, plans[i], shards, crc_rows); });
      g.agree([&] { write_tensor(g, f, plans[i], shards, st, false); });
      hdf5_yield();
    }
  }
  const std::vector<int64_t> all = g.gather(crc_rows);
  std::vector<int64_t> crcs(plans.size(), 0);
  if (g.rank() == 0) crcs = combine_crcs(plans, all);
  g.bcast(crcs);
  return crcs;
}

// Local (collective HDF5 metadata calls under MPI-IO): the crc32 attributes, the root
// attributes and /meta, flushed before the completion mark, which is flushed last.
void write_attributes(H5File& f, const std::vector<TensorPlan>& plans, const std::vector<int64_t>& crcs,
                      const CheckpointMeta& meta) {
  for (size_t i = 0; i < plans.size(); ++i) f.set_attr_on(plans[i].path, "crc32", crcs[i]);
  std::string dtype = "f32";
  for (const TensorPlan& t : plans)
    if (t.path.rfind("params/", 0) == 0) {
      dtype = dtype_name(t.dtype);
      break;
    }
  f.set_attr("model", meta.model);
  f.set_attr("format", std::string("spikemesh-state-dict"));
  f.set_attr("format_version", static_cast<int64_t>(kStateDictFormatVersion));
  f.set_attr("dtype", dtype);
  int64_t nstate = 0;
  for (const TensorPlan& t : plans) nstate += t.path.rfind("optim/", 0) == 0;
  ckpt::write_meta(f.open_group("meta"), meta, nstate);
  f.flush();  // data and metadata on disk (MPI_File_sync) ...
  f.open_group("meta").set_attr("complete", int64_t(1));  // ... before the completion mark
  f.flush();
}

// Step 3c, collective over the group: attributes, close, then (rank 0) the .tmp on disk (alone:
// the in-memory image written with POSIX calls), renamed, directory synced.
void finish_file(const Group& g, const Target& t, const std::vector<TensorPlan>& plans,
                 const std::vector<int64_t>& crcs, const CheckpointMeta& meta, H5File& f) {
  std::vector<char> image;  // alone: the file built in memory
  g.agree([&] {
    write_attributes(f, plans, crcs, meta);
    if (!g.comm) image = file_image(f, t.tmp);
  });
  g.agree([&] { f.close(); });  // collective; fails if HDF5 could not flush
  hdf5_yield();
  g.agree([&] {
    if (g.rank() != 0) return;
    if (take_io_fault(IoSite::CheckpointWrite))
      SM_INPUT_ERROR(t.tmp << ": write failed (" << std::strerror(EIO) << ", injected for a test)");
    if (g.comm)
      ckpt::fsync_path(t.tmp, false);
    else
      ckpt::write_file_synced(t.tmp, image.data(), image.size());
    if (std::rename(t.tmp.c_str(), t.final_path.c_str()) != 0)
      SM_INPUT_ERROR(t.final_path << ": rename failed (" << std::strerror(errno) << ")");
    ckpt::fsync_path(t.dir, true);
  });
}

}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "/ckpt_%09lld.h5", static_cast<long long>(step));
  return dir + name;
}

// Collective over `group` (nullptr: alone); see io/checkpoint.h.
std::string write_checkpoint(Comm* group, const std::string& dir, const std::vector<TensorShard>& shards,
                             const CheckpointMeta& meta, int keep, bool independent_io, const ConcurrentWindow* window) {
  const Group g{group};
  // 1. Arguments: locally sane, identical tensor lists everywhere, boxes tiling every tensor.
  const std::vector<TensorPlan> plans = check_shard_lists(g, shards, dir, meta, keep);
  const Target t = target_of(dir, meta, plans);
  // 2. Room on disk: free space (rank 0) and every writer's file-size limit, before any write.
  check_room(g, t);
  // 3. Write <final>.tmp and rename it. Any failure: close, remove, same error everywhere.
  try {
    H5File f;
    create_file(g, t, plans, f);
    if (window) window->open();
    hdf5_yield();
    std::vector<int64_t> crcs;
    try {
      crcs = write_tensors(g, f, plans, shards, independent_io);
    } catch (...) {
      if (window) window->close();  // the file's close on the way out is collective too
      throw;
    }
    if (window) window->close();
    finish_file(g, t, plans, crcs, meta, f);
  } catch (const Error& e) {
    // Every rank is here (errors were agreed); H5File destructors have closed the file.
    if (g.rank() == 0) std::remove(t.tmp.c_str());
    g.barrier();
    const std::string what = e.what();
    if (what.rfind("checkpoint " + t.final_path + " not written", 0) == 0) throw Error(ErrorKind::Input, what);
    SM_INPUT_ERROR("checkpoint " << t.final_path << " not written (the previous checkpoint is intact): " << what);
  }
  // 4. Only now: prune older complete checkpoints (damaged ones are left alone).
  hdf5_yield();
  if (g.rank() == 0) ckpt::prune_checkpoints(dir, t.final_path, keep);
  g.barrier();
  return t.final_path;
}

}  // namespace sm
