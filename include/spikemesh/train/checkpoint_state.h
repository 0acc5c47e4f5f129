// checkpoint_state.h — a Model and its Optimizer as checkpoint tensors (io/tensor_shard.h),
// and the one-process checkpoint save/load. The save/load run the trainer's own path: a
// one-rank Layout and the CheckpointManager (train/checkpointing.h) over the one
// writer/reader (io/checkpoint.h with group = nullptr: no MPI call). The tensor lists below
// are for tools and tests that write files by hand; runs use layout_checkpoint_shards.
// Order of every list: params (Model::params()), buffers (Model::buffers()), then every
// optimizer state tensor (Optimizer::state()) — the order of the single-rank checkpoint.
#pragma once
#include <string>
#include <vector>

#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/tensor_shard.h"

namespace sm {

class Model;
class Optimizer;
struct Buffer;

// The whole state of a model whose every rank holds its parameters whole (or its tp shard),
// and of its optimizer, as TensorShards. `holds` true: this rank holds each tensor's box (the
// whole tensor; a tensor-parallel parameter and its optimizer state: its tp box,
// param_local_box), data viewing the model's and optimizer's own tensors, so a load writes
// into them. false: every box empty (a replica that does not write). Plain DP saves with
// holds = (dp rank == 0) and loads with holds = true. The list of a one-rank Layout
// (layout_checkpoint_shards); `opt` must be the model's optimizer.
std::vector<TensorShard> replicated_state_shards(Model& model, Optimizer* opt, bool holds);

// Only the buffers (BN running stats, num_batches_tracked) as whole-tensor TensorShards: they
// are replicated under every layout (a hand-built sharded list adds them to
// append_flat_shards' params: holds = dp rank 0 when saving, every rank when loading).
// Under tensor parallelism a channel-split buffer is its tp shard (every tp rank holds one);
// whole buffers are written by tp rank 0 alone (saving) and read by every rank.
// `local` (pipelines): only these buffers are held here; the model's others are listed empty.
std::vector<TensorShard> buffer_shards(Model& model, bool holds, int tp_rank = 0, bool saving = true,
                                       const std::vector<Buffer*>* local = nullptr);

// The meta a save of (model, opt) records: model and optimizer names, optimizer step count.
// Callers fill state / precision / mesh / config on top.
CheckpointMeta checkpoint_meta_of(const Model& model, const Optimizer& opt);

// One process, the whole model and optimizer, as a one-rank run saves it (mesh
// "dp=1 tp=1 pp=1"). Returns the path.
std::string save_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const TrainState& st,
                            const std::string& config_toml, const std::string& precision, int keep);
// One process: load_checkpoint(nullptr, ...) into the model and optimizer (every check of the
// reader: model name, tensors and shapes, optimizer state, checksums, before anything is
// written), then the optimizer's step count from the file.
CheckpointInfo load_checkpoint(const std::string& path, Model& model, Optimizer& opt);

}  // namespace sm
