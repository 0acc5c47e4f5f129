// reachability.cpp — the first exchange with the ring neighbours (comm/reachability.h).
#include "spikemesh/comm/reachability.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "mpi_ops.h"
#include "pending_op.h"
#include "spikemesh/core/error.h"

namespace sm {
namespace {

constexpr int kRingHelloTag = 32001;  // below MPI's guaranteed tag bound (32767); nothing else is in flight

// The four point-to-point operations waited on together; reports which peers have not
// delivered (or taken) their message yet.
class RingExchange final : public comm_detail::PendingOp {
 public:
  void add(std::unique_ptr<comm_detail::PendingOp> op, int peer, bool recv) { ops_.push_back({std::move(op), peer, recv, false}); }
  bool progress() override {
    bool all = true;
    for (Entry& e : ops_) {
      if (!e.done) e.done = e.op->progress();
      all = all && e.done;
    }
    return all;
  }
  std::string pending_peers() const override {
    std::vector<int> from, to;
    for (const Entry& e : ops_)
      if (!e.done) {
        auto& v = e.recv ? from : to;
        if (std::find(v.begin(), v.end(), e.peer) == v.end()) v.push_back(e.peer);
      }
    if (!from.empty()) return "a first message from world rank(s) " + comm_detail::join_ranks(from);
    if (!to.empty()) return "world rank(s) " + comm_detail::join_ranks(to) + " to take our first message";
    return "nothing (completed)";
  }

 private:
  struct Entry {
    std::unique_ptr<comm_detail::PendingOp> op;
    int peer;
    bool recv, done;
  };
  std::vector<Entry> ops_;
};

}  // namespace

void check_ring_reachable(MPI_Comm world) {
  int rank = 0, size = 1;
  SM_MPI_CHECK(MPI_Comm_rank(world, &rank));
  SM_MPI_CHECK(MPI_Comm_size(world, &size));
  if (size == 1) return;
  const int prev = (rank + size - 1) % size, next = (rank + 1) % size;
  const comm_detail::MpiGroup g{world, rank, size, nullptr};
  int from_prev = -1, from_next = -1;  // each neighbour sends its own world rank
  RingExchange op;
  op.add(comm_detail::mpi_recv(g, &from_prev, sizeof(int), prev, kRingHelloTag), prev, true);
  op.add(comm_detail::mpi_recv(g, &from_next, sizeof(int), next, kRingHelloTag), next, true);
  op.add(comm_detail::mpi_send(g, &rank, sizeof(int), next, kRingHelloTag), next, false);
  op.add(comm_detail::mpi_send(g, &rank, sizeof(int), prev, kRingHelloTag), prev, false);
  const std::string peers = prev == next ? std::to_string(prev) : std::to_string(prev) + " and " + std::to_string(next);
  comm_detail::wait_or_abort(
      op, comm_detail::OpLabel{"the first message exchange with the neighbours in the world ring (world rank(s) " +
                                   peers + "; can this node reach theirs? a firewall, or the interface Open MPI "
                                   "uses: OMPI_MCA_btl_tcp_if_include)",
                               world});
  SM_CHECK(from_prev == prev && from_next == next,
           "ring exchange: expected world ranks " << prev << " and " << next << ", got " << from_prev << " and "
                                                  << from_next);
}

}  // namespace sm
