// memory_model.h — the peak-memory half of the cost model (cost_model.h): what a rank's gradient
// strategy holds, and its activations at each of its units' backward.
//   strategy   parameters, gradients, optimizer state and dp's packed buckets as the strategy
//              holds them (strategy.h, data_parallel.h, zero.h, fsdp.h), and per unit u, what the
//              reductions of the units after u hold in flight until the end of backward (ZeRO-2
//              and FSDP: their full gradients; the collectives' measured scratch)
//   activations at u's backward: the saved bytes and kept inputs of u's stage up to u, under pp
//              what the other live (stage, microbatch) pairs keep (the rank's schedule replayed: a
//              pair alive from its F to its B), u's output and its gradient, u's measured
//              backward transient, the model input
//   backward   the strategy's state plus the largest, over the rank's units, of in-flight +
//              activations
// Pure: a function of its inputs alone. Sizes in MiB.
#pragma once
#include <vector>

#include "spikemesh/parallel/strategy.h"
#include "spikemesh/planner/cost_model.h"
#include "spikemesh/planner/unit_placement.h"

namespace sm {

// What the strategy of one rank holding units with `unit_mb` parameter MiB each (in order) over
// a dp group of `dp` holds: `state` always, and in_flight[i] more while unit i runs its backward,
// the units after it done. `states`: optimizer state tensors per parameter.
struct StrategyMemory {
  double state = 0;
  std::vector<double> in_flight;
};
StrategyMemory strategy_memory(const std::vector<double>& unit_mb, GradientReduction r, int dp, int states,
                               const MachineCosts& m);

// Per unit of pp rank r (rank_units[r], in order): its activations while it runs its backward,
// at n samples per microbatch.
std::vector<double> activations_at_backward(const UnitPlacement& pl, int r, double n);

// The backward phase's peak of pp rank r: strategy state + max over its units of in-flight +
// activations.
double backward_peak(const UnitPlacement& pl, const StrategyMemory& sm, int r, double n);

}  // namespace sm
