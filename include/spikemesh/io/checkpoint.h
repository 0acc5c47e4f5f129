// checkpoint.h — training checkpoints (docs/architecture.md §8), one HDF5 file per step:
//   /params/<name>, /buffers/<name>   the model state dict, full logical shapes
//   /optim/<param name>/<state>       optimizer state (exp_avg, exp_avg_sq, momentum_buffer)
//   /meta  attributes: step, epoch, batch_in_epoch, seed, optimizer_step, optimizer, model,
//          precision, mesh, config (resolved TOML), rng, num_optim_states, format_version,
//          complete (written last)
//   root attributes model, format = "spikemesh-state-dict", format_version, dtype;
//   every dataset carries a crc32 attribute (zlib crc32 of the full tensor's row-major bytes),
//   verified on load.
// ONE writer and ONE reader. Every rank of `group` passes the boxes of each logical tensor
// it holds (io/tensor_shard.h); the file is written in full logical shape with one collective
// hyperslab write per dataset (parallel HDF5, MPI-IO over group->mpi_comm()), so a checkpoint
// written under any layout (dp, ZeRO, FSDP, tp, one rank) loads under any other (resharding
// = box intersection), and its datasets and crc32 attributes are byte-for-byte those of a
// one-process save of the same state. `group` == nullptr: this process alone, and NO MPI call
// is made at all (serial HDF5 drivers), so single-process code runs without MPI_Init.
// Errors: every error of a function taking a group (bad file, model mismatch, full disk,
// inconsistent shard lists) is raised on EVERY rank of the group with the same kind and
// message (the first failing rank's), never a hang; Input errors stay Input errors, so the
// front end prints rank 0's one message and every rank exits non-zero.
// Atomicity: written as <name>.tmp, flushed and fsynced, renamed, directory fsynced. Older
// complete checkpoints are deleted (beyond `keep`) only after the new one is in place, so a
// crash or a full disk at any moment leaves the previous checkpoint loadable.
// Threads: none of these functions hands its HDF5 calls to the HDF5 thread (io/hdf5_thread.h);
// a caller with other threads calling HDF5 runs them there (the trainer does: hdf5_call, or
// hdf5_background for a checkpoint written while training continues — write_checkpoint
// calls hdf5_yield() after each tensor, so batches are read meanwhile).
// Names: io/ writes and reads FILES of tensors (write_checkpoint / read_checkpoint); io/ knows
// tensors, not models. A run's save/resume (CheckpointManager) is train/run_checkpoints.h; one
// Model and Optimizer in one process (save_model_checkpoint / load_model_checkpoint),
// train/model_checkpoint.h.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/io/tensor_shard.h"

namespace sm {

class Comm;

struct TrainState {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epoch of the next batch
  int64_t batch_in_epoch = 0;  // data cursor: index of the next batch within the epoch
  int64_t seed = 0;
  // fp16 dynamic loss scaling (core/precision.h), 0 / 0 / 0 when off: the scale, the finite
  // steps in a row towards its growth, and the steps skipped so far (/meta attributes).
  double loss_scale = 0;
  int64_t loss_scale_finite_in_row = 0, skipped_steps = 0;
};

struct CheckpointInfo {
  std::string path, model, precision, mesh, config_toml;
  std::string optimizer;  // "" for files that predate the attribute
  TrainState state;
  int64_t optimizer_step = 0;
  int64_t format_version = 0;
  int64_t num_params = 0, num_optim_states = 0;
};

// What /meta records besides the tensors (train/run_checkpoints.h: checkpoint_meta_of).
struct CheckpointMeta {
  TrainState state;
  std::string model;            // model name (checked on load)
  std::string optimizer;        // optimizer name ("adam", ...; checked on load when non-empty)
  int64_t optimizer_step = 0;   // Optimizer::step_count()
  std::string precision;        // "fp32" | "fp64" | ...
  std::string mesh;             // e.g. "dp=4 tp=1 pp=1 zero2 sync-bn" (Layout::describe), informational
  std::string config_toml;      // the resolved configuration
};

constexpr int kCheckpointFormatVersion = 1;

std::string checkpoint_path(const std::string& dir, int64_t step);  // <dir>/ckpt_<step, 9 digits>.h5

// Collective over `group` (nullptr: alone). Writes checkpoint_path(dir, meta.state.step) from
// every rank's shards and returns that path on every rank. Checked first (Internal error on
// every rank otherwise): every rank lists every tensor path at least once, the paths in the
// same order of first appearance, with the same shape and dtype, and the same meta and keep;
// a rank may list a path several times (several boxes); the union of all ranks' boxes tiles
// each tensor exactly (disjoint, covering). Paths follow the format above. Steps: free-space
// and file-size-limit checks; HDF5 create of <final>.tmp (MPI-IO; alone: in memory, then one
// POSIX write); per dataset one collective H5Dwrite in which each rank selects the union of
// its boxes (memory: its shards of that path, reordered to file order when needed); crc32 of
// each dataset combined (zlib crc32_combine) from the ranks' crcs of contiguous flat runs,
// no read-back; flush, close, fsync; rename, directory fsync; prune complete checkpoints
// beyond `keep`; barrier. On any failure (full disk included) the .tmp is removed, the
// previous checkpoints are untouched and every rank throws an Input error
// "checkpoint <final> not written (the previous checkpoint is intact): ...".
// Full disk: before HDF5 writes any raw data, rank 0 checks the free space, every rank its
// file-size limit (ulimit -f), and rank 0 reserves the file's extent (fallocate), so a full
// disk fails cleanly up front. (HDF5 1.10 cannot close a file whose writes failed and then
// crashes at MPI_Finalize; on a file system without fallocate, a disk that fills up between
// the check and the writes still reaches that path — the previous checkpoint stays intact.)
// Files are contiguous datasets with the metadata in one block at the start.
// `independent_io` (a write in the background, where every synchronisation of the ranks costs a
// wait on a busy thread): the tensors' data are written with independent MPI-IO, each rank its
// own boxes with no collective between them, and their outcome agreed once; the file is the same.
// `window` (a background write): its `open` is called once the file and its datasets exist, its
// `close` before the attributes and the file's close. Between them the write makes no MPI call
// that blocks inside the MPI library (its data are independent writes, its agreements poll), so
// the thread that posted it may communicate meanwhile; outside them HDF5's collective calls wait
// inside MPI, and another thread's MPI progress must not complete those waits (Open MPI keeps a
// wait's synchronisation object on the waiting thread's stack), so the poster holds still then
// (train/checkpoint_writer.h).
struct ConcurrentWindow {
  std::function<void()> open, close;
};
std::string write_checkpoint(Comm* group, const std::string& dir, const std::vector<TensorShard>& shards,
                             const CheckpointMeta& meta, int keep, bool independent_io = false,
                             const ConcurrentWindow* window = nullptr);

// Collective over `group` (nullptr: alone). Fills each shard's data with the elements of its
// box of the logical tensor at shard.path (boxes may overlap, within and across ranks).
// Before anything is written into `shards` the file is checked against them (rank 0): a
// complete checkpoint of a format this build reads; expect.model equal to the file's model;
// every requested tensor present with the requested shape and every params/ and buffers/
// dataset of the file requested (else an Input error naming the file, the first mismatching
// tensor, both model names, and for optimizer state both optimizer names); the number of
// optim/ datasets equal to the number of optim/ paths requested. Checksums: the crc32 of a
// tensor whose requested boxes (over all ranks) tile it is combined from the ranks' reads;
// any other tensor is read whole and checked by one rank. A mismatch names the dataset.
// Every /meta field is validated (read_checkpoint_info); every tensor must carry its crc32
// attribute; after the checksums, every float element read (params, buffers, optimizer
// state) must be finite: else an Input error naming the file, the tensor and the first
// non-finite element's index — unless `opts.allow_nonfinite`, which loads it with one warning
// (group rank 0) naming each such tensor. A failure of HDF5 while reading the file (truncated,
// damaged) is an Input error naming the file, so it reaches the user as one message.
// Returns the file's info (state, optimizer_step, ...) on every rank.
struct CheckpointReadOptions {
  bool allow_nonfinite = false;  // train --allow-nonfinite-checkpoint
  // train --init: only params/ and buffers/ are requested; the file's optim/ tensors (any
  // optimizer's, or none) are neither counted nor read.
  bool weights_only = false;
};
CheckpointInfo read_checkpoint(Comm* group, const std::string& path, std::vector<TensorShard>& shards,
                               const CheckpointMeta& expect, const CheckpointReadOptions& opts = {});

// Reads /meta of a complete checkpoint and validates every field (step, epoch,
// batch_in_epoch, optimizer_step, seed, counts >= 0; a known format_version and precision; a
// finite loss scale > 0; a parseable config; the optimizer state count of the file): an Input
// error naming the file and the field otherwise (also for a truncated or damaged file). Local.
CheckpointInfo read_checkpoint_info(const std::string& path);
// Collective over `group` (nullptr: alone): rank 0 reads /meta and broadcasts it; an error
// reaches every rank.
CheckpointInfo read_checkpoint_info(Comm* group, const std::string& path);

// Collective over `group` (nullptr: alone): the newest complete checkpoint in `dir` whose
// checksums verify, found by rank 0 and broadcast; "" when there is none. Incomplete or
// damaged files are skipped with a warning naming them.
std::string find_latest_checkpoint(Comm* group, const std::string& dir);

// Reads every dataset and compares it with its crc32 attribute (Input error naming it, also
// when the attribute is missing). Local.
void verify_checkpoint_checksums(const std::string& path);

// What `spikemesh ckpt verify` finds in one file (scan_checkpoint).
struct CheckpointScan {
  CheckpointInfo info;                // read_checkpoint_info's, when info_ok
  bool info_ok = false;
  int64_t tensors = 0, bytes = 0;     // datasets of the file and their data bytes
  std::vector<std::string> problems;  // one line each naming the file and the culprit; empty: fine
};
// Local; throws nothing for a damaged file (each damage is a problem). Checks, problem by
// problem rather than stopping at the first: the file opens as HDF5; /meta is complete, of a
// format this build reads, with every field valid (read_checkpoint_info); every dataset has a
// crc32 attribute equal to the crc32 of its data; and when `expected` is given (the shard list
// of the model and optimizer the file should hold; paths and shapes are used), every expected
// tensor is present in its full shape and the file holds no tensor beyond them.
CheckpointScan scan_checkpoint(const std::string& path, const std::vector<TensorShard>* expected);

}  // namespace sm
