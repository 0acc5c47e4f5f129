// time_invariant_prefix.h — a sequence's children before its first neuron, run once for all
// time steps when the sequence's input repeats one step T times (a static image under direct
// encoding, as SpikingJelly repeats it): convolutions, batch norm and pooling of T identical
// steps give T identical outputs, so they run on step 0 alone ([1, N, ...]), the neuron gets
// their output repeated over T, and in backward the neuron's input gradient summed over T
// flows back through them (the gradient of a repeated tensor). Batch norm counts its statistics
// T times (ctx.time_repeat), so the running variance's Bessel factor, synced statistics over
// ranks that did and did not take this path, and the input gradient are those of the T steps.
// Invariants: CPU only; only in the model's first unit when nothing wants the model input's
// gradient (ctx.merge_repeated_steps: a training step or evaluation), where every child before
// the neuron is same_at_every_time_step(), none is sharded by tensor parallelism and the unit
// runs without memopt segments; whether the input repeats is decided from its bytes (every step
// equal to step 0), per forward. Results equal the unmerged path's up to rounding.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/layer.h"

namespace sm {

// On unless SPIKEMESH_MERGE_STEPS=0 (read at start-up; a value other than 0 or 1 is refused by
// apply_merge_steps_env); tests compare both paths.
bool merge_repeated_steps_enabled();
void set_merge_repeated_steps(bool on);
void apply_merge_steps_env();  // throws an Input error naming the variable on a bad value
// Forwards that ran a prefix on one step, since the process started (tests, `bench --profile`).
int64_t merged_prefix_runs();

// The number of leading children that may run on one step for the input x: the index of the
// first neuron when every child before it maps time steps alike and x ([T, N, ...], T > 1, on
// the CPU) repeats its first step T times; else 0.
size_t time_invariant_prefix(const std::vector<LayerPtr>& children, const Tensor& x, const Ctx& ctx);

// [T, N, ...] with every step a copy of x's only step (x: [1, N, ...]).
Tensor repeat_time_steps(const Tensor& x, int64_t T);

// [1, N, ...]: the sum over the T steps of g ([T, N, ...]), in step order.
Tensor sum_time_steps(const Tensor& g);

}  // namespace sm
