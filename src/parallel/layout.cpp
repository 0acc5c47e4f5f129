// layout.cpp — the Layout: composition of stage, gradient-reduction strategy and the
// collectives handed to layers; the one forward/backward path of a training step.
#include "spikemesh/parallel/layout.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/graph_capture_cuda.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/comm_collectives.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/parallel/flat_shard.h"
#include "spikemesh/parallel/pp_costs.h"
#include "spikemesh/parallel/pp_partition.h"
#include "spikemesh/parallel/pp_runtime.h"
#include "spikemesh/parallel/pp_simulator.h"
#include "spikemesh/parallel/replica_check.h"

namespace sm {

void validate_parallel_flags(const LayoutOptions& o) {
  const std::string& m = o.mode;
  if (m == "auto")
    SM_INPUT_ERROR("--distributed-mode auto is not implemented yet (available: none, dp, fsdp, tp, fsdp_tp, pp)");
  if (m != "none" && m != "dp" && m != "fsdp" && m != "tp" && m != "fsdp_tp" && m != "pp")
    SM_INPUT_ERROR("--distributed-mode must be none, dp, fsdp, tp, fsdp_tp or pp, got '" << m << "'");
  const std::string& z = o.strategy.sharding;
  if (z != "none" && z != "zero" && z != "zero2")
    SM_INPUT_ERROR("--optimizer-sharding must be none, zero or zero2, got '" << z << "'");
  if (z != "none" && m != "dp" && m != "tp" && m != "pp")
    SM_INPUT_ERROR("--optimizer-sharding " << z << " needs --distributed-mode dp, tp or pp"
                                           << (m == "fsdp" ? " (fsdp always shards the optimizer state)" : ""));
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
}

void validate_layout_for_mesh(const LayoutOptions& o, int world_size, int tp, int pp) {
  validate_parallel_flags(o);
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
  if (o.mode == "pp" && pp == 1)
    SM_INPUT_ERROR("--distributed-mode pp needs a pipeline size > 1 in --mesh-shape (DP TP PP): " << how_to_split(2));
  if (pp == 1 && (o.pp_schedule != "auto" || o.pp_virtual_stages != 1 || !o.pp_layout.empty() ||
                  !o.pp_schedule_file.empty() || o.pp_delay_wgrad || o.pp_microbatches != 0 ||
                  o.pp_transport != "auto"))
    SM_INPUT_ERROR("--pp-schedule/--pp-virtual-stages/--pp-microbatches/--pp-layout/--pp-schedule-file/"
                   "--pp-delay-wgrad/--pp-transport need a pipeline size > 1 in --mesh-shape (DP TP PP)");
  if (pp > 1) {
    if (o.mode == "fsdp" || o.mode == "fsdp_tp")
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
  if ((o.mode == "tp" || o.mode == "fsdp_tp") && tp == 1)
    SM_INPUT_ERROR("--distributed-mode " << o.mode << " needs a tensor-parallel size > 1 in --mesh-shape: "
                                         << how_to_split(1));
  if (tp > 1 && o.mode == "fsdp")
    SM_INPUT_ERROR("--mesh-shape has tp = " << tp << ": FSDP over the tensor-parallel shards is --distributed-mode fsdp_tp");
  if (o.mode == "none" && world_size > 1)
    SM_INPUT_ERROR("--distributed-mode none runs on one rank; with " << world_size
                                                                     << " ranks use --distributed-mode dp or fsdp");
}

Layout::Layout(Model& model, Mesh* mesh, const LayoutOptions& opts)
    : model_(model), mesh_(mesh), opts_(opts), stage_(std::make_unique<Stage>(model, 0, model.units.size())) {
  world_ = mesh ? &mesh->world() : nullptr;
  dp_ = mesh ? &mesh->dp() : nullptr;
  if (mesh && mesh->shape().tp > 1) {
    tp_ = &mesh->tp();
    tp_coll_ = std::make_unique<CommCollectives>(*tp_);
  }
  if (mesh && (mesh->shape().tp > 1 || mesh->shape().pp > 1)) world_coll_ = std::make_unique<CommCollectives>(*world_);
  build(mesh ? mesh->shape().tp : 1, mesh ? mesh->shape().pp : 1);
}

Layout::Layout(Model& model, Comm& dp, const LayoutOptions& opts)
    : model_(model), opts_(opts), stage_(std::make_unique<Stage>(model, 0, model.units.size())) {
  world_ = dp_ = &dp;
  build(1, 1);
}

void Layout::build(int tp, int pp) {
  SM_CHECK(model_.finalized(), "a layout needs a finalised model");
  validate_layout_for_mesh(opts_, world_size(), tp, pp);
  if (pp > 1) build_pipeline(pp);
  if (tp > 1)
    for (Param* p : stage_->params()) {
      const bool tp_shard = p->shard.sharded() && p->shard.group == ShardSpec::Group::TP;
      SM_CHECK(!tp_shard || p->shard.count == tp, "parameter '" << p->name << "' is split " << p->shard.count
                                                                 << " ways for tp = " << tp);
      if (p->grad_summed_over_tp) tp_partial_.push_back(p);
    }
  if (dp_) {
    // "tp": the dp family over dp (of size 1 when the mesh has dp 1); "fsdp_tp": FSDP over dp of
    // the tp-local flat buffers
    const std::string mode = opts_.mode == "tp" ? "dp" : opts_.mode == "fsdp_tp" ? "fsdp" : opts_.mode;
    strategy_ = make_strategy(*stage_, *dp_, mode, opts_.strategy);  // collective over dp ("none": dp)
    if (opts_.sync_bn) bn_sync_ = std::make_unique<CommCollectives>(*dp_);
  } else {
    strategy_ = make_single_rank_strategy(*stage_);
  }
}

Layout::~Layout() = default;

int Layout::world_size() const { return world_ ? world_->size() : 1; }

std::string Layout::describe() const {
  if (!world_) return "dp=1 tp=1 pp=1";
  const std::string shape = mesh_ ? mesh_->shape().str() : MeshShape{dp_->size(), 1, 1}.str();
  std::string pipe;
  if (pipeline_)
    pipe = " pp:" + pipeline_->schedule().kind + " v" + std::to_string(opts_.pp_virtual_stages) + " m" +
           std::to_string(pipeline_->schedule().microbatches) + " layout " + layout_text(pipeline_->units_per_stage());
  return shape + " " + strategy_->name() + (tp_ ? "+tp" : "") + pipe + (opts_.sync_bn ? " sync-bn" : "");
}

// Every rank reads its dp part of each global batch (the tp ranks of a dp replica read the same
// samples) and writes its own shards: the data and checkpoint groups are the world.
Comm* data_group_of(Mesh* mesh) { return mesh ? &mesh->world() : nullptr; }
int data_ranks_of(Mesh* mesh) { return mesh ? mesh->shape().dp : 1; }

int Layout::data_rank() const { return dp_ ? dp_->rank() : 0; }
int Layout::data_size() const { return dp_ ? dp_->size() : 1; }
Comm* Layout::checkpoint_comm() { return world_; }
Comm* Layout::metrics_comm() { return world_; }
bool Layout::is_root() const { return !world_ || world_->rank() == 0; }

std::vector<Param*> Layout::optimizer_params() { return strategy_->optimizer_params(); }
Collectives* Layout::shard_group() { return strategy_->shard_group(); }

std::vector<Param*> Layout::norm_params() {
  if (!tp_ && !pp_) return optimizer_params();
  // With tp or pp: the pieces this rank would WRITE to a checkpoint hold every element of the model
  // exactly once over the world (tp shards on their tp rank, tensors replicated over tp on tp
  // rank 0, dp replicas on dp rank 0, ZeRO/FSDP shards where they live) — as grad views.
  norm_views_.clear();
  for (const ParamPlacement& pl : placements(true))
    for (const PlacedPiece& pc : pl.pieces) {
      if (!pl.holder || pc.box.empty()) continue;
      Param v;
      v.name = pl.holder->name;
      v.grad = pl.holder->grad.view({-1}).slice0(pc.pos, pc.pos + pc.box.numel());
      norm_views_.push_back(std::move(v));
    }
  std::vector<Param*> out;
  for (Param& v : norm_views_) out.push_back(&v);
  return out;
}

Collectives* Layout::norm_group() { return tp_ || pp_ ? world_coll_.get() : shard_group(); }

int Layout::tp_rank() const { return tp_ ? tp_->rank() : 0; }
int Layout::tp_size() const { return tp_ ? tp_->size() : 1; }
bool Layout::counts_in_metrics() const { return tp_rank() == 0 && (!pp_ || stage_->is_last()); }
int Layout::pp_rank() const { return pp_ ? pp_->rank() : 0; }
int Layout::pp_size() const { return pp_ ? pp_->size() : 1; }

std::vector<ParamPlacement> Layout::placements(bool saving) {
  std::vector<ParamPlacement> out = strategy_->placements(saving);
  if (saving && tp_rank() != 0)  // tensors replicated over tp are written by tp rank 0 alone
    for (ParamPlacement& pl : out)
      for (PlacedPiece& pc : pl.pieces)
        if (!(pc.logical->shard.sharded() && pc.logical->shard.group == ShardSpec::Group::TP))
          pc.box = empty_box(pc.logical->shape.size());
  return out;
}
bool Layout::holds_replicated(bool saving) const { return strategy_->holds_replicated(saving); }
void Layout::after_load() { strategy_->after_load(); }

void Layout::fill_ctx(Ctx& ctx) {
  ctx.bn_sync = bn_sync_.get();
  ctx.tp = tp_coll_.get();  // nullptr for tp = 1
  ctx.tp_debug_comm = opts_.tp_debug_comm;
  ctx.split_wgrad = opts_.split_wgrad;
}

void Layout::sync_buffers() {
  if (dp_ && !opts_.sync_bn) broadcast_buffers(model_, *dp_, 0);
}

void Layout::begin_step() { strategy_->begin_step(); }

MicroResult Layout::forward_backward(const MicroBatch& mb, Ctx& ctx, double loss_grad_scale, bool last_micro) {
  SM_CHECK(stage_->is_last() && model_.loss, "the training step needs the loss on this stage");
  MicroResult r;
  fill_ctx(ctx);
  ctx.training = true;
  ctx.sample_offset = mb.sample_offset;
  Timer t;
  stage_->reset_state();  // neuron state starts at rest for every microbatch
  strategy_->begin_micro(last_micro);
  r.reset_ms = t.ms();
  t.reset();
  Tensor out = stage_->forward(mb.x, ctx, strategy_.get());     // [T, n, K]
  r.loss = model_.loss->forward(out, mb.y, ctx.slot);
  r.forward_ms = t.ms();
  t.reset();
  Tensor dout = model_.loss->backward(loss_grad_scale, ctx.slot);  // [T, n, K]
  stage_->backward_input(dout, ctx, strategy_.get());
  if (ctx.split_wgrad) stage_->backward_weight(ctx, strategy_.get());
  if (last_micro)  // the accumulated partial sums, once per step
    for (Param* p : tp_partial_) tp_coll_->all_reduce_sum(p->grad);  // collective over tp, in param order
  strategy_->end_backward();
  if (!active_graph_capture()) synchronize(model_.device());  // CUDA: the phase time is the device's
  r.backward_ms = t.ms();
  return r;
}

std::vector<MicroResult> Layout::run_microbatches(const std::vector<MicroBatch>& micro, Ctx& ctx,
                                                  double loss_grad_scale) {
  std::vector<MicroResult> out;
  if (!pipeline_) {
    for (size_t m = 0; m < micro.size(); ++m)
      out.push_back(forward_backward(micro[m], ctx, loss_grad_scale, m + 1 == micro.size()));
    return out;
  }
  fill_ctx(ctx);
  ctx.training = true;
  strategy_->begin_micro(true);  // the runtime lets a unit's last backward through to the reduction
  const PpStepOutcome o = pipeline_->train(micro, ctx, loss_grad_scale, strategy_.get());  // collective over pp
  Timer t;
  for (Param* p : tp_partial_) tp_coll_->all_reduce_sum(p->grad);  // collective over tp, in param order
  strategy_->end_backward();                                     // dp reductions of the stage finish
  synchronize(model_.device());
  out.resize(micro.size());
  for (size_t m = 0; m < micro.size(); ++m) out[m].loss = o.losses[m];
  out[0].reset_ms = o.reset_ms;  // the step's sums
  out[0].forward_ms = o.forward_ms;
  out[0].backward_ms = o.backward_ms + o.wait_ms + t.ms();
  return out;
}

void Layout::build_pipeline(int P) {
  pp_ = &mesh_->pp();
  const int v = opts_.pp_virtual_stages, S = P * v;
  const int units = static_cast<int>(model_.units.size());
  if (S > units)
    SM_INPUT_ERROR("pipeline: " << S << " logical stages (pp " << P << " x --pp-virtual-stages " << v << ") but model '"
                                << model_.info.name << "' has only " << units << " units");
  // Every rank reads a schedule file itself: one that is missing or different on some node
  // must fail everywhere with one message, not leave the others waiting (collective over world).
  PpSchedule sched;
  agree_on_error(world_, [&] {
    sched = resolve_schedule(opts_.pp_schedule, opts_.pp_schedule_file, P, v, opts_.pp_delay_wgrad,
                             opts_.pp_microbatches);
    require_valid_schedule(sched, opts_.pp_schedule_file.empty() ? "--pp-schedule " + sched.kind
                                                                 : "--pp-schedule-file " + opts_.pp_schedule_file);
  });
  check_same_text(*world_, to_text(sched),
                  opts_.pp_schedule_file.empty() ? "the pipeline schedule" : "--pp-schedule-file " + opts_.pp_schedule_file);
  // A dry run of every unit on every rank (tp peers together): local output shapes, and the
  // measured costs (max over the world: identical everywhere) unless --pp-layout fixes the split.
  std::vector<int> partition;  // units per logical stage
  if (!opts_.pp_layout.empty()) partition = parse_pp_layout(opts_.pp_layout, S, units);
  Ctx ctx;
  ctx.tp = tp_coll_.get();
  const UnitDryRun dry = dry_run_units(model_, opts_.pp_cost_samples, ctx, opts_.pp_layout.empty(),
                                         opts_.activations == DType::F32 ? model_.dtype() : opts_.activations);
  if (opts_.pp_layout.empty()) {
    pp_unit_costs_ = dry.ms;
    all_reduce_doubles(*world_, pp_unit_costs_, ReduceOp::Max);
    partition = simulated_best_partition(pp_unit_costs_, sched);
  }
  std::vector<size_t> start{0};
  for (int n : partition) start.push_back(start.back() + static_cast<size_t>(n));
  std::vector<std::pair<size_t, size_t>> chunks;
  for (int s = pp_->rank(); s < S; s += P) chunks.emplace_back(start[s], start[s + 1]);
  stage_ = std::make_unique<Stage>(model_, chunks);
  // Units of other stages keep no parameter storage here (their names and shapes remain).
  std::vector<bool> mine(model_.units.size(), false);
  for (size_t k = 0; k < stage_->size(); ++k) mine[stage_->global_index(k)] = true;
  for (size_t u = 0; u < model_.units.size(); ++u)
    if (!mine[u]) bind_unit_flat(*model_.units[u], Tensor(), Tensor());
  pipeline_ = std::make_unique<PipelineRuntime>(*stage_, *pp_, sched, partition, dry.out_shape, model_.loss.get(),
                                                pp_transport_from_name(opts_.pp_transport));
}

std::vector<LayerStat> Layout::layer_stats() {
  std::vector<LayerStat> out = pp_ ? stats_over_pp() : stage_->stats();
  if (tp_ && tp_->size() > 1) {  // a split layer's rate: the mean over its equal channel shards
    std::vector<double> v;
    for (const LayerStat& s : out) v.push_back(s.value);
    all_reduce_doubles(*tp_, v, ReduceOp::Sum);  // collective over tp (same layers on every tp rank)
    for (size_t i = 0; i < out.size(); ++i) out[i].value = v[i] / tp_->size();
  }
  return out;
}

std::vector<LayerStat> Layout::stats_over_pp() {
  // Each rank's units' stats as "unit\tlayer\tkey\tvalue" lines, gathered over pp.
  std::ostringstream os;
  for (size_t k = 0; k < stage_->size(); ++k) {
    std::vector<LayerStat> st;
    stage_->unit(k).collect_stats(st);
    char v[40];
    for (const LayerStat& s : st) {
      std::snprintf(v, sizeof v, "%.17g", s.value);
      os << stage_->global_index(k) << '\t' << s.layer << '\t' << s.key << '\t' << v << '\n';
    }
  }
  std::vector<std::pair<size_t, LayerStat>> rows;
  for (const std::string& text : all_gather_strings(*pp_, os.str())) {  // collective over pp
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string u, layer, key, value;
      std::getline(f, u, '\t');
      std::getline(f, layer, '\t');
      std::getline(f, key, '\t');
      std::getline(f, value);
      rows.push_back({std::stoul(u), LayerStat{layer, key, std::stod(value)}});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LayerStat> out;
  for (auto& r : rows) out.push_back(std::move(r.second));
  return out;
}

void Layout::after_optimizer_step() { strategy_->after_optimizer_step(); }

MicroResult Layout::evaluate(const Tensor& x, const Tensor& y, Ctx& ctx) {
  MicroResult r;
  fill_ctx(ctx);
  const bool was = ctx.training;
  ctx.training = false;
  Timer t;
  if (pipeline_) {  // the pp ranks of a replica hold the same samples: all run or none
    if (x.defined() && x.ndim() >= 2 && x.dim(1) > 0) r.loss = pipeline_->evaluate(x, y, ctx);  // collective over pp
  } else if (x.defined() && x.ndim() >= 2 && x.dim(1) > 0) {
    stage_->reset_state();
    Tensor out = stage_->forward(x, ctx, strategy_.get());  // [T, n, K]
    r.loss = model_.loss->forward(out, y, ctx.slot);
  } else {  // no samples here: only the strategy's collectives, in unit order
    for (size_t k = 0; k < stage_->size(); ++k) {
      strategy_->before_forward(k, false);
      strategy_->after_forward(k, false);
    }
  }
  ctx.training = was;
  r.forward_ms = t.ms();
  return r;
}

void Layout::check_replicas(const std::string& what) {
  if (dp_ && strategy_->replicated_params())
    check_replicas_identical(*dp_, params_checksum(stage_->params()), what);
}

void Layout::gather_full_params() { strategy_->gather_full_params(); }
void Layout::release_full_params() { strategy_->release_full_params(); }
StrategyStats Layout::stats() const { return strategy_->stats(); }
CommCounters Layout::comm_counters() const { return dp_ ? dp_->counters() : CommCounters{}; }
CommCounters Layout::tp_comm_counters() const { return tp_ ? tp_->counters() : CommCounters{}; }
CommCounters Layout::all_comm_counters() const {
  CommCounters c;
  std::vector<const Comm*> seen;
  for (const Comm* g : {static_cast<const Comm*>(dp_), static_cast<const Comm*>(tp_), static_cast<const Comm*>(pp_)})
    if (g && std::find(seen.begin(), seen.end(), g) == seen.end()) {
      c += g->counters();
      seen.push_back(g);
    }
  return c;
}

}  // namespace sm
