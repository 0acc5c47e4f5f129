// layout_plan.h — the one resolved parallel plan of a run (docs/architecture.md §5): from the
// layout flags, the mesh shape and the model, everything that decides how a step runs on the
// ranks — mode, mesh, the tensor-parallel plan, the pipeline schedule, its microbatches and
// partition, and the batch arithmetic (BatchPlan). Every command resolves it once, at its
// start (planner/auto_choice.h: plan_command_layout), prints it (describe()), passes it down by
// reference and runs it (Layout is built from it; setup_run applies its tp plan).
// Resolution has two phases, both pure (no communication):
//   plan_layout(options, mesh, world, batch)   the flags against the mesh: modes and their
//       combinations, then the batches and the pipeline's microbatches (--pp-microbatches, the
//       schedule file's count, or the default divisor) — before any communicator exists;
//   bind_layout_plan(plan, model)              the model: its tp plan (tp > 1), the unit count
//       against the logical stages, the schedule, a --pp-layout partition.
//   resolved_layout_plan(options, mesh, world, batch, model)   both, for tools and tests that
//       build a Layout from options (a Layout resolves nothing itself).
// A --pp-schedule-file is read once: in phase 1 when it gives the microbatch count (no
// --pp-microbatches), else in phase 2.
// Invariant: every inconsistency is an Input error naming the flag or file; the same inputs
// give the same plan on every rank (a caller compares describe() over the world).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/models/memopt_plan.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/parallel/strategy.h"
#include "spikemesh/parallel/tp_plan.h"

namespace sm {

class Model;

// --distributed-mode, parsed once at the boundary (dist_mode_from_name: an Input error naming
// the flag); everything after the plan compares these, never the names.
enum class DistMode { None, Dp, Fsdp, Tp, FsdpTp, Pp };
DistMode dist_mode_from_name(const std::string& name);
const char* dist_mode_name(DistMode m);

// --prefer: what the automatic layout choice optimises (planner/auto_layout.h).
enum class Preference { Speed, Memory, Capacity };
// "speed" | "memory" | "capacity"; anything else an Input error naming --prefer.
Preference preference_from_name(const std::string& name);
const char* preference_name(Preference p);

// --distributed-mode and its flags (checked by validate_parallel_flags, resolved by plan_layout).
struct LayoutOptions {
  std::string mode = "none";  // none (one rank) | dp | fsdp | tp | fsdp_tp (dp x tp by --mesh-shape) | pp
  StrategyOptions strategy;           // the dp family's settings
  bool sync_bn = false;               // BN statistics over the dp group
  bool split_wgrad = false;           // run B and W separately (the zero-bubble path; tests)
  bool tp_keep_first = false;         // --tp-keep-first: the first weight layer stays whole
  bool tp_keep_classifier = false;    // --tp-keep-classifier: the last weight layer stays whole
  bool tp_debug_comm = false;         // --tp-debug-comm: each layer's tp collective printed once
  // Pipeline parallelism (pp > 1 in the mesh; docs/semantics.md §6 flags):
  std::string pp_schedule = "auto";   // auto | gpipe | 1f1b | interleaved | zero_bubble
  int pp_virtual_stages = 1;          // logical stages per pipeline rank
  int pp_microbatches = 0;            // microbatches per step (0: plan_layout chooses; > 0 after it with pp)
  std::string pp_layout;              // "1|2|2|1" units per logical stage; "": balanced by measured cost
  bool pp_delay_wgrad = false;        // zero-bubble: W split off and delayed
  std::string pp_schedule_file;       // a user-written schedule (text form of pp_schedule.h)
  int64_t pp_cost_samples = 1;        // samples per microbatch of the dry-run that measures unit costs
  DType activations = DType::F32;     // the run's activation dtype (BF16/F16 under mixed precision): pp costs
                                      // are measured in it; F32, the default, means the model's own dtype
  std::string pp_transport = "auto";  // auto | staged | channels: how messages travel (pp_transfer.h)
  MemoptOptions memopt;               // --memopt-level and its flags (models/memopt_plan.h)
};

// Mode names and their combinations, without a mesh (Input errors naming the flag). Pure; the
// configuration check of `train` calls it as soon as the flags are read.
void validate_parallel_flags(const LayoutOptions& o);

// The batch flags of a command (parallel/parallel_config.h: batch_request).
struct BatchRequest {
  int64_t batch_size = 0;         // --batch-size: samples per dp replica and micro-step
  int64_t global_batch_size = 0;  // --global-batch-size (0: batch-size x dp x grad-accum)
  int64_t grad_accum = 1;         // --grad-accum (a pipeline accumulates over its microbatches instead)
};

// THE batch arithmetic of a step, computed once (plan_batch): global = replica x dp, replica =
// micro x accum. Without pp: accum = --grad-accum and micro = --batch-size, or
// --global-batch-size / (dp x accum). With pp: replica = --batch-size, or --global-batch-size /
// dp, split into accum = the pipeline's microbatches of micro samples.
struct BatchPlan {
  int64_t global = 0;   // samples per optimizer step over every replica
  int64_t replica = 0;  // samples per dp replica per optimizer step
  int64_t micro = 0;    // samples per micro-step (pp: per microbatch)
  int64_t accum = 1;    // micro-steps per optimizer step (pp: microbatches)
};

struct LayoutPlan {
  LayoutOptions options;      // validated; with pp, pp_microbatches and pp_cost_samples resolved
  DistMode mode = DistMode::None;                            // options.mode, parsed
  GradientReduction reduction = GradientReduction::AllReduce;  // the dp family's (mode x --optimizer-sharding)
  MeshShape mesh;             // dp x tp x pp
  int world_size = 1;
  BatchPlan batch;            // plan_batch (zero until the batch is planned)
  // bind_layout_plan:
  bool bound = false;
  std::string model_name;
  int units = 0;
  TpPlan tp;                  // tp > 1: which layers are split and how (not yet applied)
  PpSchedule schedule;        // pp > 1: resolved and validated
  std::vector<int> partition; // pp > 1: units per logical stage from --pp-layout; empty: measured at start-up

  bool pipelined() const { return mesh.pp > 1; }
  // A few lines: mode, mesh and strategy; the tp plan's size; the pipeline (schedule, ranks x
  // virtual stages, microbatches of n samples, partition or "measured"). The same on every rank.
  std::string describe() const;
};

// Phase 1: the flags against the mesh (world_size ranks shaped `mesh`), then the batches
// (plan_batch) when batch.batch_size or batch.global_batch_size is given. Pure.
LayoutPlan plan_layout(const LayoutOptions& o, const MeshShape& mesh, int world_size, const BatchRequest& batch);
// The same with `replica_batch` samples per dp replica and step (tools and tests; 0: no batch).
LayoutPlan plan_layout(const LayoutOptions& o, const MeshShape& mesh, int world_size, int64_t replica_batch);
// The batch part of phase 1: the plan's BatchPlan and, with pp, its microbatches (Input errors
// name the flags: divisibility, --grad-accum with pp, the schedule's rules).
void plan_batch(LayoutPlan& plan, const BatchRequest& batch);

// Phase 2: the model (built, not finalised for tp > 1: its tp plan is made here). Reads a
// --pp-schedule-file. Pure apart from that read.
void bind_layout_plan(LayoutPlan& plan, Model& model);

// Both phases at once, for tools and tests that build a Layout from options (a command resolves
// its plan once at its start and binds it to the model it builds): plan_layout(o, mesh,
// world_size, replica_batch) then bind_layout_plan(plan, model). replica_batch > 0: with pp,
// the microbatches are resolved from it; 0: o.pp_microbatches and o.pp_cost_samples are used as
// given. `model` is built (finalised with its tp plan applied, or not yet for tp > 1). Pure apart
// from reading a --pp-schedule-file; each rank that calls it reads the file itself, so a caller
// over several ranks that may see different files wraps the call in agree_on_error (comm/agree.h).
LayoutPlan resolved_layout_plan(const LayoutOptions& o, const MeshShape& mesh, int world_size, int64_t replica_batch,
                                Model& model);

}  // namespace sm
