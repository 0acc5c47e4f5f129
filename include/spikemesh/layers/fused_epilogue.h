// fused_epilogue.h — the fused batch norm → neuron epilogue of Sequential children (CPU):
// a BatchNorm directly followed by a Neuron runs as BatchNorm::forward_into, the neuron
// normalising the convolution output as it reads it, so the normalised tensor is never
// written (one pass less over it in forward; the block still holds one full-size tensor).
// The neuron's backward also makes batch norm's two backward sums, so batch norm's backward
// reads its inputs once instead of twice. Forward outputs equal the unfused forward's bitwise
// (the same fma); gradients differ by rounding, since batch norm works from its saved input x
// instead of its output (docs/semantics.md §9's tolerances). Only plain CPU forwards qualify:
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

// Whether ctx is a plain forward (no memopt recompute, split or time chunk): the only kind
// that may run fused (BatchNorm::forward_into checks it too).
bool plain_forward(const Ctx& ctx);

// When (a, b) qualify for x under ctx: runs them fused into y (profiled as one row,
// "<a type>+<b type>") and returns true; otherwise false, nothing run.
bool try_fused_forward(Layer& a, Layer& b, const Tensor& x, Ctx& ctx, Tensor& y);

}  // namespace sm
