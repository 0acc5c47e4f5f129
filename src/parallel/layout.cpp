// layout.cpp — the Layout: composition of its groups, stage, gradient-reduction strategy and the
// collectives handed to layers; the one forward/backward path of a training step. Built from a
// bound plan only (layout_plan.h): nothing is resolved here.
#include "spikemesh/parallel/layout.h"

#include <algorithm>
#include <cmath>
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
#include "spikemesh/parallel/pipeline/pp_costs.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"
#include "spikemesh/parallel/pipeline/pp_runtime.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"
#include "spikemesh/parallel/replica_check.h"

namespace sm {

Layout::Layout(Model& model, Mesh* mesh, LayoutPlan plan)
    : model_(model), groups_(mesh), plan_(std::move(plan)),
      stage_(std::make_unique<Stage>(model, 0, model.units.size())) {
  if (Comm* tp = groups_.tp_comm()) tp_coll_ = std::make_unique<CommCollectives>(*tp);
  if (mesh && (mesh->shape().tp > 1 || mesh->shape().pp > 1))
    world_coll_ = std::make_unique<CommCollectives>(*groups_.world_comm());
  build();
}

Layout::Layout(Model& model, Comm& dp, LayoutPlan plan)
    : model_(model), groups_(dp), plan_(std::move(plan)),
      stage_(std::make_unique<Stage>(model, 0, model.units.size())) {
  build();
}

namespace {
// The leaves' parameters whose gradients may be partial over tp (tp_partial_sums.h), in order.
void collect_tp_partial(Layer& l, std::vector<TpPartialParam>& out) {
  const std::vector<Layer*> children = l.children();
  if (!children.empty()) {
    for (Layer* c : children) collect_tp_partial(*c, out);
    return;
  }
  const SpLink& link = l.sp_link();
  const bool member = sp_member(link.role);
  for (Param* p : l.params())
    if (p->grad_summed_over_tp) out.push_back(TpPartialParam{p, member ? link.region : nullptr});
}
}  // namespace

void Layout::build() {
  SM_CHECK(model_.finalized(), "a layout needs a finalised model");
  SM_CHECK(plan_.bound, "a layout needs a plan bound to its model (bind_layout_plan)");
  const int tp = plan_.mesh.tp, pp = plan_.mesh.pp;
  SM_CHECK(plan_.world_size == groups_.world_size() && tp == groups_.tp_size() && pp == groups_.pp_size(),
           "the layout plan's mesh " << plan_.mesh.str() << " is not this layout's");
  if (pp > 1) build_pipeline();
  std::vector<std::vector<TpPartialParam>> partial(stage_->size());  // per stage-local unit
  if (tp > 1)
    for (size_t k = 0; k < stage_->size(); ++k) {
      for (Param* p : stage_->unit(k).params()) {
        const bool tp_shard = p->shard.sharded() && p->shard.group == ShardSpec::Group::TP;
        SM_CHECK(!tp_shard || p->shard.count == tp, "parameter '" << p->name << "' is split " << p->shard.count
                                                                   << " ways for tp = " << tp);
      }
      collect_tp_partial(stage_->unit(k), partial[k]);
    }
  Comm* dp = groups_.dp_comm();
  if (dp && (dp->size() > 1 || plan_.reduction != GradientReduction::AllReduce)) {
    // tp: the dp family over dp; fsdp_tp: FSDP over dp of the tp-local flat buffers (the plan's
    // reduction says which). A dp group of one rank reduces nothing: plain all-reduce there is
    // the one-rank strategy below (no packed buckets: a parameter-sized buffer and a copy saved)
    strategy_ = make_strategy(*stage_, *dp, plan_.reduction, opts_.strategy);  // collective over dp
    if (opts_.sync_bn) bn_sync_ = std::make_unique<CommCollectives>(*dp);
  } else {
    strategy_ = make_single_rank_strategy(*stage_);
  }
  if (tp > 1) {
    auto sums = std::make_unique<TpPartialSums>(strategy_.get(), *tp_coll_, std::move(partial));
    if (!sums->empty()) tp_sums_ = std::move(sums);
  }
  build_memopt();
}

UnitHooks* Layout::grad_hooks() { return tp_sums_ ? static_cast<UnitHooks*>(tp_sums_.get()) : strategy_.get(); }

// memopt's stages (pp: the round(ratio x S) logical stages whose units keep the most activation
// bytes in the dry run, ties to the lower index) and the level-1 configuration of their units.
void Layout::build_memopt() {
  stage_of_unit_.assign(stage_->size(), 0);
  memopt_.units.assign(stage_->size(), {});
  if (!opts_.memopt.enabled()) return;
  if (pipeline_) {
    const std::vector<int>& per = pipeline_->units_per_stage();
    const int S = static_cast<int>(per.size());
    std::vector<double> bytes(S, 0.0);
    std::vector<int> stage_of_global;
    for (int s = 0; s < S; ++s)
      for (int u = 0; u < per[s]; ++u) stage_of_global.push_back(s);
    for (size_t u = 0; u < stage_of_global.size() && u < pp_unit_saved_mb_.size(); ++u)
      bytes[stage_of_global[u]] += pp_unit_saved_mb_[u];
    std::vector<int> order(S);
    for (int s = 0; s < S; ++s) order[s] = s;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
    const int n = std::max(1, static_cast<int>(std::lround(opts_.memopt.pp_stage_budget_ratio * S)));
    memopt_stages_.assign(order.begin(), order.begin() + std::min(n, S));
    std::sort(memopt_stages_.begin(), memopt_stages_.end());
    for (size_t k = 0; k < stage_->size(); ++k) stage_of_unit_[k] = stage_of_global[stage_->global_index(k)];
  } else {
    memopt_stages_ = {0};
  }
  if (opts_.memopt.level > 0) set_memopt(checkpoint_all(*stage_, opts_.memopt.compress_x, memopt_units()));
}

std::vector<bool> Layout::memopt_units() const {
  std::vector<bool> in(stage_->size(), false);
  if (!opts_.memopt.enabled()) return in;
  for (size_t k = 0; k < in.size(); ++k)
    in[k] = std::find(memopt_stages_.begin(), memopt_stages_.end(), stage_of_unit_[k]) != memopt_stages_.end();
  return in;
}

void Layout::set_memopt(MemoptConfig c) {
  apply_memopt(*stage_, c);
  memopt_ = std::move(c);
}

Layout::~Layout() = default;


std::string Layout::describe() const {
  if (!groups_.world_comm()) return "dp=1 tp=1 pp=1";
  const std::string shape = groups_.mesh() ? groups_.mesh()->shape().str() : MeshShape{groups_.data_size(), 1, 1}.str();
  std::string pipe;
  if (pipeline_)
    pipe = " pp:" + pipeline_->schedule().kind + " v" + std::to_string(opts_.pp_virtual_stages) + " m" +
           std::to_string(pipeline_->schedule().microbatches) + " layout " + layout_text(pipeline_->units_per_stage());
  return shape + " " + strategy_->name() + (groups_.tp_comm() ? "+tp" : "") + pipe + (opts_.sync_bn ? " sync-bn" : "");
}

// Every rank reads its dp part of each global batch (the tp ranks of a dp replica read the same
// samples) and writes its own shards: the data and checkpoint groups are the world.
Comm* data_group_of(Mesh* mesh) { return mesh ? &mesh->world() : nullptr; }
int data_ranks_of(Mesh* mesh) { return mesh ? mesh->shape().dp : 1; }


std::vector<Param*> Layout::optimizer_params() { return strategy_->optimizer_params(); }
Collectives* Layout::shard_group() { return strategy_->shard_group(); }

std::vector<Param*> Layout::norm_params() {
  if (!groups_.tp_comm() && !groups_.pp_comm()) return optimizer_params();
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

Collectives* Layout::norm_group() { return groups_.tp_comm() || groups_.pp_comm() ? world_coll_.get() : shard_group(); }

bool Layout::counts_in_metrics() const { return groups_.tp_rank() == 0 && (!groups_.pp_comm() || stage_->is_last()); }

std::vector<ParamPlacement> Layout::placements(bool saving) {
  std::vector<ParamPlacement> out = strategy_->placements(saving);
  if (saving && groups_.tp_rank() != 0)  // tensors replicated over tp are written by tp rank 0 alone
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
  ctx.tp_shard_regions = opts_.memopt.level <= 1 && opts_.memopt.memory_budget_mb <= 0 && !memopt_.has_pieces();
  ctx.tp_debug_comm = opts_.tp_debug_comm;
  ctx.split_wgrad = opts_.split_wgrad;
}

void Layout::sync_buffers() {
  if (groups_.dp_comm() && !opts_.sync_bn) broadcast_buffers(model_, *groups_.dp_comm(), 0);
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
  if (tp_sums_) tp_sums_->set_last_micro(last_micro);
  r.reset_ms = t.ms();
  t.reset();
  ctx.model_input_grad_unused = true;  // as the backward below says
  Tensor out = stage_->forward(mb.x, ctx, grad_hooks());     // [T, n, K]
  ctx.model_input_grad_unused = false;
  r.loss = model_.loss->forward(out, mb.y, ctx.slot, mb.target);
  r.forward_ms = t.ms();
  t.reset();
  Tensor dout = model_.loss->backward(loss_grad_scale, ctx.slot);  // [T, n, K]
  ctx.input_grad_unused = true;  // nothing reads the model input's gradient
  stage_->backward_input(dout, ctx, grad_hooks());
  ctx.input_grad_unused = false;
  if (ctx.split_wgrad) stage_->backward_weight(ctx, grad_hooks());
  if (last_micro)  // the accumulated partial sums, once per step
    finish_backward();
  else
    strategy_->end_backward();
  if (!active_graph_capture()) synchronize(model_.device());  // CUDA: the phase time is the device's
  r.backward_ms = t.ms();
  return r;
}

void Layout::finish_backward() {
  strategy_->end_backward();  // (partial tp gradients were summed unit by unit: tp_partial_sums.h)                                    // dp reductions of the stage finish
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
  if (tp_sums_) tp_sums_->set_last_micro(true);
  const PpStepOutcome o = pipeline_->train(micro, ctx, loss_grad_scale, grad_hooks());  // collective over pp
  Timer t;
  finish_backward();
  synchronize(model_.device());
  out.resize(micro.size());
  for (size_t m = 0; m < micro.size(); ++m) out[m].loss = o.losses[m];
  out[0].reset_ms = o.reset_ms;  // the step's sums
  out[0].forward_ms = o.forward_ms;
  out[0].backward_ms = o.backward_ms + o.wait_ms + t.ms();
  return out;
}

void Layout::build_pipeline() {
  const int P = plan_.mesh.pp, S = P * opts_.pp_virtual_stages;
  const PpSchedule& sched = plan_.schedule;  // resolved and validated by the plan
  // Every rank resolved the schedule itself (a --pp-schedule-file on each node): one that
  // differs somewhere fails every rank here, before any pipeline message (collective over world).
  check_same_text(*groups_.world_comm(), to_text(sched),
                  opts_.pp_schedule_file.empty() ? "the pipeline schedule" : "--pp-schedule-file " + opts_.pp_schedule_file);
  // A dry run of every unit on every rank (tp peers together): local output shapes, and the
  // measured costs (max over the world: identical everywhere) unless --pp-layout fixes the split.
  std::vector<int> partition = plan_.partition;  // units per logical stage (--pp-layout), or measured below
  Ctx ctx;
  ctx.tp = tp_coll_.get();
  const UnitDryRun dry = dry_run_units(model_, opts_.pp_cost_samples, ctx, opts_.pp_layout.empty() || opts_.memopt.enabled(),
                                         opts_.activations == DType::F32 ? model_.dtype() : opts_.activations);
  if (opts_.memopt.enabled()) {  // memopt's stage choice: identical on every rank
    pp_unit_saved_mb_ = dry.saved_mb;
    all_reduce_doubles(*groups_.world_comm(), pp_unit_saved_mb_, ReduceOp::Max);
  }
  if (opts_.pp_layout.empty()) {
    pp_unit_costs_ = dry.ms;
    all_reduce_doubles(*groups_.world_comm(), pp_unit_costs_, ReduceOp::Max);
    partition = simulated_best_partition(pp_unit_costs_, sched);
  }
  std::vector<size_t> start{0};
  for (int n : partition) start.push_back(start.back() + static_cast<size_t>(n));
  std::vector<std::pair<size_t, size_t>> chunks;
  for (int s = groups_.pp_rank(); s < S; s += P) chunks.emplace_back(start[s], start[s + 1]);
  stage_ = std::make_unique<Stage>(model_, chunks);
  // Units of other stages keep no parameter storage here (their names and shapes remain).
  std::vector<bool> mine(model_.units.size(), false);
  for (size_t k = 0; k < stage_->size(); ++k) mine[stage_->global_index(k)] = true;
  for (size_t u = 0; u < model_.units.size(); ++u)
    if (!mine[u]) bind_unit_flat(*model_.units[u], Tensor(), Tensor());
  pipeline_ = std::make_unique<PipelineRuntime>(*stage_, *groups_.pp_comm(), sched, partition, dry.out_shape,
                                                model_.loss.get(), pp_transport_from_name(opts_.pp_transport));
}

std::vector<LayerStat> Layout::layer_stats() {
  std::vector<LayerStat> out = groups_.pp_comm() ? stats_over_pp() : stage_->stats();
  if (groups_.tp_size() > 1) {  // a split layer's rate: the mean over its equal channel shards
    std::vector<double> v;
    for (const LayerStat& s : out) v.push_back(s.value);
    all_reduce_doubles(*groups_.tp_comm(), v, ReduceOp::Sum);  // collective over tp (same layers on every tp rank)
    for (size_t i = 0; i < out.size(); ++i) out[i].value = v[i] / groups_.tp_size();
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
  for (const std::string& text : all_gather_strings(*groups_.pp_comm(), os.str())) {  // collective over pp
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
  if (groups_.dp_comm() && strategy_->replicated_params())
    check_replicas_identical(*groups_.dp_comm(), params_checksum(stage_->params()), what);
}

void Layout::gather_full_params() { strategy_->gather_full_params(); }
void Layout::release_full_params() { strategy_->release_full_params(); }
StrategyStats Layout::stats() const { return strategy_->stats(); }

}  // namespace sm
