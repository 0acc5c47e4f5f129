// comm_collectives.h — the layers' Collectives interface (layers/collectives.h) implemented
// over a Comm, for synced batch norm and tensor-parallel layers. Layers never include
// comm/; parallel/ creates this adapter and hands it to the layers (through Ctx).
// Every method is collective over the wrapped Comm; the Comm must outlive the adapter.
#pragma once
#include "spikemesh/comm/comm.h"
#include "spikemesh/layers/collectives.h"

namespace sm {

class CommCollectives final : public Collectives {
 public:
  explicit CommCollectives(Comm& comm) : comm_(comm) {}
  int size() const override { return comm_.size(); }
  int rank() const override { return comm_.rank(); }
  // Bitwise identical on every rank (Comm::all_reduce).
  void all_reduce_sum(Tensor& t) override { comm_.all_reduce(t, ReduceOp::Sum); }
  void all_gather(const Tensor& in, Tensor& out) override { comm_.all_gather(in, out); }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override { comm_.reduce_scatter(in, out, ReduceOp::Sum); }
  void broadcast(Tensor& t, int root) override { comm_.broadcast(t, root); }
  Comm& comm() { return comm_; }

 private:
  Comm& comm_;
};

}  // namespace sm
