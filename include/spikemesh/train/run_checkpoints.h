// run_checkpoints.h — a run's checkpoints (docs/architecture.md §8): the tensor list of any
// layout (the layout's placements × the optimizer's state tensors, as N-d boxes of the full
// logical tensors: parallel/placement.h), and saving/resuming a run through the ONE collective
// writer and reader of io/checkpoint.h (write_checkpoint / read_checkpoint) over the layout's
// checkpoint group (CheckpointManager). Knows no mode: a checkpoint written
// under any layout loads under any other, because both sides speak boxes of logical tensors.
// Invariants: every rank lists every logical tensor (params, buffers, optimizer states) in
// the same order (model order); over the writing ranks the boxes of each tensor tile it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/tensor_shard.h"

namespace sm {

class Comm;
class Layout;
class LossScaler;
class Model;
class Optimizer;
struct Buffer;

// The checkpoint tensors of this rank (paths of the single-rank format, file dtype = the
// model's): saving lists what this rank writes, loading what it must read; the data are views
// of this rank's storage (a load fills them in place). Local (no communication).
std::vector<TensorShard> layout_checkpoint_shards(Layout& layout, Optimizer& opt, bool saving);

// Only the buffers (BN running stats, num_batches_tracked) as whole-tensor TensorShards: they
// are replicated under every layout (a hand-built sharded list adds them to
// append_flat_shards' params: holds = dp rank 0 when saving, every rank when loading).
// Under tensor parallelism a channel-split buffer is its tp shard (every tp rank holds one;
// parallel/placement.h buffer_held_boxes); whole buffers are written by tp rank 0 alone
// (saving) and read by every rank.
// `local` (pipelines): only these buffers are held here; the model's others are listed empty.
// Local.
std::vector<TensorShard> buffer_shards(Model& model, bool holds, int tp_rank = 0, bool saving = true,
                                       const std::vector<Buffer*>* local = nullptr);

// The meta a save of (model, opt) records: model and optimizer names, optimizer step count.
// Callers fill state / precision / mesh / config on top.
CheckpointMeta checkpoint_meta_of(const Model& model, const Optimizer& opt);

// A checkpoint's content taken at a step boundary: this rank's shards and the meta. With
// copies (CheckpointManager::snapshot) it stays valid while training changes the originals.
struct CheckpointSnapshot {
  std::vector<TensorShard> shards;
  CheckpointMeta meta;
};

// Saves and resumes one run's checkpoints (the trainer's; model_checkpoint.h for one process).
class CheckpointManager {
 public:
  // `config_toml`, `precision` and layout.describe() are recorded in /meta. The objects
  // must outlive the manager.
  CheckpointManager(Layout& layout, Optimizer& opt, std::string dir, std::string config_toml,
                    std::string precision, int keep);
  // Newest complete checkpoint of the run directory ("" when none). Collective over the
  // layout's checkpoint group.
  std::string latest();
  // Writes checkpoint_path(dir, st.step) (the scaler's state into `st` first when enabled);
  // returns its path. Collective over the layout's checkpoint group.
  std::string save(TrainState& st, const LossScaler& scaler);
  // The checkpoint of `st` as it is now (the scaler's state into `st` first when enabled):
  // with `copies`, this rank's shards copied into host memory (from a device: complete on
  // return); without, views of the live storage (the writer stages them tensor by tensor).
  // `staging` (copies): host tensors kept from the previous snapshot, reused where they fit
  // (and refilled here), so that a run's checkpoints copy into memory already mapped. Local.
  CheckpointSnapshot snapshot(TrainState& st, const LossScaler& scaler, bool copies = true,
                              std::vector<Tensor>* staging = nullptr);
  // Writes a snapshot as save() does. Collective over `group`: the layout's checkpoint group
  // or a duplicate of it (the same ranks in the same order). `independent_io`: io/checkpoint.h.
  std::string write(Comm* group, const CheckpointSnapshot& snap, bool independent_io = false,
                    const ConcurrentWindow* window = nullptr);
  // HDF5 work of latest/load/load_weights runs through hdf5_call (io/hdf5_thread.h), the rest on
  // the caller's thread. Loads `path` into the layout's storage and the optimizer, rebuilds replicas, sets the
  // optimizer's step count and the scaler; returns the file's info. Collective over the
  // layout's checkpoint group (Input errors on every rank with one message; a tensor holding
  // NaN/Inf is one unless allow_nonfinite(true)). Then, when both this run's configuration and
  // the file's are known, ONE warning on the layout's root naming every setting that changes
  // the trajectory and differs (resume_config_differences).
  CheckpointInfo load(const std::string& path, LossScaler& scaler);
  // train --init: loads only the model's parameters and buffers of `path` (every check of load
  // on them; the file's optimizer state, step and data cursor are ignored: the optimizer stays
  // fresh), then rebuilds replicas. Collective over the layout's checkpoint group.
  CheckpointInfo load_weights(const std::string& path);
  // train --allow-nonfinite-checkpoint: load a checkpoint holding NaN/Inf with a warning.
  void allow_nonfinite(bool allow) { allow_nonfinite_ = allow; }

 private:
  CheckpointMeta meta() const;
  Layout& layout_;
  Optimizer& opt_;
  std::string dir_, config_toml_, precision_;
  int keep_;
  bool allow_nonfinite_ = false;
};

// The settings that change a run's trajectory and differ between a checkpoint's resolved
// configuration (`ckpt_toml`, mesh text `ckpt_mesh`) and this run's (`now_toml`, `now_mesh`),
// one "key: checkpoint X, now Y" each, in key order; the global batch (from batch-size,
// grad-accum, global-batch-size and dp: parallel/dist_run.h checkpoint_global_batch) as
// "global batch: checkpoint X, now Y". Keys that legitimately differ on resume are skipped
// (see the .cpp); keys missing on either side (older files) too. Empty when either text is
// empty or not TOML. `ckpt_toml` must come from a validated file (read_checkpoint_info: toml++
// aborts on some malformed headers instead of throwing). Local.
std::vector<std::string> resume_config_differences(const std::string& ckpt_toml, const std::string& ckpt_mesh,
                                                   const std::string& now_toml, const std::string& now_mesh);

}  // namespace sm
