// auto_choice.h — `--distributed-mode auto` / `--prefer` for the commands (train, bench, plan):
// from a command's flags to the planner's request (planner/auto_layout.h), and its choice back
// into the command's flags. Every function that plans is collective over the world.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include "spikemesh/app/commands.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/planner/auto_layout.h"
#include "spikemesh/train/train_config.h"

namespace CLI {
class App;
}

namespace sm {

// This rank's index among the ranks of its node (collective over the world).
int local_rank_of(const AppEnv& env);

// The device a run of `device_flag` / `precision` will use on this rank, without printing: the
// CPU for --device cpu, fp64 or no visible GPU; else GPU local_rank % visible.
Device planning_device(const std::string& device_flag, const std::string& precision, int local_rank);

// The planner's profile request for a model selection.
ProfileRequest profile_request_of(const ModelSelection& sel, const std::string& precision, Device dev,
                                  const std::string& optimizer, double momentum, bool keep_first, bool keep_classifier);

// train: --distributed-mode auto, or an explicit mode with --prefer. Plans over the world (rank
// 0 prints the report), then sets the mode, --mesh-shape (DP TP PP; the mesh-dim flags cleared),
// --optimizer-sharding, the pp flags, --memopt-level and --global-batch-size of `c` that were not
// in `given`. Input error when --prefer has nothing to fill. Collective over the world.
void apply_auto_layout(TrainConfig& c, const std::set<std::string>& given, const AppEnv& env);

// Every ranked layout as JSON lines (label, mode, mesh, reduction, schedule, microbatches, memopt,
// predicted step ms and its parts, peak/state/activation MB, fits, chosen).
std::string predictions_json(const AutoLayoutResult& r);

// Collective over the world of `env`: choose_layout on the job's ranks.
AutoLayoutResult plan_auto_layout(const AppEnv& env, const AutoLayoutRequest& r);

// The planner's flags of `plan` and `calibrate` (train and bench take theirs from their own).
struct AutoPlanFlags {
  std::string prefer;               // plan: "" (no ranking) | speed | memory | capacity
  std::string calibration;          // "": default_calibration_path()
  std::string precision = "fp32";
  std::string device = "auto";
  std::string optimizer = "adam";
  std::string predictions;          // write every prediction as JSON lines here (rank 0)
  int64_t global_batch = 0;         // 0: --batch-size x ranks
  int top = 5;
};
void add_auto_plan_flags(CLI::App& cmd, AutoPlanFlags& f, bool with_prefer);

// Collective over the world of `env`: the planner for `sel` (batch_per_rank x ranks samples
// unless f.global_batch), the report printed by rank 0 (top f.top), the predictions file.
AutoLayoutResult run_auto_plan(const AppEnv& env, const ModelSelection& sel, const AutoPlanFlags& f,
                               int64_t batch_per_rank, bool keep_first, bool keep_classifier, bool remeasure);

// The global batch and T the planner plans a training run for: --global-batch-size or
// --batch-size x ranks; T from an event dataset (--data) when it holds frames.
int64_t auto_global_batch(const TrainConfig& c, int world);

}  // namespace sm
