// fused_epilogue.h — the fused batch norm → neuron epilogue of Sequential children (CPU):
// a BatchNorm directly followed by a Neuron runs as BatchNorm::forward_into, the neuron
// normalising the convolution output as it reads it, so the normalised tensor is never
// written (one pass less over it in forward, one tensor less in flight). Each layer's
// backward is unchanged; the results equal the unfused forward's bitwise (the same fma),
// while backward works from the saved input x instead of the normalised output (rounding-
// level differences, docs/semantics.md §9's tolerances). Only plain CPU forwards qualify:
// no tensor-parallel sample sharding on either layer, no memopt recompute or split.
// Off by default — measured, it saves its passes per layer but no whole step within this VM's
// noise, and moves the host arena's high-water mark (README, "Fused batch norm → neuron");
// SPIKEMESH_FUSE=1 (read when the library loads; the program checks the value at start-up)
// or set_fused_epilogues(true) turns it on.
#pragma once
#include <string>

#include "spikemesh/layers/layer.h"

namespace sm {

bool fused_epilogues();
void set_fused_epilogues(bool on);
// SPIKEMESH_FUSE applied (InputError naming it when it is not 0 or 1).
void apply_fused_epilogues_env();

// When (a, b) qualify for x under ctx: runs them fused into y (profiled as one row,
// "<a type>+<b type>") and returns true; otherwise false, nothing run.
bool try_fused_forward(Layer& a, Layer& b, const Tensor& x, Ctx& ctx, Tensor& y);

}  // namespace sm
