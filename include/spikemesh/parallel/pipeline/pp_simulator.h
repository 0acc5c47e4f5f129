// pp_simulator.h — checks and times any pipeline schedule (pp_schedule.h) without running it:
// validate_schedule proves a schedule complete, correctly ordered and deadlock-free;
// simulate gives every action's start and end, the makespan, the bubble fraction and the peak
// live activations per rank; ascii_timeline draws the result. Used by tests and `spikemesh plan`.
//
// Execution model (the runtime's contract): each rank runs its actions in list order, one at
// a time; a SEND is buffered (never waits for its receiver); a RECV blocks until its matching
// SEND (same message: direction, stage pair, microbatch) has started. Dependencies on another
// rank may only be met through a RECV that appears earlier on the consuming rank.
//
// Timing: a compute action takes its stage's cost (PpCosts: f, b, w per LOGICAL stage; BW
// costs b + w), a SEND or RECV takes `comm`; every action starts when its rank is free, a RECV
// not before its SEND starts, so a RECV ends no earlier than its SEND. Bubble fraction per
// rank = 1 − compute time / makespan (transfer time and waiting both count as bubble);
// overall = 1 − Σ compute / (ranks · makespan).
// Live activations: the activation of (stage, microbatch) is live from the start of its F to
// the end of its BW or, with the B/W split, of its B — we count it released at B (W still
// needs the stage's inputs but not the whole activation stack; the number of B-done, W-pending
// pairs is reported separately as peak_pending_wgrads).
#pragma once
#include <string>
#include <vector>

#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {

// Per logical stage costs (each vector has P·v entries) and the cost of one SEND or RECV.
struct PpCosts {
  std::vector<double> f, b, w;
  double comm = 0;
  // Every logical stage costs f, b, w (defaults F = B = W = 1, so BW = 2).
  static PpCosts uniform(int logical_stages, double f = 1, double b = 1, double w = 1, double comm = 0);
};

struct PpValidation {
  std::vector<std::string> errors;  // each names the rank and the action in text form
  bool ok() const { return errors.empty(); }
  std::string message() const;      // the errors, one per line
};

// Shape (stages, microbatches, placement, transfers only between different ranks), counts (one
// F and one backward — BW, or B and W — per (stage, microbatch); each needed SEND and RECV
// exactly once), then an in-order execution that finds actions running before their inputs
// (F before the F of the previous stage or before its RECV_F, B/BW before its F or the next
// stage's B, W before its B, a SEND before what it sends) and deadlocks (no rank can progress:
// every stuck rank is named with the action it waits at).
PpValidation validate_schedule(const PpSchedule& schedule);
// Throws an input error "<what>: invalid pipeline schedule: ..." unless valid.
void require_valid_schedule(const PpSchedule& schedule, const std::string& what);

struct PpTimedAction {
  PpAction action;
  double start = 0, end = 0;
};

struct PpSimulation {
  int ranks = 0;
  std::vector<std::vector<PpTimedAction>> per_rank;  // in each rank's execution order
  double makespan = 0;                                // latest end over all actions
  std::vector<double> busy;                           // compute time per rank
  std::vector<double> bubble;                         // per rank: 1 − busy / makespan
  double bubble_fraction = 0;                         // 1 − Σ busy / (ranks · makespan)
  std::vector<int> peak_live_activations;             // per rank (header comment)
  std::vector<int> peak_pending_wgrads;               // per rank: B done, W not yet
};

// Validates first (input error if invalid); costs must have one entry per logical stage.
PpSimulation simulate(const PpSchedule& schedule, const PpCosts& costs);

// Costs of each logical stage for a partition of measured per-unit costs (forward + backward
// of one microbatch): F = B = W = a third of the stage's sum.
PpCosts stage_costs_of(const std::vector<double>& unit_costs, const std::vector<int>& layout);
// The partition of `unit_costs` into the schedule's logical stages whose simulated makespan is
// smallest (pp_partition.h best_partition with the simulator as the score).
std::vector<int> simulated_best_partition(const std::vector<double>& unit_costs, const PpSchedule& schedule);

// One row per rank, `columns` characters spanning [0, makespan]: each column shows the action
// at its midpoint — 'F', 'B' (B or BW), 'W', '~' (a transfer), '.' idle.
//   rank 0 |FF...BBBB|
std::string ascii_timeline(const PpSimulation& simulation, int columns);

}  // namespace sm
