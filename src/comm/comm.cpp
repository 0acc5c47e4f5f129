// comm.cpp — Comm: validation, counters, tags, and dispatch of each operation to the MPI
// host path, the MPI path staged through pinned host memory, or NCCL (see comm.h).
// Invariants: every collective call takes the next sequence number of this comm (the same
// on every rank, since collectives are called in the same order) and derives its MPI tags
// from it, so several async collectives may be in flight at once; counters are updated
// when an operation starts.
#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/blocking_guard.h"

#include <chrono>
#include <cstring>
#include <sstream>

#include "comm_cuda.h"
#include "mesh_internal.h"
#include "mpi_ops.h"
#include "nccl_backend.h"
#include "pending_op.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"

namespace sm {

using comm_detail::MpiGroup;
using comm_detail::OpLabel;
using comm_detail::PendingOp;

namespace {

// A host operation on staging buffers, followed by copies back to the device on completion.
class StagedOp : public PendingOp {
 public:
  std::vector<comm_detail::HostStage> stages;
  std::unique_ptr<PendingOp> inner;
  struct CopyBack {
    void* device;
    const void* host;
    size_t bytes;
  };
  std::vector<CopyBack> copies;

  bool progress() override {
    if (done_) return true;
    if (!inner->progress()) return false;
    for (const auto& c : copies) comm_detail::copy_host_to_device(c.device, c.host, c.bytes);
    done_ = true;
    return true;
  }
  std::string pending_peers() const override { return inner->pending_peers(); }

 private:
  bool done_ = false;
};

class OpHandle final : public CommHandle {
 public:
  OpHandle(std::unique_ptr<PendingOp> op, OpLabel label, CommOpCounter* counter)
      : op_(std::move(op)), label_(std::move(label)), counter_(counter) {}
  ~OpHandle() override {
    if (!done_) {
      try {
        wait();
      } catch (...) {  // destructors must not throw; the error already names itself elsewhere
      }
    }
  }
  void wait() override {
    if (done_) return;
    counter_->wait_seconds += comm_detail::wait_or_abort(*op_, label_);
    done_ = true;
    op_.reset();
  }
  bool test() override {
    if (done_) return true;
    auto t0 = std::chrono::steady_clock::now();
    done_ = op_->progress();
    counter_->wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done_) op_.reset();
    return done_;
  }

 private:
  std::unique_ptr<PendingOp> op_;
  OpLabel label_;
  CommOpCounter* counter_;
  bool done_ = false;
};

}  // namespace

class CommImpl {
 public:
  MPI_Comm user = MPI_COMM_NULL, coll = MPI_COMM_NULL, p2p = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::string name;
  std::vector<int> world_ranks;
  CommOptions opts;
  CommCounters counters;
  uint64_t seq = 0;
  int tag_slots = 1;  // tags available for collectives: [0, 2*tag_slots)
  enum class DevicePath { Undecided, Nccl, Staged } device_path = DevicePath::Undecided;
  std::unique_ptr<comm_detail::NcclBackend> nccl;

  MpiGroup group(MPI_Comm c) const { return MpiGroup{c, rank, size, &world_ranks}; }
  int next_tag() { return static_cast<int>((seq++ % static_cast<uint64_t>(tag_slots)) * 2); }

  OpLabel label(CommOp op, const Tensor& t, const std::string& extra = "") const {
    std::ostringstream os;
    os << comm_op_name(op) << extra << " of " << t.numel() << " x " << dtype_name(t.dtype()) << " on "
       << (t.device().is_cpu() ? "host" : t.device().str()) << " over comm '" << name << "' (size " << size
       << ", world ranks " << comm_detail::join_ranks(world_ranks) << ")";
    return OpLabel{os.str(), user};
  }

  void count(CommOp op, uint64_t payload) {
    auto& c = counters[op];
    c.calls += 1;
    c.payload_bytes += payload;
    c.bus_bytes += comm_bus_bytes(op, payload, op == CommOp::Send || op == CommOp::Recv ? 2 : size);
  }

  // Collective over this comm the first time: decides how device tensors travel.
  DevicePath decide_device_path(const OpLabel& label) {
    if (device_path != DevicePath::Undecided) return device_path;
    SM_CHECK(built_with_cuda(), "device tensor on comm '" << name << "' in a build without CUDA");
    if (opts.backend == CommBackend::Nccl && !comm_detail::nccl_compiled())
      SM_INPUT_ERROR("--comm nccl: this spikemesh was built without NCCL (use --comm mpi or auto)");
    // Every rank's GPU identity ("host|pci-bus"), fixed width, gathered over this comm.
    constexpr int kW = 160;
    std::string mine = comm_detail::current_gpu_identity(comm_detail::process_host());
    std::vector<char> all(static_cast<size_t>(kW) * size, 0), me(kW, 0);
    std::memcpy(me.data(), mine.data(), std::min<size_t>(mine.size(), kW - 1));
    auto gather = comm_detail::mpi_all_gather(group(coll), me.data(), all.data(), kW, next_tag());
    comm_detail::wait_or_abort(*gather, label);
    std::string shared;
    for (int a = 0; a < size && shared.empty(); ++a) {
      std::string ia(&all[static_cast<size_t>(a) * kW]);
      if (ia.empty()) shared = "world rank " + std::to_string(world_ranks[a]) + " has no GPU";
      for (int b = a + 1; b < size && shared.empty(); ++b)
        if (ia == std::string(&all[static_cast<size_t>(b) * kW]))
          shared = "world ranks " + std::to_string(world_ranks[a]) + " and " + std::to_string(world_ranks[b]) +
                   " share GPU " + ia;
    }
    bool use_nccl = opts.backend != CommBackend::Mpi && comm_detail::nccl_compiled() && shared.empty();
    if (opts.backend == CommBackend::Nccl && !use_nccl)
      SM_INPUT_ERROR("--comm nccl needs one distinct GPU per rank, but on comm '" << name << "' " << shared
                                                                             << " (use --comm mpi or auto)");
    if (use_nccl) nccl = comm_detail::NcclBackend::create(group(coll), label);
    device_path = use_nccl ? DevicePath::Nccl : DevicePath::Staged;
    return device_path;
  }

  std::unique_ptr<PendingOp> start_all_reduce(Tensor& t, ReduceOp op, const OpLabel& label) {
    count(CommOp::AllReduce, t.nbytes());
    int tag = next_tag();
    if (t.device().is_cpu()) return comm_detail::mpi_all_reduce(group(coll), t.raw(), t.numel(), t.dtype(), op, tag);
    if (decide_device_path(label) == DevicePath::Nccl) return nccl->all_reduce(t.raw(), t.numel(), t.dtype(), op);
    auto st = std::make_unique<StagedOp>();
    st->stages.emplace_back(t.nbytes());
    void* h = st->stages[0].ptr();
    comm_detail::copy_device_to_host(h, t.raw(), t.nbytes());
    st->inner = comm_detail::mpi_all_reduce(group(coll), h, t.numel(), t.dtype(), op, tag);
    st->copies.push_back({t.raw(), h, t.nbytes()});
    return st;
  }

  std::unique_ptr<PendingOp> start_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op, const OpLabel& label) {
    check_pair(in, out, "reduce_scatter", in.numel(), out.numel());
    count(CommOp::ReduceScatter, in.nbytes());
    int tag = next_tag();
    if (in.device().is_cpu())
      return comm_detail::mpi_reduce_scatter(group(coll), in.raw(), out.raw(), out.numel(), in.dtype(), op, tag);
    if (decide_device_path(label) == DevicePath::Nccl)
      return nccl->reduce_scatter(in.raw(), out.raw(), out.numel(), in.dtype(), op);
    auto st = std::make_unique<StagedOp>();
    st->stages.emplace_back(in.nbytes());
    st->stages.emplace_back(out.nbytes());
    comm_detail::copy_device_to_host(st->stages[0].ptr(), in.raw(), in.nbytes());
    st->inner = comm_detail::mpi_reduce_scatter(group(coll), st->stages[0].ptr(), st->stages[1].ptr(), out.numel(),
                                                in.dtype(), op, tag);
    st->copies.push_back({out.raw(), st->stages[1].ptr(), out.nbytes()});
    return st;
  }

  std::unique_ptr<PendingOp> start_all_gather(const Tensor& in, Tensor& out, const OpLabel& label) {
    check_pair(in, out, "all_gather", out.numel(), in.numel());
    count(CommOp::AllGather, out.nbytes());
    int tag = next_tag();
    if (in.device().is_cpu())
      return comm_detail::mpi_all_gather(group(coll), in.raw(), out.raw(), static_cast<int64_t>(in.nbytes()), tag);
    if (decide_device_path(label) == DevicePath::Nccl) return nccl->all_gather(in.raw(), out.raw(), in.numel(), in.dtype());
    auto st = std::make_unique<StagedOp>();
    st->stages.emplace_back(in.nbytes());
    st->stages.emplace_back(out.nbytes());
    comm_detail::copy_device_to_host(st->stages[0].ptr(), in.raw(), in.nbytes());
    st->inner = comm_detail::mpi_all_gather(group(coll), st->stages[0].ptr(), st->stages[1].ptr(),
                                            static_cast<int64_t>(in.nbytes()), tag);
    st->copies.push_back({out.raw(), st->stages[1].ptr(), out.nbytes()});
    return st;
  }

  std::unique_ptr<PendingOp> start_broadcast(Tensor& t, int root, const OpLabel& label) {
    SM_CHECK(root >= 0 && root < size, "broadcast root " << root << " outside comm '" << name << "' of size " << size);
    count(CommOp::Broadcast, t.nbytes());
    next_tag();  // keeps sequence numbers aligned with the other collectives
    if (t.device().is_cpu()) return comm_detail::mpi_broadcast(group(coll), t.raw(), t.nbytes(), root);
    if (decide_device_path(label) == DevicePath::Nccl) return nccl->broadcast(t.raw(), t.numel(), t.dtype(), root);
    auto st = std::make_unique<StagedOp>();
    st->stages.emplace_back(t.nbytes());
    if (rank == root) comm_detail::copy_device_to_host(st->stages[0].ptr(), t.raw(), t.nbytes());
    st->inner = comm_detail::mpi_broadcast(group(coll), st->stages[0].ptr(), t.nbytes(), root);
    if (rank != root) st->copies.push_back({t.raw(), st->stages[0].ptr(), t.nbytes()});
    return st;
  }

  std::unique_ptr<PendingOp> start_p2p(Tensor& t, int peer, int tag, bool is_send, const OpLabel& label) {
    SM_CHECK(peer >= 0 && peer < size, (is_send ? "send to" : "recv from") << " rank " << peer << " outside comm '"
                                                                           << name << "' of size " << size);
    SM_CHECK(tag >= 0 && tag <= 32767, "point-to-point tag " << tag << " outside [0, 32767]");
    count(is_send ? CommOp::Send : CommOp::Recv, t.nbytes());
    auto g = group(p2p);
    int64_t bytes = static_cast<int64_t>(t.nbytes());
    if (t.device().is_cpu())
      return is_send ? comm_detail::mpi_send(g, t.raw(), bytes, peer, tag) : comm_detail::mpi_recv(g, t.raw(), bytes, peer, tag);
    // Point-to-point is not collective: the device path must already be decided (by any
    // collective on a device tensor, or device_backend_name()).
    SM_CHECK(device_path != DevicePath::Undecided,
             "first device-tensor operation on comm '" << name << "' is a send/recv; call "
                                                      "Mesh::init_device_backends() or Comm::device_backend_name() "
                                                      "(collective) first");
    if (device_path == DevicePath::Nccl)
      return is_send ? nccl->send(t.raw(), t.numel(), t.dtype(), peer) : nccl->recv(t.raw(), t.numel(), t.dtype(), peer);
    auto st = std::make_unique<StagedOp>();
    st->stages.emplace_back(t.nbytes());
    void* h = st->stages[0].ptr();
    if (is_send) {
      comm_detail::copy_device_to_host(h, t.raw(), t.nbytes());
      st->inner = comm_detail::mpi_send(g, h, bytes, peer, tag);
    } else {
      st->inner = comm_detail::mpi_recv(g, h, bytes, peer, tag);
      st->copies.push_back({t.raw(), h, t.nbytes()});
    }
    return st;
  }

  std::unique_ptr<PendingOp> start_barrier() {
    count(CommOp::Barrier, 0);
    next_tag();
    return comm_detail::mpi_barrier(group(coll));
  }

  // in/out of a reduce_scatter (big = in) or all_gather (big = out).
  void check_pair(const Tensor& in, const Tensor& out, const char* what, int64_t big, int64_t small) const {
    SM_CHECK(in.dtype() == out.dtype(), what << " on comm '" << name << "': input " << dtype_name(in.dtype())
                                             << " but output " << dtype_name(out.dtype()));
    SM_CHECK(in.device() == out.device(), what << " on comm '" << name << "': input on " << in.device().str()
                                               << " but output on " << out.device().str());
    SM_CHECK(big == small * size, what << " on comm '" << name << "' of size " << size << ": the large side has " << big
                                       << " elements, must be size x the small side (" << small
                                       << "); pad flat buffers to a multiple of the comm size (padded_numel)");
  }
};

Comm::Comm(MPI_Comm mpi, const std::string& name, const CommOptions& opts) : impl_(std::make_unique<CommImpl>()) {
  auto& m = *impl_;
  m.name = name;
  m.opts = opts;
  BlockingDeadline deadline("creating communicator '" + name + "' (MPI_Comm_dup, MPI_Allgather)", mpi);
  SM_MPI_CHECK(MPI_Comm_dup(mpi, &m.user));
  SM_MPI_CHECK(MPI_Comm_set_errhandler(m.user, MPI_ERRORS_RETURN));
  SM_MPI_CHECK(MPI_Comm_dup(m.user, &m.coll));
  SM_MPI_CHECK(MPI_Comm_dup(m.user, &m.p2p));
  SM_MPI_CHECK(MPI_Comm_rank(m.user, &m.rank));
  SM_MPI_CHECK(MPI_Comm_size(m.user, &m.size));
  int wr = comm_detail::process_world_rank();
  m.world_ranks.assign(m.size, 0);
  SM_MPI_CHECK(MPI_Allgather(&wr, 1, MPI_INT, m.world_ranks.data(), 1, MPI_INT, m.coll));
  void* ub = nullptr;
  int flag = 0;
  SM_MPI_CHECK(MPI_Comm_get_attr(m.coll, MPI_TAG_UB, &ub, &flag));
  int tag_ub = flag ? *static_cast<int*>(ub) : 32767;
  m.tag_slots = std::max(1, (tag_ub - 1) / 2);
}

Comm::~Comm() {
  if (!impl_) return;
  impl_->nccl.reset();
  for (MPI_Comm* c : {&impl_->user, &impl_->coll, &impl_->p2p})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

int Comm::rank() const { return impl_->rank; }
int Comm::size() const { return impl_->size; }
const std::string& Comm::name() const { return impl_->name; }
const std::vector<int>& Comm::world_ranks() const { return impl_->world_ranks; }
MPI_Comm Comm::mpi_comm() const { return impl_->user; }
CommBackend Comm::backend_option() const { return impl_->opts.backend; }
const CommCounters& Comm::counters() const { return impl_->counters; }
void Comm::reset_counters() { impl_->counters = CommCounters{}; }

std::string Comm::device_backend_name() {
  if (impl_->device_path == CommImpl::DevicePath::Undecided) {
    if (!built_with_cuda() || cuda_device_count() == 0) return "mpi (no GPU)";
    impl_->decide_device_path(OpLabel{"device back-end selection over comm '" + impl_->name + "'", impl_->user});
  }
  return impl_->device_path == CommImpl::DevicePath::Nccl ? "nccl" : "mpi (staged through host)";
}

namespace {
double run_blocking(std::unique_ptr<PendingOp> op, const OpLabel& label) { return comm_detail::wait_or_abort(*op, label); }
}  // namespace

void Comm::all_reduce(Tensor& t, ReduceOp op) {
  auto label = impl_->label(CommOp::AllReduce, t, std::string("(") + reduce_op_name(op) + ")");
  impl_->counters[CommOp::AllReduce].wait_seconds += run_blocking(impl_->start_all_reduce(t, op, label), label);
}
void Comm::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  auto label = impl_->label(CommOp::ReduceScatter, in, std::string("(") + reduce_op_name(op) + ")");
  impl_->counters[CommOp::ReduceScatter].wait_seconds += run_blocking(impl_->start_reduce_scatter(in, out, op, label), label);
}
void Comm::all_gather(const Tensor& in, Tensor& out) {
  auto label = impl_->label(CommOp::AllGather, in);
  impl_->counters[CommOp::AllGather].wait_seconds += run_blocking(impl_->start_all_gather(in, out, label), label);
}
void Comm::broadcast(Tensor& t, int root) {
  auto label = impl_->label(CommOp::Broadcast, t, "(root " + std::to_string(root) + ")");
  impl_->counters[CommOp::Broadcast].wait_seconds += run_blocking(impl_->start_broadcast(t, root, label), label);
}
void Comm::send(const Tensor& t, int peer, int tag) {
  auto label = impl_->label(CommOp::Send, t, "(to rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")");
  Tensor& tt = const_cast<Tensor&>(t);  // a send only reads
  impl_->counters[CommOp::Send].wait_seconds += run_blocking(impl_->start_p2p(tt, peer, tag, true, label), label);
}
void Comm::recv(Tensor& t, int peer, int tag) {
  auto label = impl_->label(CommOp::Recv, t, "(from rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ")");
  impl_->counters[CommOp::Recv].wait_seconds += run_blocking(impl_->start_p2p(t, peer, tag, false, label), label);
}
void Comm::barrier() {
  OpLabel label{"barrier over comm '" + impl_->name + "' (size " + std::to_string(impl_->size) + ", world ranks " +
                    comm_detail::join_ranks(impl_->world_ranks) + ")",
                impl_->user};
  impl_->counters[CommOp::Barrier].wait_seconds += run_blocking(impl_->start_barrier(), label);
}

std::unique_ptr<CommHandle> Comm::all_reduce_async(Tensor& t, ReduceOp op) {
  auto label = impl_->label(CommOp::AllReduce, t, std::string("(") + reduce_op_name(op) + ", async)");
  auto pending = impl_->start_all_reduce(t, op, label);
  return std::make_unique<OpHandle>(std::move(pending), label, &impl_->counters[CommOp::AllReduce]);
}
std::unique_ptr<CommHandle> Comm::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  auto label = impl_->label(CommOp::ReduceScatter, in, std::string("(") + reduce_op_name(op) + ", async)");
  auto pending = impl_->start_reduce_scatter(in, out, op, label);
  return std::make_unique<OpHandle>(std::move(pending), label, &impl_->counters[CommOp::ReduceScatter]);
}
std::unique_ptr<CommHandle> Comm::all_gather_async(const Tensor& in, Tensor& out) {
  auto label = impl_->label(CommOp::AllGather, in, "(async)");
  auto pending = impl_->start_all_gather(in, out, label);
  return std::make_unique<OpHandle>(std::move(pending), label, &impl_->counters[CommOp::AllGather]);
}
std::unique_ptr<CommHandle> Comm::broadcast_async(Tensor& t, int root) {
  auto label = impl_->label(CommOp::Broadcast, t, "(root " + std::to_string(root) + ", async)");
  auto pending = impl_->start_broadcast(t, root, label);
  return std::make_unique<OpHandle>(std::move(pending), label, &impl_->counters[CommOp::Broadcast]);
}
std::unique_ptr<CommHandle> Comm::send_async(const Tensor& t, int peer, int tag) {
  auto label = impl_->label(CommOp::Send, t, "(to rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ", async)");
  auto pending = impl_->start_p2p(const_cast<Tensor&>(t), peer, tag, true, label);
  return std::make_unique<OpHandle>(std::move(pending), label, &impl_->counters[CommOp::Send]);
}
std::unique_ptr<CommHandle> Comm::recv_async(Tensor& t, int peer, int tag) {
  auto label = impl_->label(CommOp::Recv, t, "(from rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ", async)");
  auto pending = impl_->start_p2p(t, peer, tag, false, label);
  return std::make_unique<OpHandle>(std::move(pending), label, &impl_->counters[CommOp::Recv]);
}
std::unique_ptr<CommHandle> Comm::barrier_async() {
  OpLabel label{"barrier (async) over comm '" + impl_->name + "' (world ranks " +
                    comm_detail::join_ranks(impl_->world_ranks) + ")",
                impl_->user};
  return std::make_unique<OpHandle>(impl_->start_barrier(), label, &impl_->counters[CommOp::Barrier]);
}

}  // namespace sm
