// auto_choice.h — the layout plan of a command, resolved once at its top: with
// `--distributed-mode auto` (or an explicit mode and `--prefer`) the planner's pick
// (auto_layout.h) over every layout of the job's ranks, filling the parallel flags not given;
// otherwise the flags against the mesh. `train`, `bench`, `plan` and `calibrate` call it; the
// pick comes back as a LayoutPlan (and, for the record, the ParallelConfig that describes it),
// never as flags rewritten and parsed again. Every function that plans is collective over the
// world it is handed (null: one rank).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <set>
#include <string>

#include "spikemesh/models/model_selection.h"
#include "spikemesh/parallel/parallel_config.h"
#include "spikemesh/planner/auto_layout.h"
#include "spikemesh/train/train_config.h"

namespace CLI {
class App;
}

namespace sm {

class Comm;

// This rank's index among the ranks of its node (collective over `world`; one rank: 0).
int local_rank_of(MPI_Comm world, int world_size);

// The device a run of `device_flag` / `precision` will use on this rank, without printing: the
// CPU for --device cpu, fp64 or no visible GPU; else GPU local_rank % visible.
Device planning_device(const std::string& device_flag, const std::string& precision, int local_rank);

// What a command's layout is planned for, besides its parallel flags.
struct LayoutTarget {
  ModelSelection model;
  std::string precision = "fp32";
  std::string device = "auto";
  std::string optimizer = "adam";
  double momentum = 0.9;
  int64_t batch_size = 0;  // --batch-size: samples per dp replica and micro-step
  int world_size = 1;
  int local_rank = 0;
};

// The target of a training configuration: its model (T from an event dataset --data, read under
// agreement over `world`), precision, device, optimizer and --batch-size.
LayoutTarget training_target(const TrainConfig& c, Comm* world, int world_size, int local_rank);

// Collective over `world`: THE layout plan of a command (phase 1 of layout_plan.h, batches
// planned). With --distributed-mode auto, or an explicit mode and --prefer: the planner's pick
// for t (rank 0 prints its report; `choice`, when not null, receives it) with the flags in
// `given` as constraints; its global batch is --global-batch-size or batch x ranks. Otherwise:
// the flags against the mesh they describe. Input errors name the flags (every rank fails).
LayoutPlan plan_command_layout(const ParallelConfig& c, const std::set<std::string>& given, const LayoutTarget& t,
                               Comm* world, AutoLayoutResult* choice = nullptr);

// The parallel configuration that runs `plan`: `c` with the mode, mesh (DP TP PP), sharding,
// pipeline, memopt and global batch the plan resolved — what config.toml and checkpoints record
// (a resumed run plans the same layout again) and the mesh is created from.
ParallelConfig recorded_parallel_config(const ParallelConfig& c, const LayoutPlan& plan);

// Every ranked layout as JSON lines (label, mode, mesh, reduction, schedule, microbatches, memopt,
// predicted step ms and its parts, peak/state/activation MB, fits, chosen).
std::string predictions_json(const AutoLayoutResult& r);

// The flags of `plan --prefer` and `calibrate --model` besides the parallel ones.
struct AutoPlanFlags {
  std::string precision = "fp32";
  std::string device = "auto";
  std::string optimizer = "adam";
  std::string predictions;  // write every prediction as JSON lines here (rank 0)
  int top = 5;
};
void add_auto_plan_flags(CLI::App& cmd, AutoPlanFlags& f);

// Collective over `world`: the planner's ranking for t under c's --prefer (default speed) and
// the constraints in `given`, the report printed by rank 0 (top f.top), the predictions file.
// `remeasure`: calibrate the machine again first.
AutoLayoutResult run_auto_plan(const ParallelConfig& c, const std::set<std::string>& given, const LayoutTarget& t,
                               const AutoPlanFlags& f, Comm* world, bool remeasure);

}  // namespace sm
