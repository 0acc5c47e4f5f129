// layout_plan.cpp — resolution of the layout plan (layout_plan.h): the flags against the mesh,
// the pipeline's microbatches, then the model's tp plan, schedule and partition.
#include "spikemesh/parallel/layout_plan.h"

#include <algorithm>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"

namespace sm {

DistMode dist_mode_from_name(const std::string& m) {
  if (m == "auto")
    SM_INPUT_ERROR("--distributed-mode auto is chosen by `train` and `bench` before a layout is planned (here it "
                   "needs one of none, dp, fsdp, tp, fsdp_tp, pp)");
  static const std::pair<const char*, DistMode> names[] = {{"none", DistMode::None}, {"dp", DistMode::Dp},
                                                           {"fsdp", DistMode::Fsdp}, {"tp", DistMode::Tp},
                                                           {"fsdp_tp", DistMode::FsdpTp}, {"pp", DistMode::Pp}};
  for (const auto& [name, mode] : names)
    if (m == name) return mode;
  SM_INPUT_ERROR("--distributed-mode must be none, dp, fsdp, tp, fsdp_tp or pp, got '" << m << "'");
}

const char* dist_mode_name(DistMode m) {
  switch (m) {
    case DistMode::None: return "none";
    case DistMode::Dp: return "dp";
    case DistMode::Fsdp: return "fsdp";
    case DistMode::Tp: return "tp";
    case DistMode::FsdpTp: return "fsdp_tp";
    case DistMode::Pp: return "pp";
  }
  return "?";
}

Preference preference_from_name(const std::string& n) {
  if (n == "speed") return Preference::Speed;
  if (n == "memory") return Preference::Memory;
  if (n == "capacity") return Preference::Capacity;
  SM_INPUT_ERROR("--prefer must be speed, memory or capacity, got '" << n << "'");
}

const char* preference_name(Preference p) {
  switch (p) {
    case Preference::Speed: return "speed";
    case Preference::Memory: return "memory";
    case Preference::Capacity: return "capacity";
  }
  return "?";
}

void validate_parallel_flags(const LayoutOptions& o) {
  const bool automatic = o.mode == "auto";  // the planner (planner/auto_layout.h) replaces it: modes unchecked here
  const DistMode m = automatic ? DistMode::Dp : dist_mode_from_name(o.mode);
  const std::string& z = o.strategy.sharding;
  if (z != "none" && z != "zero" && z != "zero2")
    SM_INPUT_ERROR("--optimizer-sharding must be none, zero or zero2, got '" << z << "'");
  if (z != "none" && m != DistMode::Dp && m != DistMode::Tp && m != DistMode::Pp)
    SM_INPUT_ERROR("--optimizer-sharding " << z << " needs --distributed-mode dp, tp or pp"
                                           << (m == DistMode::Fsdp ? " (fsdp always shards the optimizer state)" : ""));
  if (!(o.strategy.bucket_mb > 0)) SM_INPUT_ERROR("--bucket-mb must be positive, got " << o.strategy.bucket_mb);
  if (o.pp_virtual_stages < 1)
    SM_INPUT_ERROR("--pp-virtual-stages must be at least 1, got " << o.pp_virtual_stages);
  if (o.pp_microbatches < 0) SM_INPUT_ERROR("--pp-microbatches must be positive, got " << o.pp_microbatches);
  const std::string& k = o.pp_schedule;
  if (k != "auto" && k != "gpipe" && k != "1f1b" && k != "interleaved" && k != "zero_bubble")
    SM_INPUT_ERROR("--pp-schedule must be auto, gpipe, 1f1b, interleaved or zero_bubble, got '" << k << "'");
  const std::string& tr = o.pp_transport;
  if (tr != "auto" && tr != "staged" && tr != "channels")
    SM_INPUT_ERROR("--pp-transport must be auto, staged or channels, got '" << tr << "'");
  validate_memopt_options(o.memopt);
}

namespace {
// validate_parallel_flags plus the mesh: the world size, tp and pp the modes can run on.
void check_against_mesh(const LayoutOptions& o, int world_size, int tp, int pp) {
  validate_parallel_flags(o);
  const DistMode mode = dist_mode_from_name(o.mode);
  // How to get a size > 1 for `dim` (0 dp, 1 tp, 2 pp): with one rank, more ranks first.
  auto how_to_split = [&](int dim) {
    std::ostringstream os;
    const int n = std::max(2, world_size);
    const int shape[3] = {dim == 0 ? n : 1, dim == 1 ? 2 : 1, dim == 2 ? 2 : 1};
    if (world_size < 2)
      os << "this job has 1 rank; start at least 2, e.g. mpirun -np 2 spikemesh ... --mesh-shape " << shape[0] << " "
         << shape[1] << " " << shape[2];
    else
      os << "e.g. --mesh-shape " << (dim == 0 ? world_size : std::max(1, world_size / 2)) << " "
         << (dim == 1 ? 2 : 1) << " " << (dim == 2 ? 2 : 1) << " with " << world_size << " ranks";
    return os.str();
  };
  if (mode == DistMode::Pp && pp == 1)
    SM_INPUT_ERROR("--distributed-mode pp needs a pipeline size > 1 in --mesh-shape (DP TP PP): " << how_to_split(2));
  if (pp == 1 && (o.pp_schedule != "auto" || o.pp_virtual_stages != 1 || !o.pp_layout.empty() ||
                  !o.pp_schedule_file.empty() || o.pp_delay_wgrad || o.pp_microbatches != 0 ||
                  o.pp_transport != "auto"))
    SM_INPUT_ERROR("--pp-schedule/--pp-virtual-stages/--pp-microbatches/--pp-layout/--pp-schedule-file/"
                   "--pp-delay-wgrad/--pp-transport need a pipeline size > 1 in --mesh-shape (DP TP PP)");
  if (pp > 1) {
    if (mode == DistMode::Fsdp || mode == DistMode::FsdpTp)
      SM_INPUT_ERROR("--distributed-mode " << o.mode << " with pp = " << pp
                     << ": FSDP is not combined with pipeline parallelism (as in Megatron-LM): every microbatch "
                        "would gather each stage's parameters again; use --distributed-mode pp (dp replicas) or "
                        "--optimizer-sharding zero");
    if (o.strategy.sharding == "zero2")
      SM_INPUT_ERROR("--optimizer-sharding zero2 with pp = " << pp
                     << ": ZeRO-2 would reduce-scatter every microbatch's gradients (DeepSpeed refuses it with "
                        "pipelines too); use --optimizer-sharding zero (ZeRO-1)");
    if (o.pp_schedule_file.empty() && o.pp_microbatches > 0) {
      const std::string kind = o.pp_schedule == "auto" ? auto_schedule(o.pp_delay_wgrad, o.pp_virtual_stages)
                                                       : o.pp_schedule;
      check_schedule_choice(kind, o.pp_virtual_stages, o.pp_delay_wgrad, o.pp_microbatches,
                            pp * o.pp_virtual_stages);
    }
  }
  if ((mode == DistMode::Tp || mode == DistMode::FsdpTp) && tp == 1)
    SM_INPUT_ERROR("--distributed-mode " << o.mode << " needs a tensor-parallel size > 1 in --mesh-shape: "
                                         << how_to_split(1));
  if (tp > 1 && mode == DistMode::Fsdp)
    SM_INPUT_ERROR("--mesh-shape has tp = " << tp << ": FSDP over the tensor-parallel shards is --distributed-mode fsdp_tp");
  if (mode == DistMode::None && world_size > 1)
    SM_INPUT_ERROR("--distributed-mode none runs on one rank; with " << world_size
                                                                     << " ranks use --distributed-mode dp or fsdp");
}
}  // namespace

LayoutPlan plan_layout(const LayoutOptions& o, const MeshShape& mesh, int world_size, int64_t replica_batch) {
  return plan_layout(o, mesh, world_size, BatchRequest{replica_batch, 0, 1});
}

LayoutPlan plan_layout(const LayoutOptions& o, const MeshShape& mesh, int world_size, const BatchRequest& batch) {
  check_against_mesh(o, world_size, mesh.tp, mesh.pp);
  LayoutPlan p;
  p.options = o;
  p.mesh = mesh;
  p.world_size = world_size;
  p.mode = dist_mode_from_name(o.mode);
  const std::string& z = o.strategy.sharding;
  p.reduction = p.mode == DistMode::Fsdp || p.mode == DistMode::FsdpTp ? GradientReduction::Fsdp
                : z == "zero"                                          ? GradientReduction::Zero1
                : z == "zero2"                                         ? GradientReduction::Zero2
                                                                       : GradientReduction::AllReduce;
  if (batch.batch_size > 0 || batch.global_batch_size > 0) plan_batch(p, batch);
  return p;
}

namespace {
// With pp: the replica's batch in microbatches (docs/semantics.md §6 default); sets the plan's
// microbatch count and the samples of the dry run's microbatch.
void plan_microbatches(LayoutPlan& p, int64_t replica_batch) {
  LayoutOptions& r = p.options;  // the replica's batch in microbatches (docs/semantics.md §6 default)
  // a schedule file read here for its microbatch count is kept: the plan reads it once
  const int m = resolve_microbatches(replica_batch, p.mesh.pp, r.pp_virtual_stages, r.pp_microbatches, r.pp_schedule,
                                     r.pp_delay_wgrad, r.pp_schedule_file, &p.schedule);
  if (r.pp_schedule_file.empty() && r.pp_microbatches <= 0) {  // a chosen count meets the schedule's rules too
    const std::string kind = r.pp_schedule == "auto" ? auto_schedule(r.pp_delay_wgrad, r.pp_virtual_stages)
                                                     : r.pp_schedule;
    check_schedule_choice(kind, r.pp_virtual_stages, r.pp_delay_wgrad, m, p.mesh.pp * r.pp_virtual_stages);
  }
  r.pp_microbatches = m;
  r.pp_cost_samples = replica_batch / m;  // the dry run that balances the stages runs one real-size microbatch
}
}  // namespace

void plan_batch(LayoutPlan& p, const BatchRequest& r) {
  const int64_t dp = p.mesh.dp;  // the data ranks: tp ranks share a replica's samples, pp ranks its stages
  BatchPlan& b = p.batch;
  if (p.pipelined()) {
    if (r.grad_accum > 1)
      SM_INPUT_ERROR("--grad-accum " << r.grad_accum << " with pp = " << p.mesh.pp
                                     << ": a pipeline accumulates over its microbatches; use --pp-microbatches");
    if (r.global_batch_size > 0 && r.global_batch_size % dp != 0)
      SM_INPUT_ERROR("--global-batch-size " << r.global_batch_size << " is not divisible by dp " << dp);
    b.replica = r.global_batch_size > 0 ? r.global_batch_size / dp : r.batch_size;
    plan_microbatches(p, b.replica);
    b.accum = p.options.pp_microbatches;
    b.micro = b.replica / b.accum;
  } else {
    b.accum = r.grad_accum;
    if (r.global_batch_size > 0) {
      if (r.global_batch_size % (dp * b.accum) != 0)
        SM_INPUT_ERROR("--global-batch-size " << r.global_batch_size << " is not divisible by dp " << dp
                                              << " x --grad-accum " << b.accum << " = " << dp * b.accum);
      b.micro = r.global_batch_size / (dp * b.accum);
    } else {
      b.micro = r.batch_size;
    }
    b.replica = b.micro * b.accum;
  }
  b.global = b.replica * dp;
}

void bind_layout_plan(LayoutPlan& p, Model& model) {
  const LayoutOptions& o = p.options;
  p.model_name = model.info.name;
  p.units = static_cast<int>(model.units.size());
  if (p.mesh.tp > 1 && !model.finalized()) {  // a finalised model had its tp plan applied by the caller
    TpOptions to;
    to.tp = p.mesh.tp;
    to.keep_first = o.tp_keep_first;
    to.keep_classifier = o.tp_keep_classifier;
    to.shard_regions = !(o.sync_bn && p.mesh.dp > 1);  // synced BN over dp: regions stay whole
    to.regions_cross_units = p.mesh.pp == 1;           // stage boundaries carry whole activations
    p.tp = make_tp_plan(model, to);
  }
  if (p.pipelined()) {
    const int P = p.mesh.pp, v = o.pp_virtual_stages, S = P * v;
    if (S > p.units)
      SM_INPUT_ERROR("pipeline: " << S << " logical stages (pp " << P << " x --pp-virtual-stages " << v
                                  << ") but model '" << p.model_name << "' has only " << p.units << " units");
    if (p.schedule.per_rank.empty())  // not yet read by plan_microbatches
      p.schedule = resolve_schedule(o.pp_schedule, o.pp_schedule_file, P, v, o.pp_delay_wgrad, o.pp_microbatches);
    require_valid_schedule(p.schedule, o.pp_schedule_file.empty() ? "--pp-schedule " + p.schedule.kind
                                                                   : "--pp-schedule-file " + o.pp_schedule_file);
    if (!o.pp_layout.empty()) p.partition = parse_pp_layout(o.pp_layout, S, p.units);
  }
  p.bound = true;
}

LayoutPlan resolved_layout_plan(const LayoutOptions& o, const MeshShape& mesh, int world_size, int64_t replica_batch,
                                Model& model) {
  LayoutPlan p = plan_layout(o, mesh, world_size, replica_batch);
  bind_layout_plan(p, model);
  return p;
}

std::string LayoutPlan::describe() const {
  const LayoutOptions& o = options;
  std::ostringstream os;
  os << "layout plan: --distributed-mode " << o.mode << ", mesh " << mesh.str() << " (" << world_size << " rank"
     << (world_size > 1 ? "s" : "") << ")";
  if (o.strategy.sharding != "none") os << ", optimizer sharding " << o.strategy.sharding;
  if (o.sync_bn) os << ", sync-bn";
  os << "\n";
  if (mesh.tp > 1) {
    os << "  tensor parallel: " << mesh.tp << " ways";
    if (bound && !tp.layers.empty()) os << ", " << tp.sharded_layers() << " of " << tp.layers.size() << " layers split";
    if (o.tp_keep_first) os << ", first weight layer whole";
    if (o.tp_keep_classifier) os << ", classifier whole";
    os << "\n";
  }
  if (pipelined()) {
    os << "  pipeline: " << mesh.pp << " ranks x " << o.pp_virtual_stages << " virtual stage"
       << (o.pp_virtual_stages > 1 ? "s" : "") << ", schedule "
       << (bound ? schedule.kind : o.pp_schedule) << ", " << o.pp_microbatches << " microbatches";
    if (batch.replica > 0)
      os << " of " << o.pp_cost_samples << (o.pp_cost_samples == 1 ? " sample (" : " samples (") << batch.replica
         << " per replica)";
    os << ", partition " << (!partition.empty() ? layout_text(partition) : std::string("measured at start-up"))
       << ", transport " << o.pp_transport << (o.pp_delay_wgrad ? ", W delayed" : "") << "\n";
  }
  if (o.memopt.enabled()) {
    os << "  memopt: level " << o.memopt.level << ", checkpointed inputs " << (o.memopt.compress_x ? "as bits when binary" : "as they are");
    if (o.memopt.memory_budget_mb > 0) os << ", budget " << o.memopt.memory_budget_mb << " MB";
    if (pipelined()) os << ", on round(" << o.memopt.pp_stage_budget_ratio << " x stages) stages";
    os << "\n";
  }
  return os.str();
}

}  // namespace sm
