// collectives.h — the small collective interface layers may call (rowwise tensor
// parallelism, synced batch norm, a future colwise gather). Layers never include comm/;
// parallel/ implements this over the right Comm (parallel/comm_collectives.h) and hands it
// to the layers through Ctx. Every method is COLLECTIVE OVER THE GROUP the implementation
// wraps: all of its ranks call it in the same order with matching sizes and dtypes.
// Tensors may be host or device tensors; results are bitwise identical on every rank.
#pragma once
#include "spikemesh/core/tensor.h"

namespace sm {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // t = sum over the group's ranks of t, in place.
  virtual void all_reduce_sum(Tensor& t) = 0;
  // in: [n] on every rank; out: [size()·n], chunk r = rank r's in.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // in: [size()·n]; out: [n] = sum over ranks of chunk rank() of every rank's in.
  virtual void reduce_scatter_sum(const Tensor& in, Tensor& out) = 0;
  // t on every rank becomes `root`'s t.
  virtual void broadcast(Tensor& t, int root) = 0;
};

}  // namespace sm
