// unit_placement.h — where one layout candidate (cost_model.h) runs each unit of the model, as
// the cost model's time and memory halves (time_model.h, memory_model.h) read it: the measured
// profile each unit's samples come from (memopt or not), its logical pipeline stage, the rank
// that holds it, the pipeline's schedule, and the tp all-reduce link.
// place_units places a candidate as one rank (pp = 1: every unit on rank 0 in stage 0, memopt on
// every unit when the candidate asks for it); place_pipeline_stages then places a pipeline on a
// partition (the time model's simulated best). Invariants: memopt_unit and stage_of have one
// entry per unit; rank_units[r] lists rank r's units in model order, every unit on exactly one
// rank; schedule is null exactly when pp = 1. Pure: no communication, no clock.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/planner/cost_model.h"

namespace sm {

struct UnitPlacement {
  const TpProfile* base = nullptr;  // memopt level 0 at the candidate's tp size
  const TpProfile* opt = nullptr;   // the candidate's memopt level (base at level 0)
  int tp = 1;
  LinkCost tp_link;                 // the all-reduce over the tp group
  double elem_bytes = 4;            // activation bytes per element
  std::vector<bool> memopt_unit;    // the unit runs memopt (its samples come from `opt`)
  std::vector<int> stage_of;        // logical stage per unit
  std::vector<std::vector<size_t>> rank_units;  // per pp rank, its units in order
  std::unique_ptr<PpSchedule> schedule;         // pp > 1 only

  size_t units() const { return base->units(); }
  // Unit u's measured costs at n samples per microbatch, from the profile its memopt choice gives.
  UnitSample sample(size_t u, double n) const { return (memopt_unit[u] ? opt : base)->unit(u, n); }
  // What unit u's forward keeps for its backward: its saved bytes and, but for unit 0 (whose input
  // is the model input, counted once), its kept input.
  static double keeps(size_t u, const UnitSample& s) { return s.saved_mb + (u > 0 ? s.input_kept_mb : 0.0); }
};

// `c` as one rank holding every unit. Input error when the profile lacks the candidate's tp size
// or memopt level.
UnitPlacement place_units(const LayoutCandidate& c, const ModelProfile& profile, const MachineCosts& machine);

// A pipeline: `schedule` over the logical stages of `partition` (units per logical stage); with
// memopt, the units of the round(0.5 x stages) logical stages whose base samples at n keep the
// most bytes run it (Layout::build_memopt's rule).
void place_pipeline_stages(UnitPlacement& pl, std::unique_ptr<PpSchedule> schedule, const std::vector<int>& partition,
                           int memopt_level, double n);

}  // namespace sm
