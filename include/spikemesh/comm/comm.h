// comm.h — Comm: one communicator (an MPI sub-communicator and, on GPUs, the NCCL
// communicator created inside it) with the collectives spikemesh needs, their async forms,
// per-operation counters, and a watchdog.
//
// Every operation below is COLLECTIVE OVER THIS COMM (all of its ranks must call it, in the
// same order, with matching sizes and dtypes), except send/recv, which are point-to-point
// between two ranks of this comm. Ranks are ranks of this comm, not world ranks.
//
// Back ends (docs/architecture.md §6):
//   * Host tensors always use MPI.
//   * Device (CUDA) tensors use NCCL when spikemesh was built with NCCL, the comm was
//     created with backend Auto or Nccl, and every rank of the comm owns a distinct GPU;
//     otherwise they are staged through pinned host memory and MPI. Never does NCCL see two
//     ranks on one GPU.
//
// Determinism: all_reduce gives BITWISE IDENTICAL results on every rank, and the same
// result for the same inputs every time (data-parallel replicas must stay bitwise equal).
// The MPI back end reduces floating types (f32, f64, bf16, f16) itself: the tensor is cut
// into p contiguous chunks, chunk j is sent to rank j, which sums the p contributions in
// rank order 0, 1, ..., p-1 (bf16/f16 accumulate in f32 and round once), then every rank
// gathers every chunk (reduce-scatter + all-gather). Each element is therefore reduced
// exactly once, in a fixed order, and then copied. Integer types use the same scheme. The
// NCCL back end relies on NCCL's ring/tree algorithms, which also reduce each element once
// and then broadcast it. The MPI exchanges are direct point-to-point messages (each rank
// sends (p-1)/p of the data per phase, 2(p-1) messages), so the watchdog can name the
// ranks that never delivered; the message count grows with p (fine for dp groups of tens
// of ranks; a ring variant would be the next step for hundreds).
//
// Sizes: reduce_scatter needs in.numel() == size() * out.numel() and all_gather needs
// out.numel() == size() * in.numel() (rank r's chunk is elements [r*n, (r+1)*n)). There is
// no implicit padding: a caller with a length not divisible by size() pads its flat buffer
// itself (padded_numel() helps); a mismatch throws an internal error naming both sizes.
// Tensors must be contiguous (every sm::Tensor is); in and out have the same dtype and
// device. Only numel matters, not shape.
//
// Reductions: Sum, Avg (sum / size(); integer types truncate toward zero) and Max, for f32,
// f64, bf16, f16, i32, i64, u8 (u8 sums wrap modulo 256).
//
// Watchdog: blocking operations (and CommHandle::wait) are non-blocking MPI calls polled
// until comm_timeout_seconds() elapses; then the rank prints which operation on which comm
// timed out and which peers did not deliver (or "unknown peers"), and calls MPI_Abort, so a
// job with a dead or hung rank ends within the timeout.
#pragma once
#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);  // "sum" | "avg" | "max"

// Which library carries device tensors (host tensors always use MPI).
enum class CommBackend { Auto, Mpi, Nccl };
const char* comm_backend_name(CommBackend b);                // "auto" | "mpi" | "nccl"
CommBackend comm_backend_from_name(const std::string& name);  // throws an Input error

// ---- process-wide settings ---------------------------------------------------------------
// Watchdog deadline for every blocking operation and CommHandle::wait, in seconds;
// 0 switches the watchdog off (wait forever). Default 600. The trainer sets it from
// --comm-timeout before any communication.
void set_comm_timeout_seconds(double seconds);
double comm_timeout_seconds();

struct CommOptions {
  CommBackend backend = CommBackend::Auto;
};

// ---- counters ----------------------------------------------------------------------------
enum class CommOp { AllReduce, ReduceScatter, AllGather, Broadcast, Send, Recv, Barrier };
constexpr int kCommOpCount = 7;
const char* comm_op_name(CommOp op);  // "all_reduce", "reduce_scatter", ...

// Per operation kind. payload_bytes: bytes of the user's tensor per call (all_reduce and
// broadcast: the tensor; reduce_scatter: the input, p*n; all_gather: the output, p*n;
// send/recv: the tensor; barrier: 0). bus_bytes: the bytes one rank moves under the
// nccl-tests convention, integer-floored per call: all_reduce 2(p-1)/p*payload,
// reduce_scatter and all_gather (p-1)/p*payload, broadcast/send/recv payload, and 0 for
// every collective on a one-rank comm. wait_seconds: wall time spent blocked in this
// operation kind (blocking calls and CommHandle::wait/test), i.e. exposed communication.
struct CommOpCounter {
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;
  uint64_t bus_bytes = 0;
  double wait_seconds = 0.0;
};

struct CommCounters {
  std::array<CommOpCounter, kCommOpCount> ops{};
  const CommOpCounter& operator[](CommOp op) const { return ops[static_cast<int>(op)]; }
  CommOpCounter& operator[](CommOp op) { return ops[static_cast<int>(op)]; }
  uint64_t total_calls() const;
  uint64_t total_payload_bytes() const;
  uint64_t total_bus_bytes() const;
  double total_wait_seconds() const;
  CommCounters& operator+=(const CommCounters& o);
};

// Bus bytes one rank moves for `op` with `payload` bytes on `p` ranks (see CommOpCounter).
uint64_t comm_bus_bytes(CommOp op, uint64_t payload, int p);

// Smallest multiple of p that is >= n: the flat length a caller pads to before
// reduce_scatter / all_gather.
inline int64_t padded_numel(int64_t n, int p) { return (n + p - 1) / p * p; }

// ---- async handle ------------------------------------------------------------------------
// An operation in flight. The tensors passed to the *_async call must stay alive and
// untouched until wait() returns or test() returns true. MPI progresses non-blocking
// collectives only inside MPI calls: call test() now and then to overlap communication.
// The destructor waits for completion (with the watchdog) if nobody did.
class CommHandle {
 public:
  virtual ~CommHandle() = default;
  virtual void wait() = 0;   // blocks until complete (watchdog applies); idempotent
  virtual bool test() = 0;   // advances the operation; true once complete (results visible)
};

// ---- the communicator --------------------------------------------------------------------
class CommImpl;

class Comm {
 public:
  // Collective over `mpi`: duplicates it (the caller keeps ownership of `mpi`). `name`
  // ("world", "dp", "tp", "pp", ...) appears in watchdog and error messages.
  Comm(MPI_Comm mpi, const std::string& name, const CommOptions& opts = {});
  ~Comm();  // frees the duplicated communicators (not collective in MPI terms)
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;
  // World rank of each rank of this comm (index = rank in this comm).
  const std::vector<int>& world_ranks() const;
  // A duplicate of the wrapped communicator, for callers that need raw MPI (HDF5 MPI-IO,
  // small reductions of metrics). Owned by this Comm; never used by Comm's own operations.
  MPI_Comm mpi_comm() const;
  CommBackend backend_option() const;
  // Which library device tensors of this comm go through: "nccl" or "mpi (staged through
  // host)". Collective over this comm the first time it decides (NCCL set-up).
  std::string device_backend_name();

  // In place; collective over this comm.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  // in: [p*n], out: [n]; out = reduction over ranks of chunk rank() of every rank's in.
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum);
  // in: [n], out: [p*n]; out chunk r = rank r's in.
  void all_gather(const Tensor& in, Tensor& out);
  // t on every rank becomes root's t.
  void broadcast(Tensor& t, int root);
  // Point-to-point with `peer` (a rank of this comm); tags 0..32767. Messages between two
  // ranks with the same tag arrive in the order sent.
  void send(const Tensor& t, int peer, int tag = 0);
  void recv(Tensor& t, int peer, int tag = 0);
  void barrier();

  std::unique_ptr<CommHandle> all_reduce_async(Tensor& t, ReduceOp op = ReduceOp::Sum);
  std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum);
  std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, Tensor& out);
  std::unique_ptr<CommHandle> broadcast_async(Tensor& t, int root);
  std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer, int tag = 0);
  std::unique_ptr<CommHandle> recv_async(Tensor& t, int peer, int tag = 0);
  std::unique_ptr<CommHandle> barrier_async();

  const CommCounters& counters() const;
  void reset_counters();

 private:
  std::unique_ptr<CommImpl> impl_;
};

}  // namespace sm
