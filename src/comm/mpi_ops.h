// mpi_ops.h — the MPI back end on host buffers: each function posts non-blocking MPI calls
// and returns a PendingOp that completes the operation as it is progressed. Internal.
// reduce_scatter / all_reduce / all_gather are direct exchanges of point-to-point messages
// (so the watchdog can name the peers that never delivered); all_reduce and reduce_scatter
// reduce every element exactly once, in rank order, on the rank that owns its chunk
// (reduce_local.h) — bitwise identical results everywhere.
// Every function is collective over g.comm (send/recv: point-to-point on it); `tag` values
// must be the same on every rank for the same collective (Comm derives them from a
// per-comm sequence number; all_reduce uses tag and tag+1).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "pending_op.h"
#include "spikemesh/comm/comm.h"

namespace sm::comm_detail {

struct MpiGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  const std::vector<int>* world_ranks = nullptr;  // comm rank -> world rank
};

// buf: [n] in place.
std::unique_ptr<PendingOp> mpi_all_reduce(const MpiGroup& g, void* buf, int64_t n, DType dt, ReduceOp op, int tag);
// in: [p*n_out], out: [n_out].
std::unique_ptr<PendingOp> mpi_reduce_scatter(const MpiGroup& g, const void* in, void* out, int64_t n_out, DType dt,
                                              ReduceOp op, int tag);
// in: bytes_in, out: p*bytes_in.
std::unique_ptr<PendingOp> mpi_all_gather(const MpiGroup& g, const void* in, void* out, int64_t bytes_in, int tag);
std::unique_ptr<PendingOp> mpi_broadcast(const MpiGroup& g, void* buf, int64_t bytes, int root);
std::unique_ptr<PendingOp> mpi_send(const MpiGroup& g, const void* buf, int64_t bytes, int peer, int tag);
std::unique_ptr<PendingOp> mpi_recv(const MpiGroup& g, void* buf, int64_t bytes, int peer, int tag);
std::unique_ptr<PendingOp> mpi_barrier(const MpiGroup& g);

// Chunk c of n elements split into p nearly equal contiguous chunks (the first n % p
// chunks hold one more element).
inline int64_t chunk_count(int64_t n, int p, int c) { return n / p + (c < n % p ? 1 : 0); }
inline int64_t chunk_begin(int64_t n, int p, int c) { return c * (n / p) + (c < n % p ? c : n % p); }

}  // namespace sm::comm_detail
