// checkpoint_internal.h — private to src/io/checkpoint_*.cpp: the group a checkpoint is
// written/read by (nullptr = alone), the per-tensor plan of a shard list and its checks,
// flat runs of boxes, HDF5 selections, checksums, synced file writes, directory listing and
// pruning, and the /meta attributes (so the writer and the reader agree on one format).
// Invariant: functions documented "collective" are called by every rank of the group in the
// same order; everything else is local and makes no MPI call.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "spikemesh/io/crc32.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/blocking_guard.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"

namespace sm {
namespace ckpt {

// The ranks that write/read one file together; comm == nullptr: this process alone (every
// operation is then local and makes no MPI call).
struct Group {
  Comm* comm = nullptr;
  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
  // Collective: `local` on every rank, then its errors agreed (comm/agree.h agree_on_error);
  // under guarded_collective (comm/blocking_guard.h): `local` may be collective HDF5 I/O, which
  // blocks outside Comm's watchdog, so an arrival check and the --comm-timeout deadline bound it.
  void agree(const std::function<void()>& local) const {
    if (!comm) return agree_on_error(nullptr, local);
    guarded_collective(*comm, "a collective checkpoint file operation", [&] { agree_on_error(comm, local); });
  }
  // Collective: rank 0 gets every rank's rows concatenated in rank order, the others nothing.
  std::vector<int64_t> gather(const std::vector<int64_t>& mine) const {
    return comm ? gather_i64s(*comm, mine, 0) : mine;
  }
  // Collective: rank 0's value everywhere.
  void bcast(std::vector<int64_t>& v) const {
    if (comm) broadcast_i64s(*comm, v, 0);
  }
  void bcast(std::string& s) const {
    if (comm) s = broadcast_string(*comm, s, 0);
  }
  void barrier() const {
    if (comm) comm->barrier();
  }
};

// ---- shard lists ------------------------------------------------------------------------------

bool is_file_dtype(DType d);
bool is_float(DType d);

// One logical tensor of a shard list: its path, shape and file dtype, and the indices of this
// rank's shards of it (listed order).
struct TensorPlan {
  std::string path;
  Shape shape;
  DType dtype = DType::F32;
  std::vector<size_t> shards;
};
// Local. Checks every shard (path relative and not under meta/, file dtype, shape, box inside
// the shape with the shape's rank, data of box.numel() elements, and when `saving` a data
// dtype the file dtype can take; several shards of one path agree on shape and dtype;
// Internal errors naming the tensor) and groups the shards by path in order of first
// appearance.
std::vector<TensorPlan> plan_tensors(const std::vector<TensorShard>& shards, bool saving);
// Collective: Internal error on every rank unless every rank has the same tensor list (paths
// in order, shapes, dtypes) and the same `settings` text. `what` names the operation.
void require_same_everywhere(const Group& g, const std::vector<TensorPlan>& plans, const std::string& settings,
                             const char* what);

// A contiguous range [start, start + len) of a tensor's row-major flattening.
struct Run {
  int64_t start = 0, len = 0;
};
// Sorted, disjoint, merged flat runs covering the union of `boxes` (overlaps allowed).
std::vector<Run> union_runs(const Shape& shape, const std::vector<const Box*>& boxes);

// ---- HDF5 -------------------------------------------------------------------------------------

H5Handle file_space(const Shape& shape);  // simple dataspace of shape (scalar for {})
H5Handle memory_space(int64_t count);     // 1-d [count]; none selected when count == 0
// Selects the union of the non-empty `boxes` in `space` (a dataspace of `shape`); the
// selection's iteration order is row-major over the whole tensor, whatever the box order.
void select_boxes(hid_t space, const Shape& shape, const std::vector<const Box*>& boxes);
// A dataset-transfer property list: collective (or `independent`) MPI-IO for a group, default alone.
H5Handle transfer_plist(const Group& g, bool independent = false);

// ---- checksums, files, /meta ------------------------------------------------------------------

// crc32_bytes / crc32_concat: io/crc32.h.
uint32_t crc_of(const Tensor& t);  // of a CPU tensor's bytes

// Visits every dataset below `g` (recursively), with its path relative to g.
void for_each_dataset(const H5Group& g, const std::string& prefix,
                      const std::function<void(const H5Group&, const std::string&, const std::string&)>& f);

// Whole content of `path` written and fsynced with POSIX calls; failures are Input errors naming it.
void write_file_synced(const std::string& path, const char* data, size_t n);
void fsync_path(const std::string& path, bool directory);

// (step, path) of every ckpt_<9 digits>.h5 in dir, oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);
// Deletes the oldest complete checkpoints of `dir` so that `keep` remain counting `newest`
// (which is never deleted); damaged or incomplete files are left alone.
void prune_checkpoints(const std::string& dir, const std::string& newest, int keep);

// Every /meta attribute except "complete" (written last by the caller).
void write_meta(const H5Group& meta, const CheckpointMeta& m, int64_t num_optim_states);

// crc32 attribute of dataset `name` below g; -1 when absent.
int64_t stored_crc(const H5Group& g, const std::string& name);

// ---- reading a user's file (checkpoint_verify.cpp) --------------------------------------------

// The library's own words of a Library error ("HDF5 error in CALL (rank R on H, file:line):
// DETAIL" -> DETAIL); the whole message when it has another form.
std::string library_detail(const std::string& what);
// Runs `f`, which reads the checkpoint `path`; a Library (HDF5, MPI-IO) error becomes an Input
// error naming the file. Input and Internal errors pass unchanged. Local.
void reading(const std::string& path, const std::function<void()>& f);
// The crc32 attribute of dataset `name` below `g` (`rel`: its path in the file): an Input error
// naming the file and dataset when it is missing or not a 32-bit value.
uint32_t required_crc(const std::string& path, const H5Group& g, const std::string& name, const std::string& rel);

}  // namespace ckpt
}  // namespace sm
