// loss_common.h — what the CPU losses (loss.cpp) and their CUDA wrapper (loss_cuda.cpp)
// share: validation of the model output and labels, and the state one forward keeps for its
// backward, per microbatch slot. The backward flow is written once here (take_gradient, over
// the device's broadcast); the forward is per device because the CUDA wrapper keeps its state
// on the output's device.
// Invariants: a slot holds the forward of one microbatch until its backward releases it; a
// forward into a held slot replaces it (an evaluation forward has no backward); the kept
// gradient lives on the output's device, in double.
#pragma once
#include <string>
#include <utility>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/slot_store.h"

namespace sm::loss_detail {

struct LossSaved {
  int64_t steps = 0, n = 0, k = 0;  // the output [T, N, K]
  DType dtype = DType::F32;          // the output's dtype (and its gradient's)
  bool on_device = false;            // (CUDA wrapper) the forward ran on the GPU
  Device mirror;                     // (CUDA wrapper) a GPU output reduced on the host (soft
                                     // targets): its gradient goes back to this device
  Tensor grad;                       // f64 [N, K] dL/d(mean over T), on the output's device
};

// Checks out [T, N, K] and labels [N] i64 for the loss `name` (labels_host: the labels on the
// host); an out-of-range label is an Input error that names it. Returns T, N, K and dtype.
LossSaved check_inputs(const std::string& name, const Tensor& out, const Tensor& labels_host);

// The host f64 [n, k] soft targets of `soft` (nullptr when undefined); anything else is an
// internal error naming the loss.
const double* check_soft_targets(const std::string& name, const Tensor& soft, int64_t n, int64_t k);

// Backward of the forward kept in `slot` of the loss `name`: d [T, N, K] on the gradient's
// device, filled by broadcast(saved, grad_scale / T, d) (skipped when N = 0); releases the slot.
template <class Broadcast>
Tensor take_gradient(SlotStore<LossSaved>& slots, int slot, const std::string& name, double grad_scale,
                     Broadcast&& broadcast) {
  SM_CHECK(slots.has(slot), name << ": backward before forward (microbatch slot " << slot << ")");
  const LossSaved& s = slots.get(slot);
  Tensor d = Tensor::empty({s.steps, s.n, s.k}, s.dtype, s.grad.device());  // [T, N, K]
  if (s.n > 0) broadcast(s, grad_scale / static_cast<double>(s.steps), d);
  slots.release(slot);
  return d;
}

}  // namespace sm::loss_detail
