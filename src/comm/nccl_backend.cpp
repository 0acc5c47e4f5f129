// nccl_backend.cpp — the NCCL back end (nccl_backend.h). Everything NCCL-specific is
// behind SPIKEMESH_HAVE_NCCL; a build without it only answers nccl_compiled() == false.
#include "nccl_backend.h"

#include "comm_cuda.h"
#include "spikemesh/core/error.h"

namespace sm::comm_detail {

#ifndef SPIKEMESH_HAVE_NCCL

bool nccl_compiled() { return false; }
std::unique_ptr<NcclBackend> NcclBackend::create(const MpiGroup&, const OpLabel&) {
  SM_CHECK(false, "NCCL back end requested in a build without NCCL");
}

#else

bool nccl_compiled() { return true; }

namespace {

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::U8: return ncclUint8;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

// Completion of work queued on the NCCL stream; also surfaces asynchronous NCCL errors.
class NcclOp : public PendingOp {
 public:
  NcclOp(ncclComm_t comm, cudaEvent_t done) : comm_(comm), done_(done) {}
  ~NcclOp() override {
    if (done_) cudaEventDestroy(done_);
  }
  bool progress() override {
    if (!done_) return true;
    cudaError_t rc = cudaEventQuery(done_);
    if (rc == cudaErrorNotReady) {
      ncclResult_t async_rc = ncclSuccess;
      SM_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_rc));
      SM_NCCL_CHECK(async_rc);
      return false;
    }
    SM_COMM_CUDA_CHECK(rc);
    cudaEventDestroy(done_);
    done_ = nullptr;
    return true;
  }

 private:
  ncclComm_t comm_;
  cudaEvent_t done_;
};

class NcclBackendImpl final : public NcclBackend {
 public:
  NcclBackendImpl(const MpiGroup& g, const OpLabel& label) : g_(g) {
    ncclUniqueId id;
    if (g.rank == 0) SM_NCCL_CHECK(ncclGetUniqueId(&id));
    auto bc = mpi_broadcast(g, &id, sizeof id, 0);  // on the Comm's MPI communicator
    wait_or_abort(*bc, label);
    SM_COMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SM_COMM_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    SM_NCCL_CHECK(ncclCommInitRank(&comm_, g.size, id, g.rank));
  }
  ~NcclBackendImpl() override {
    if (comm_) ncclCommDestroy(comm_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::unique_ptr<PendingOp> all_reduce(void* buf, int64_t n, DType dt, ReduceOp op) override {
    before();
    SM_NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(n), nccl_type(dt), nccl_op(op), comm_, stream_));
    return after();
  }
  std::unique_ptr<PendingOp> reduce_scatter(const void* in, void* out, int64_t n_out, DType dt,
                                            ReduceOp op) override {
    before();
    SM_NCCL_CHECK(ncclReduceScatter(in, out, static_cast<size_t>(n_out), nccl_type(dt), nccl_op(op), comm_, stream_));
    return after();
  }
  std::unique_ptr<PendingOp> all_gather(const void* in, void* out, int64_t n_in, DType dt) override {
    before();
    SM_NCCL_CHECK(ncclAllGather(in, out, static_cast<size_t>(n_in), nccl_type(dt), comm_, stream_));
    return after();
  }
  std::unique_ptr<PendingOp> broadcast(void* buf, int64_t n, DType dt, int root) override {
    before();
    SM_NCCL_CHECK(ncclBroadcast(buf, buf, static_cast<size_t>(n), nccl_type(dt), root, comm_, stream_));
    return after();
  }
  std::unique_ptr<PendingOp> send(const void* buf, int64_t n, DType dt, int peer) override {
    before();
    SM_NCCL_CHECK(ncclSend(buf, static_cast<size_t>(n), nccl_type(dt), peer, comm_, stream_));
    return after();
  }
  std::unique_ptr<PendingOp> recv(void* buf, int64_t n, DType dt, int peer) override {
    before();
    SM_NCCL_CHECK(ncclRecv(buf, static_cast<size_t>(n), nccl_type(dt), peer, comm_, stream_));
    return after();
  }

 private:
  // The NCCL stream waits for everything queued so far on the legacy default stream.
  void before() {
    SM_COMM_CUDA_CHECK(cudaEventRecord(ready_, cudaStreamLegacy));
    SM_COMM_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  }
  std::unique_ptr<PendingOp> after() {
    cudaEvent_t done = nullptr;
    SM_COMM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    SM_COMM_CUDA_CHECK(cudaEventRecord(done, stream_));
    return std::make_unique<NcclOp>(comm_, done);
  }

  MpiGroup g_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace

std::unique_ptr<NcclBackend> NcclBackend::create(const MpiGroup& g, const OpLabel& label) {
  return std::make_unique<NcclBackendImpl>(g, label);
}

#endif

}  // namespace sm::comm_detail
