// collectives.h — the small collective interface layers may call (rowwise TP, synced BN).
// Layers never include comm/; parallel/ implements this over the right Comm.
// Every method is collective over the group the implementation wraps.
#pragma once
#include "spikemesh/core/tensor.h"

namespace sm {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void all_reduce_sum(Tensor& t) = 0;  // in place
};

}  // namespace sm
