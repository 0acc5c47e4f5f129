// grad_clip.h — global gradient-norm clipping (PyTorch torch.nn.utils.clip_grad_norm_, L2).
// Invariant: the norm is accumulated in double in a fixed order (params in order; inside a
// param, fixed 8192-element blocks summed in order), so it does not depend on thread count.
#pragma once
#include <vector>

#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/param.h"

namespace sm {

// Global L2 norm of all grads. If `group` is non-null the squared sum is all-reduced over it
// first (grads sharded over the group; a grad replicated on every rank of the group would be
// counted once per rank). If max_norm > 0, grads are multiplied by max_norm/(norm + 1e-6)
// whenever that factor is below 1 (PyTorch's clamp(max=1): this also covers norms within 1e-6
// under max_norm, and a NaN norm turns the grads into NaN as in PyTorch).
// Returns the norm before clipping. Grads are f32 or f64 CPU tensors.
// `counted` (default: params): the grads whose squares enter the norm on this rank, when a
// grad replicated over the group must be counted by one rank only (tensor parallelism:
// Layout::norm_params()); every grad of `params` is scaled.
double clip_grad_norm(const std::vector<Param*>& params, double max_norm, Collectives* group = nullptr,
                      const std::vector<Param*>* counted = nullptr);

}  // namespace sm
