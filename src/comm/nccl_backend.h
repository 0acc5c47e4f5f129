// nccl_backend.h — device-tensor collectives through NCCL, one NCCL communicator per Comm
// (created inside the Comm's MPI communicator: rank 0 makes the ncclUniqueId and broadcasts
// it on that communicator). Internal to src/comm/. Compiled in every build; without
// SPIKEMESH_HAVE_NCCL nccl_compiled() is false and create() must not be called.
// Ordering: each op first makes the NCCL stream wait for an event recorded on the legacy
// default stream (so it sees every kernel already queued), runs on the NCCL stream, and
// records a completion event that the PendingOp polls (cudaEventQuery): when progress()
// returns true, the results are in device memory and visible to any later work.
// Determinism: NCCL's ring and tree all-reduce reduce each element once and then
// distribute it, so every rank gets the same bits.
#pragma once
#include <memory>

#include "mpi_ops.h"
#include "pending_op.h"

namespace sm::comm_detail {

bool nccl_compiled();

class NcclBackend {
 public:
  // Collective over g.comm. The current CUDA device must be this rank's GPU.
  static std::unique_ptr<NcclBackend> create(const MpiGroup& g, const OpLabel& label);
  virtual ~NcclBackend() = default;
  virtual std::unique_ptr<PendingOp> all_reduce(void* buf, int64_t n, DType dt, ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> reduce_scatter(const void* in, void* out, int64_t n_out, DType dt,
                                                    ReduceOp op) = 0;
  virtual std::unique_ptr<PendingOp> all_gather(const void* in, void* out, int64_t n_in, DType dt) = 0;
  virtual std::unique_ptr<PendingOp> broadcast(void* buf, int64_t n, DType dt, int root) = 0;
  virtual std::unique_ptr<PendingOp> send(const void* buf, int64_t n, DType dt, int peer) = 0;
  virtual std::unique_ptr<PendingOp> recv(void* buf, int64_t n, DType dt, int peer) = 0;
};

}  // namespace sm::comm_detail
