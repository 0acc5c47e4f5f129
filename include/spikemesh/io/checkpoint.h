// checkpoint.h — training checkpoints (DESIGN §7), one HDF5 file per step:
//   /params/<name>, /buffers/<name>   the model state dict, full logical shapes
//   /optim/<param name>/<state>       optimizer state (exp_avg, exp_avg_sq, momentum_buffer)
//   /meta  attributes: step, epoch, batch_in_epoch, seed, optimizer_step, optimizer, model,
//          precision, mesh, config (resolved TOML), rng, num_optim_states, format_version,
//          complete (written last)
//   every dataset carries a crc32 attribute, verified on load.
// Atomicity: written as <name>.tmp, flushed and fsynced, renamed, directory fsynced. Older
// complete checkpoints are deleted (beyond --keep) only after the new one is in place, so
// a crash or a full disk at any moment leaves the previous checkpoint loadable.
//
// Two families of functions:
//  * single-rank (no communicator): the whole model and optimizer of this process.
//  * sharded (first argument an MPI_Comm, collective over it): every rank passes the part
//    of each logical tensor it holds (io/tensor_shard.h), the file is written with parallel
//    HDF5 (MPI-IO, collective hyperslab writes) in full logical shape, so a checkpoint
//    written under any layout (dp 4, ZeRO, FSDP, one rank) loads under any other, and its
//    datasets and crc32 attributes are byte-for-byte those of a single-rank save of the same
//    state. Every error of a collective function (bad file, model mismatch, full disk) is
//    raised on EVERY rank of the communicator with the same message (the first failing
//    rank's), never a hang; Input errors stay Input errors, so the front end prints rank 0's
//    one message and every rank exits non-zero.
// Locking: none of these functions takes hdf5_mutex(); callers that run a prefetch thread
// hold it around them (the trainer does). The prefetch thread never blocks on another rank
// (data/h5_dataset.h), so a rank holding the mutex inside a collective cannot deadlock.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/io/tensor_shard.h"

namespace sm {

class Model;
class Optimizer;

struct TrainState {
  int64_t step = 0;            // optimizer steps done
  int64_t epoch = 0;           // epoch of the next batch
  int64_t batch_in_epoch = 0;  // data cursor: index of the next batch within the epoch
  int64_t seed = 0;
  // fp16 dynamic loss scaling (core/cuda_amp.h), 0 / 0 / 0 when off: the scale, the finite
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

constexpr int kCheckpointFormatVersion = 1;

std::string checkpoint_path(const std::string& dir, int64_t step);  // <dir>/ckpt_<step, 9 digits>.h5
// Writes atomically and prunes to `keep` complete checkpoints; returns the final path.
std::string save_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const TrainState& st,
                            const std::string& config_toml, const std::string& precision, int keep);
// Reads /meta of a complete checkpoint (Input error naming the file otherwise).
CheckpointInfo read_checkpoint_info(const std::string& path);
// Reads every dataset and compares it with its crc32 attribute (Input error naming it).
void verify_checkpoint_checksums(const std::string& path);
// Verifies checksums, the model (name, parameter names and shapes) and loads everything.
CheckpointInfo load_checkpoint(const std::string& path, Model& model, Optimizer& opt);
// Newest complete checkpoint in `dir` whose checksums verify; "" when there is none. Incomplete or
// damaged files are skipped with a warning naming them.
std::string find_latest_checkpoint(const std::string& dir);

// ---- sharded (collective) ---------------------------------------------------------------

// What /meta records besides the tensors (the single-rank save fills it from Model/Optimizer).
struct CheckpointMeta {
  TrainState state;
  std::string model;            // model name (checked on load)
  std::string optimizer;        // optimizer name ("adam", ...; checked on load when non-empty)
  int64_t optimizer_step = 0;   // Optimizer::step_count()
  std::string precision;        // "fp32" | "fp64" | ...
  std::string mesh;             // e.g. "dp=4 tp=1 pp=1 zero=1", informational
  std::string config_toml;      // the resolved configuration
};

// Collective over `comm`. Writes checkpoint_path(dir, meta.state.step) from every rank's
// shards: all ranks must pass the same list of (path, shape, dtype) in the same order, the
// same meta and keep (checked; a mismatch is an Internal error on every rank), and ranges
// that are disjoint and cover each tensor exactly (checked likewise). Paths follow the
// single-rank format ("params/..", "buffers/..", "optim/<param>/<state>"). Steps: parallel
// HDF5 create of <final>.tmp, collective writes, collective crc32 (combined from each rank's
// ranges, no read-back), flush, close, fsync; barrier; rank 0 renames, fsyncs the directory,
// then prunes complete checkpoints beyond `keep`; barrier. Returns the final path on every
// rank. On any failure (full disk included) the .tmp is removed, the previous checkpoints are
// untouched, and every rank throws an Input error naming the file.
// Full disk: before HDF5 writes any raw data, rank 0 checks the free space, every rank its
// file-size limit (ulimit -f), and rank 0 reserves the file's extent (fallocate), so a full
// disk fails cleanly up front. (HDF5 1.10 cannot close a file whose writes failed and then
// crashes at MPI_Finalize; on a file system without fallocate, a disk that fills up between
// the check and the writes still reaches that path — the previous checkpoint stays intact.)
// Files are contiguous datasets with the metadata in one block at the start.
std::string save_checkpoint_sharded(MPI_Comm comm, const std::string& dir, const std::vector<TensorShard>& shards,
                                    const CheckpointMeta& meta, int keep);

// Collective over `comm`: rank 0 reads /meta (read_checkpoint_info) and broadcasts it; an
// error reaches every rank.
CheckpointInfo read_checkpoint_info(MPI_Comm comm, const std::string& path);

// Collective over `comm`. Fills each shard's data with elements [offset, offset + count) of
// the logical tensor at shard.path (independent ranges; overlaps allowed). Before anything is
// written into `shards` the file is checked against them: a complete checkpoint, meta.model
// equal to the file's model (and meta.optimizer to its optimizer when both are non-empty),
// every params/ and buffers/ dataset of the file requested and every requested tensor present
// with the requested shape (else: an Input error naming the file and the first mismatching
// tensor), the number of optim/ datasets equal to the number requested. Checksums: the crc32
// of each fully covered tensor is combined from the ranks' reads; a tensor the ranks' ranges
// do not tile is read whole and checked by one rank. A mismatch names the dataset.
// Returns the file's info (state, optimizer_step, ...) on every rank.
CheckpointInfo load_checkpoint_sharded(MPI_Comm comm, const std::string& path, std::vector<TensorShard>& shards,
                                       const CheckpointMeta& expect);

// Collective over `comm`: rank 0 runs find_latest_checkpoint(dir) and broadcasts the result.
std::string find_latest_checkpoint(MPI_Comm comm, const std::string& dir);

// The meta a single-rank save of (model, opt) would record; callers of the sharded save fill
// state/precision/mesh/config on top.
CheckpointMeta checkpoint_meta_of(const Model& model, const Optimizer& opt);

}  // namespace sm
