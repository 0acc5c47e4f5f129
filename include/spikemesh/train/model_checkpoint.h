// model_checkpoint.h — one Model and its Optimizer as a checkpoint, in one process: the
// tensor list of a replicated model (for tools and tests that write files by hand) and the
// one-process save/load. Both run the trainer's own path: a one-rank Layout and the
// CheckpointManager (train/run_checkpoints.h) over the one writer/reader (io/checkpoint.h
// write_checkpoint / read_checkpoint with group = nullptr: no MPI call).
// Order of every list: params (Model::params()), buffers (Model::buffers()), then every
// optimizer state tensor (Optimizer::state()) — the order of the single-rank checkpoint.
// Depends on train/run_checkpoints.h, never the reverse.
#pragma once
#include <string>
#include <vector>

#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/tensor_shard.h"
#include "spikemesh/train/run_checkpoints.h"  // buffer_shards, checkpoint_meta_of

namespace sm {

class Model;
class Optimizer;

// The whole state of a model whose every rank holds its parameters whole (or its tp shard),
// and of its optimizer, as TensorShards. `holds` true: this rank holds each tensor's box (the
// whole tensor; a tensor-parallel parameter and its optimizer state: its tp box,
// param_local_box), data viewing the model's and optimizer's own tensors, so a load writes
// into them. false: every box empty (a replica that does not write). Plain DP saves with
// holds = (dp rank == 0) and loads with holds = true. The list of a one-rank Layout
// (layout_checkpoint_shards); `opt` must be the model's optimizer.
std::vector<TensorShard> replicated_state_shards(Model& model, Optimizer* opt, bool holds);

// One process, the whole model and optimizer, as a one-rank run saves it (mesh
// "dp=1 tp=1 pp=1"): CheckpointManager::save of a one-rank Layout. Returns the path.
std::string save_model_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const TrainState& st,
                                  const std::string& config_toml, const std::string& precision, int keep);
// One process: read_checkpoint(nullptr, ...) into the model and optimizer (every check of the
// reader: model name, tensors and shapes, optimizer state, checksums, before anything is
// written), then the optimizer's step count from the file.
CheckpointInfo load_model_checkpoint(const std::string& path, Model& model, Optimizer& opt);

}  // namespace sm
