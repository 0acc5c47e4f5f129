// checkpoint_tools.h — the workflow after training (`spikemesh ckpt verify | export`): the
// model and optimizer a checkpoint was written from, rebuilt from the resolved configuration
// it records; a verification naming every problem of a file; and the export of the model's
// parameters and buffers as a flat state-dict HDF5 file with PyTorch/SpikingJelly names
// (scripts/ckpt_to_torch.py turns it into a .pt that `model.load_state_dict` takes).
// All local (one process, no MPI call): a checkpoint holds every tensor in its full logical
// shape whatever layout wrote it (dp, ZeRO, FSDP, tp, pp), and the one reader
// (io/checkpoint.h read_checkpoint) gathers it whole into the rebuilt one-rank model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "spikemesh/io/checkpoint.h"
#include "spikemesh/models/model.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

struct CheckpointModel {
  CheckpointInfo info;
  std::unique_ptr<Model> model;          // finalised on the CPU in the checkpoint's master dtype
  std::unique_ptr<Optimizer> optimizer;  // its state tensors are the file's optim/ tensors
  int64_t T = 0;  // time steps of the run: its --T, else its dataset's (events), else the spec's
};

// Rebuilds the model and optimizer of checkpoint `ci` from ci.config_toml (the keys model,
// model-spec, var, T, dropout, optimizer, lr, weight-decay, momentum, nesterov, precision,
// data; the others do not shape a tensor). Input error naming the file when it cannot.
CheckpointModel checkpoint_model(const CheckpointInfo& ci);

// scan_checkpoint against the rebuilt model and optimizer (every tensor present in full
// shape, none extra); when that finds nothing, the load a resume makes (load_model_checkpoint into
// the rebuilt model: non-finite values included), whose error is then the problem. Never
// throws for a damaged, truncated or foreign file.
CheckpointScan verify_checkpoint(const std::string& path);

// The rebuilt model and optimizer of checkpoint `path`, loaded whole (every check of a resume).
// Input error naming the file otherwise.
CheckpointModel load_checkpoint_model(const std::string& path);

// Writes the loaded `cm` to `out` (as out.tmp, then renamed): one root dataset per parameter and
// buffer, named by its state-dict name, in the stored dtype (buffers such as num_batches_tracked:
// int64), root attributes model, T, step, epoch, precision, source and format
// "spikemesh-flat-state-dict". Input error naming `out` when it cannot be written.
void export_flat_h5(const CheckpointModel& cm, const std::string& out, const std::string& source);

}  // namespace sm
