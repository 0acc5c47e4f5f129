// fused_epilogue.h — the fused batch-norm epilogues of Sequential children (CPU): a BatchNorm
// directly followed by a Neuron or by a max-pooling Pool2d runs as BatchNorm::forward_into,
// the next layer normalising the convolution output as it reads it, so the normalised tensor
// is never written (one pass less over it in forward, and no full-size temporary: the block
// still holds one full-size tensor). The next layer's backward also makes batch norm's two
// backward sums (the neuron in its BPTT pass, max pooling from its pooled gradient), so batch
// norm's backward reads its inputs once instead of twice. Forward outputs equal the unfused
// forward's bitwise (the same fma, the same pooling winners); gradients differ by rounding,
// since batch norm works from its saved input x instead of its output (docs/semantics.md §9's
// tolerances). Only plain CPU forwards qualify: no tensor-parallel sample sharding on either
// layer, no memopt recompute or split.
// On by default: the same step time, and without the full-size temporaries Spikformer-Ti's
// peak RSS falls by 15 % (README, "Fused batch norm epilogues"). SPIKEMESH_FUSE=0 (read when
// the library loads; the program checks the value at start-up) or set_fused_epilogues(false)
// turns it off.
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
