// plan_pipeline.h — the pipeline part of `spikemesh plan` (cmd_plan.cpp): its flags and the
// printed plan (stages, units, measured costs, memory, simulated bubble, ASCII timeline).
#pragma once
#include <cstdint>
#include <string>

#include "spikemesh/comm/mesh.h"
#include "spikemesh/models/model_selection.h"

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

// One process, no communication: builds the model (CPU, f32), dry-runs every unit on a
// microbatch of batch / M samples, partitions (or takes --pp-layout), generates and validates
// the schedule, simulates it and prints the plan to stdout. Input errors name the flags.
void print_pp_plan(const ModelSelection& sel, const PpPlanFlags& f, const MeshShape& shape, int64_t batch);

}  // namespace sm
