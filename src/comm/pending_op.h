// pending_op.h — one communication operation in flight, and the watchdog that waits for it.
// Internal to src/comm/. Every back end (MPI host, MPI staged device, NCCL) produces
// PendingOps; Comm turns them into blocking calls (wait_or_abort) or CommHandles.
// Invariant: progress() never blocks; once it returned true it keeps returning true and the
// results are in the user's tensors.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace sm::comm_detail {

class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Advances the operation without blocking; true once complete.
  virtual bool progress() = 0;
  // For the watchdog: the world ranks this rank is still waiting for, e.g. "world rank(s) 3"
  // or "unknown peers".
  virtual std::string pending_peers() const { return "unknown peers"; }
};

// Where an operation runs, for messages: "all_reduce of 1024 f32 on comm 'dp' (world ranks 0,2)".
struct OpLabel {
  std::string what;
  MPI_Comm abort_comm = MPI_COMM_NULL;  // MPI_Abort target on timeout
};

// Polls op until it completes; with a watchdog deadline of comm_timeout_seconds() (0 = none).
// On timeout prints one line naming the operation, the comm and the pending peers, then
// MPI_Abort (never returns). Returns the seconds spent waiting.
double wait_or_abort(PendingOp& op, const OpLabel& label);

// Process-wide abort communicator (the mesh's world); MPI_COMM_NULL = use the op's comm.
void set_abort_comm(MPI_Comm comm);
MPI_Comm abort_comm_or(MPI_Comm fallback);

// "0,2,5" (world ranks of the given comm ranks).
std::string join_ranks(const std::vector<int>& ranks);

// " No heartbeat from world rank(s) 2 on node3 (last 14 s ago): a lost node or a killed
// process?" when comm/heartbeat.h finds stale ranks, else "": appended to timeout messages.
std::string lost_ranks_note();

// Host of every world rank (set by Mesh::create once gathered; empty before): the watchdog's
// messages then say where a missing peer runs.
void set_world_hosts(const std::vector<std::string>& hosts);
// "2,3 on node3" / "0 on node1, 4 on node3"; plain join_ranks while the hosts are unknown.
std::string join_ranks_on_hosts(const std::vector<int>& world_ranks);

}  // namespace sm::comm_detail
