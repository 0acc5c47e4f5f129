// dist_run.h — small collective helpers a multi-rank run needs around the training loop:
// agreeing on errors (one message, every rank fails, nobody hangs), on the configuration, on
// a stop request, broadcasting strings and model buffers, and reducing metric vectors.
// Every function is COLLECTIVE OVER THE COMM it is given (all ranks call it in the same
// order); none names MPI_COMM_WORLD.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/comm/comm.h"

namespace sm {

class Model;

// Runs `f` on every rank of `comm`. When it throws sm::Error(Input) on any rank, every rank
// throws one Input error with the message of the lowest failing rank (prefixed "rank k: "
// when k != 0), so the front end prints it once (rank 0) and every rank exits non-zero.
// Other exceptions are rethrown on the failing rank only (the front end aborts the job).
void collective_check(Comm& comm, const std::function<void()>& f);

// Input error on every rank when the ranks hold different `text` (e.g. the resolved
// configuration): names the ranks that differ from rank 0 and `what`.
void check_same_text(Comm& comm, const std::string& text, const std::string& what);

// `s` of rank `root` on every rank.
std::string broadcast_string(Comm& comm, const std::string& s, int root);

// True on every rank when `local` is true on at least one rank.
bool any_rank(Comm& comm, bool local);

// Every buffer of `model` (BN running statistics, counters) of rank `root` copied to all
// ranks, in Model::buffers() order (DDP's broadcast_buffers).
void broadcast_buffers(Model& model, Comm& comm, int root);

// The global batch a checkpoint was trained with, from its resolved configuration and mesh
// text (CheckpointInfo::config_toml, ::mesh): --global-batch-size, or batch-size x grad-accum
// x the "dp=N" of the mesh. -1 when it cannot be told (an older or foreign file). Local.
int64_t checkpoint_global_batch(const std::string& config_toml, const std::string& mesh);

// Element-wise sum / max of `v` over the ranks, in place (f64; bitwise identical on every
// rank; the vector must have the same length everywhere).
void all_reduce_doubles(Comm& comm, std::vector<double>& v, ReduceOp op);

}  // namespace sm
