// plan_pipeline.h — the pipeline part of `spikemesh plan` (cmd_plan.cpp): its flags and the
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

struct PpPlanFlags {
  std::string schedule = "auto", layout, schedule_file;
  int64_t virtual_stages = 1, microbatches = 0, columns = 96;
  bool delay_wgrad = false, print_schedule = false;
};

void add_pp_plan_flags(CLI::App& cmd, PpPlanFlags& f);

// The layout options the pipeline flags describe (mode "pp").
LayoutOptions pp_layout_options(const PpPlanFlags& f);

// One process, no communication: builds the model (CPU, f32), dry-runs every unit on one
// microbatch of the plan (layout_plan.h: resolved and bound, pp > 1), partitions it (or takes
// the plan's --pp-layout), simulates the plan's schedule and prints the plan to stdout.
void print_pp_plan(const ModelSelection& sel, const LayoutPlan& plan, const PpPlanFlags& f);

}  // namespace sm
