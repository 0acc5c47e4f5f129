// layout.h — the one place that knows how a run is laid out over ranks
// (docs/architecture.md §5). Built once from the mesh and the finalised model, a Layout owns:
//   * the local Stage (models/stage.h): the units this rank runs (all when pp = 1; with pp > 1
//     one contiguous chunk per logical stage it holds, run by the pipeline runtime,
//     parallel/pipeline/pp_runtime.h, over the pp comm: partition, schedule and runtime are built here);
//   * the gradient-reduction policy: a composable strategy piece over the dp comm (one rank:
//     none; dp with buckets, ZeRO-1/2, FSDP), which also decides each parameter's placement
//     (placement.h: replicated, or dp flat shards of the tp-local flat buffers);
//   * the collectives handed to layers through Ctx (synced BN over dp; the tp group);
//   * the groups that data reads, checkpoints and metric reductions are collective over
//     (LayoutGroups, layout_groups.h), reached through groups() alone: a Layout is not a
//     LayoutGroups, and code that only asks group questions takes a `const LayoutGroups&`.
// It is built only from a resolved plan bound to the model (layout_plan.h: the run's one plan,
// or resolved_layout_plan for tools and tests); it resolves nothing itself.
// The trainer and the bench drive it through the step protocol below and never name a mode:
//
//   [trainer: sync_buffers() before every step and evaluation; collective over dp]
//   begin_step()                                         zero gradients
//   run_microbatches(micro, ctx, loss_grad_scale)       pp = 1: forward_backward(mb, ..., m == M-1)
//                                                       for each; pp > 1: the pipeline schedule
//   [caller: unscale/check with shard_group(), clip, optimizer step on optimizer_params()]
//   after_optimizer_step()                               collective over dp (ZeRO gathers)
//
// Evaluation: evaluate(x, y, ctx), also for a rank with no samples (it still joins the
// strategy's collectives). Every function that communicates says over which group; with no
// mesh (one rank) nothing communicates and no MPI call is made.
// Invariants: every rank of a dp group runs the same sequence of collectives; after
// after_optimizer_step() replicas are bitwise identical (dp, ZeRO) or exact shards (FSDP).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/layout_groups.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/parallel/placement.h"
#include "spikemesh/parallel/strategy.h"
#include "spikemesh/parallel/tp_partial_sums.h"

namespace sm {

class Comm;
class Mesh;
class Model;
class CommCollectives;
struct CommCounters;
class PipelineRuntime;

// One microbatch of this rank: x [T, n, ...] (the stage's input), y [n] i64, and the global
// index of its first sample in the step's global batch (dropout masks are keyed by it).
struct MicroBatch {
  Tensor x, y;
  int64_t sample_offset = 0;
  Tensor target;  // host f64 [n, K] soft targets of a mixing augmentation (data/augment.h), else undefined
};

struct MicroResult {
  LossResult loss;  // this rank's microbatch (count 0 when it held no samples)
  double reset_ms = 0, forward_ms = 0, backward_ms = 0;  // reset: neuron state back to rest
};

// The groups a run needs before its Layout exists (the Layout's groups().data_rank() and
// groups().data_size() agree with them): the ranks that read the dataset collectively, and this
// rank's part of every global batch. Null mesh: one rank.
Comm* data_group_of(Mesh* mesh);
int data_ranks_of(Mesh* mesh);

// The stage, the strategy and the step protocol; the groups and their queries are a
// LayoutGroups held here (composition), reached through groups().
class Layout {
 public:
  // The layout `plan` describes (layout_plan.h: resolved and bound to this model; its tp plan
  // already applied). mesh == nullptr: one rank. Otherwise collective over the world: checks
  // that every dp replica starts identical, shards the model (ZeRO/FSDP) and, with pp, measures
  // the unit costs and builds the pipeline. `model` is finalised and must outlive the layout.
  Layout(Model& model, Mesh* mesh, LayoutPlan plan);
  // A data-parallel layout over one communicator (dp = its size, tp = pp = 1; it is also the
  // world of the layout): what tests and tools use without a Mesh. `plan` is resolved for the
  // mesh dp x 1 x 1 of dp.size() ranks and bound to `model`. Collective over `dp`.
  Layout(Model& model, Comm& dp, LayoutPlan plan);
  ~Layout();
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;

  // The communicator groups and their queries (ranks, sizes, data/checkpoint/metric groups,
  // counters): the one way to them.
  LayoutGroups& groups() { return groups_; }
  const LayoutGroups& groups() const { return groups_; }

  Model& model() { return model_; }
  Stage& stage() { return *stage_; }
  std::string describe() const;  // e.g. "dp=2 tp=1 pp=1 zero2 sync-bn"; "dp=1 tp=1 pp=1" alone
  const LayoutPlan& plan() const { return plan_; }

  // Whether this rank's loss, accuracy and sample counts enter the world's metric sums: the tp
  // ranks of a replica compute the same outputs, so only tp rank 0 counts them.
  bool counts_in_metrics() const;

  // What the optimizer steps on this rank, and the group over which those holders are
  // disjoint shards (global-norm clipping, finite-gradient agreement); nullptr = replicas.
  std::vector<Param*> optimizer_params();
  Collectives* shard_group();
  // The global gradient norm (clipping) and finite-gradient agreement: each rank sums the
  // squares of norm_params() and the sums are all-reduced over norm_group(). Without tp: the
  // optimizer's holders over shard_group(). With tp: views of the grads of the pieces this
  // rank writes to a checkpoint (every element of the model once over the world), over the
  // world. The views live until the next call.
  std::vector<Param*> norm_params();
  Collectives* norm_group();
  // Placement of every holder (placement.h). saving: a replicated piece is listed by one rank
  // of its group (others list empty boxes); loading: every rank lists what it needs.
  std::vector<ParamPlacement> placements(bool saving);
  // Whether this rank writes (saving) / reads (loading) the replicated tensors (BN buffers).
  bool holds_replicated(bool saving) const;
  // After a checkpoint was read into placements(false): replicas rebuilt. Collective over dp.
  void after_load();

  // ---- the step protocol (see the header) ----
  void begin_step();
  MicroResult forward_backward(const MicroBatch& mb, Ctx& ctx, double loss_grad_scale, bool last_micro);
  void after_optimizer_step();
  // Eval-mode forward of this rank's part of a batch; x may hold no samples. Collective over dp.
  MicroResult evaluate(const Tensor& x, const Tensor& y, Ctx& ctx);
  // Before a step or an evaluation: BN running statistics of dp rank 0 copied to every rank
  // unless --sync-bn (DDP's broadcast_buffers). Collective over dp.
  void sync_buffers();
  // Collective over dp: every replica's parameters identical (a no-op where ranks hold
  // distinct shards); throws an internal error naming the ranks otherwise.
  void check_replicas(const std::string& what);
  // FSDP: the model's Params hold full values until release (collective over dp).
  void gather_full_params();
  void release_full_params();

  // Every microbatch of one optimizer step, forward and backward (pp = 1: forward_backward
  // per microbatch; pp > 1: the pipeline schedule over all of them). One result per microbatch
  // (the loss counts only where it is computed: the last stage). Collective over dp, tp, pp.
  std::vector<MicroResult> run_microbatches(const std::vector<MicroBatch>& micro, Ctx& ctx, double loss_grad_scale);
  // Firing rates etc. of every layer of the MODEL in model order (pp > 1: each stage's gathered
  // over the pp group, so every rank returns the same list; tp > 1: the mean over the tp group,
  // whose ranks hold equal channel shards of a split layer; collective over pp and tp). Layers
  // that have not run yet are missing (as Model::stats()).
  std::vector<LayerStat> layer_stats();
  // Pipeline parallelism: the runtime (null when pp = 1) and the measured per-unit costs (ms; empty when --pp-layout was given; the partition is
  // pipeline()->units_per_stage()).
  PipelineRuntime* pipeline() { return pipeline_.get(); }
  const std::vector<double>& pp_unit_costs() const { return pp_unit_costs_; }

  // memopt (models/memopt_plan.h): the configuration the stage runs (set at construction from
  // the plan's level: level 1 everywhere memopt applies; the search of train/memopt_search.h
  // may replace it), and with pp the logical stages memopt applies to (every rank the same list;
  // by activation bytes measured in the dry run, --pp-memopt-stage-budget-ratio of them).
  const MemoptConfig& memopt() const { return memopt_; }
  void set_memopt(MemoptConfig c);
  const std::vector<int>& memopt_stages() const { return memopt_stages_; }
  // Which local units memopt may touch (those of memopt_stages(); all when pp = 1).
  std::vector<bool> memopt_units() const;

  StrategyStats stats() const;
  // The gradient-reduction piece (introspection: bucket layouts, FSDP memory); tests only.
  ParallelStrategy& strategy() { return *strategy_; }

 private:
  void fill_ctx(Ctx& ctx);
  std::vector<LayerStat> stats_over_pp();  // collective over pp
  void build();
  void build_pipeline();
  void build_memopt();
  void finish_backward();  // the step's tp sums and the strategy's closing reductions
  Model& model_;
  LayoutGroups groups_;
  std::unique_ptr<CommCollectives> tp_coll_;  // handed to layers as ctx.tp
  std::unique_ptr<TpPartialSums> tp_sums_;    // gradients summed over tp, unit by unit (or null)
  UnitHooks* grad_hooks();                    // tp_sums_ in front of the strategy, or the strategy
  std::unique_ptr<CommCollectives> world_coll_;  // the gradient norm with tp
  std::vector<Param> norm_views_;                // norm_params()' grad views
  LayoutPlan plan_;
  const LayoutOptions& opts_ = plan_.options;
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<PipelineRuntime> pipeline_;
  std::vector<double> pp_unit_costs_;
  std::vector<double> pp_unit_saved_mb_;  // dry run: activation bytes each unit keeps (max over the world)
  MemoptConfig memopt_;
  std::vector<int> memopt_stages_;
  std::vector<int> stage_of_unit_;        // logical stage of each local unit (pp; else 0)
  std::unique_ptr<ParallelStrategy> strategy_;
  std::unique_ptr<CommCollectives> bn_sync_;
};

}  // namespace sm
