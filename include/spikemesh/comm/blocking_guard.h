// blocking_guard.h — the watchdog for blocking calls that Comm does not make itself: collective
// HDF5 / MPI-IO (file open, read, write, close) and the raw MPI calls that build communicators.
// With Comm's own watchdog (comm.h) this covers every blocking operation of spikemesh: past
// --comm-timeout (comm_timeout_seconds()) the job ends on every rank with one message naming
// the operation and, where it is known, the ranks that did not arrive.
//
// Two pieces:
//  * BlockingDeadline: while alive, a process-wide watchdog thread aborts the job (one line on
//    stderr, then MPI_Abort) when the enclosed call has not returned within the timeout. For a
//    call that cannot be polled (it blocks inside a library).
//  * guarded_collective(comm, what, body): an arrival check, then `body` under a deadline. The
//    arrival check is an all-gather of a hash of `what` under Comm's watchdog, so a rank that
//    never arrives is named ("waiting for data from world rank(s) 1 ... while arriving at
//    <what>"), and ranks that arrive at DIFFERENT collective operations (their inputs differ,
//    e.g. another file on one node) end the job at once with one message naming each rank's
//    operation, instead of deadlocking inside the library.
// Invariant: nothing here throws on a timeout or a mismatch — the ranks are then in no state to
// unwind collectively, so the job is aborted (exit status 3 through MPI_Abort).
#pragma once
#include <mpi.h>

#include <functional>
#include <string>

namespace sm {

class Comm;

class BlockingDeadline {
 public:
  // `what` names the call for the message; `abort_comm` is passed to MPI_Abort (the process-wide
  // abort communicator, when one is set, wins).
  BlockingDeadline(std::string what, MPI_Comm abort_comm);
  ~BlockingDeadline();
  BlockingDeadline(const BlockingDeadline&) = delete;
  BlockingDeadline& operator=(const BlockingDeadline&) = delete;

 private:
  long id_;
};

// Collective over `comm`: arrival check on `what`, then `body` under a BlockingDeadline. `body`
// must itself be collective over `comm` (every rank runs it) and may throw; what it throws
// propagates unchanged (wrap it in agree_on_error to agree on errors).
void guarded_collective(Comm& comm, const std::string& what, const std::function<void()>& body);

// While alive, every Comm watchdog message of this thread ends with "while <what>" (nests: the
// innermost shows). Costs a string copy; no communication.
class CommContext {
 public:
  explicit CommContext(const std::string& what);
  ~CommContext();
  CommContext(const CommContext&) = delete;
  CommContext& operator=(const CommContext&) = delete;
};
// The innermost CommContext of this thread ("" when none); used by the watchdog.
const std::string& current_comm_context();

}  // namespace sm
