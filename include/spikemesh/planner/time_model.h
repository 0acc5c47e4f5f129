// time_model.h — the step-time half of the cost model (cost_model.h): a placed layout's compute
// (its units' forward and backward, and their tp all-reduces) on one rank or through the pipeline
// simulator, then each rank's tail: the dp family's reductions and the optimizer step.
//   tp         calls·alpha + bytes·beta of the tp all-reduce link, per unit (synchronous)
//   one rank   Σ units forward + backward + tp at n samples
//   pipeline   the simulator (pp_simulator.h) on the best partition of the base unit costs, one
//              send/recv of the boundary activation (bits when spikes) per message; on an
//              oversubscribed CPU (x > 1) the compute scaled by max(1, o·x) / x, o the
//              simulated occupancy, and simulated again, twice
//   dp         dp: bucketed all-reduce; ZeRO-1/2: a reduce-scatter and an all-gather per unit;
//              FSDP: two all-gathers and a reduce-scatter per unit and microbatch
//   optimizer  the elements the rank steps x the calibrated time per element
// Pure: a function of its inputs alone.
#pragma once
#include <vector>

#include "spikemesh/planner/cost_model.h"
#include "spikemesh/planner/unit_placement.h"

namespace sm {

// The compute of one step: busy time per pp rank, the makespan, the tp time (reported), and the
// pipeline's partition (units per logical stage; empty for one rank).
struct ComputeTimeline {
  std::vector<double> busy;
  double makespan = 0;
  double tp_comm_ms = 0;
  std::vector<int> partition;
};

// Unit u's tp all-reduces at n samples per microbatch (0 without tp).
double tp_unit_ms(const UnitPlacement& pl, size_t u, double n);

// pp = 1: every unit on rank 0, n samples per microbatch, one microbatch.
ComputeTimeline single_rank_compute(const UnitPlacement& pl, double n);

// pp > 1: places `pl`'s pipeline (place_pipeline_stages) on the partition the simulator finds
// best for candidate `c`'s schedule, then simulates its M microbatches of n samples.
ComputeTimeline pipeline_compute(UnitPlacement& pl, const LayoutCandidate& c, const MachineCosts& machine, double n);

// Gradient reduction and parameter gathering over dp for units with `unit_mb` MiB each, M
// microbatches (FSDP gathers per microbatch); 0 for dp = 1.
double dp_comm_ms(const std::vector<double>& unit_mb, GradientReduction r, int dp, int M, const MachineCosts& m);

// One optimizer step over `param_mb` MiB of f32 parameters, a 1/dp share of them when sharded.
double optimizer_step_ms(double param_mb, bool sharded, int dp, const MachineCosts& m);

}  // namespace sm
