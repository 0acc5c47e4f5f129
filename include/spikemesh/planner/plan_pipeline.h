// plan_pipeline.h — the pipeline part of `spikemesh plan` (app/cmd_plan.cpp): its flags and the
// printed plan (stages, units, measured costs, memory, simulated bubble, ASCII timeline).
#pragma once
#include <cstdint>
#include <string>

#include "spikemesh/comm/mesh.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/parallel/layout_plan.h"

namespace CLI {
class App;
}

namespace sm {

// The flags of the printed pipeline plan (the pipeline's own are the parallel flags:
// parallel/parallel_config.h).
struct PpPlanFlags {
  int64_t columns = 96;
  bool print_schedule = false;
};

void add_pp_plan_flags(CLI::App& cmd, PpPlanFlags& f);

// One process, no communication: builds the model (CPU, f32), dry-runs every unit on one
// microbatch of the plan (layout_plan.h: resolved and bound, pp > 1), partitions it (or takes
// the plan's --pp-layout), simulates the plan's schedule and prints the plan to stdout.
void print_pp_plan(const ModelSelection& sel, const LayoutPlan& plan, const PpPlanFlags& f);

}  // namespace sm
