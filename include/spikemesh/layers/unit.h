// unit.h — a Unit is a named Sequential that owns one flat value buffer and one flat
// gradient buffer for all of its parameters (docs/architecture.md §3, §4). Units are the
// granularity of pipeline partitioning, FSDP sharding and memopt. Invariant after finalize(): every
// Param's value/grad is a view into flat_value()/flat_grad(), laid out in params() order.
#pragma once
#include <string>

#include "spikemesh/layers/sequential.h"

namespace sm {

class Unit : public Sequential {
 public:
  explicit Unit(std::string name) { set_name(std::move(name)); }
  std::string type() const override { return "unit"; }

  // Names every child layer and parameter by path, allocates the flat buffers in `dt` on
  // `dev` and binds the views; then initialises from (seed, param name). On a CUDA device
  // the values are initialised on the host and copied (the same numbers as on the CPU).
  void finalize(DType dt, Device dev, uint64_t seed);
  Tensor& flat_value() { return flat_value_; }
  Tensor& flat_grad() { return flat_grad_; }
  int64_t num_params() const { return flat_value_.numel(); }
  void zero_grad() { if (flat_grad_.defined()) flat_grad_.zero(); }

 private:
  Tensor flat_value_;  // [num_params]
  Tensor flat_grad_;   // [num_params]
};

// "a.b" (either part may be empty: then the other alone) — state-dict path joining.
std::string join_layer_path(const std::string& a, const std::string& b);
// Assigns hierarchical names to the layers below `root` (root keeps its own name).
void name_layers(Layer& root);

}  // namespace sm
