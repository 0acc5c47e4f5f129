// dist_run.h — small collective helpers a multi-rank run needs around the training loop:
// broadcasting model buffers and reading a checkpoint's global batch. The generic agreement
// helpers (errors, configuration, stop requests, strings, metric reductions) live in
// comm/agree.h, included here for the callers of this header.
// Every function is COLLECTIVE OVER THE COMM it is given (all ranks call it in the same
// order); none names MPI_COMM_WORLD.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/comm/agree.h"  // collective_check, check_same_text, broadcast_string, ... (moved there)
#include "spikemesh/comm/comm.h"

namespace sm {

class Model;

// Every buffer of `model` (BN running statistics, counters) of rank `root` copied to all
// ranks, in Model::buffers() order (DDP's broadcast_buffers).
void broadcast_buffers(Model& model, Comm& comm, int root);

// The global batch a checkpoint was trained with, from its resolved configuration and mesh
// text (CheckpointInfo::config_toml, ::mesh): --global-batch-size, or batch-size x grad-accum
// x the "dp=N" of the mesh. -1 when it cannot be told (an older or foreign file). Local.
int64_t checkpoint_global_batch(const std::string& config_toml, const std::string& mesh);

}  // namespace sm
