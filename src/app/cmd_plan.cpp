// cmd_plan.cpp — `spikemesh plan`: build the process mesh exactly as training would and
// print it (shape, which world ranks form each dp/tp/pp group, the host and node of every
// rank, tp groups that span nodes); with --model / --model-spec also the tensor-parallel plan
// of that model for the mesh's tp size (parallel/tp_plan.h: per layer role, whole and local
// shapes, local parameter shapes, bytes each rank sends per step). Run alone (one process),
// it previews a --mesh-shape without the ranks. Its parallel flags are train's, through the one
// table (parallel/parallel_config.h).
// Invariant: under mpirun the mesh is validated collectively (Mesh::create) before anything
// is printed, so a bad --mesh-shape gives one message from rank 0 and a non-zero exit on
// every rank.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/app/config_defaults.h"
#include "spikemesh/app/model_options.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/tp_plan.h"
#include "spikemesh/core/config_keys.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/parallel/parallel_config.h"
#include "spikemesh/planner/auto_choice.h"
#include "spikemesh/planner/plan_pipeline.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/memopt_search.h"
#include "spikemesh/train/run_setup.h"
#include "spikemesh/bench/synthetic_batch.h"

namespace sm {

namespace {
struct PlanOptions {
  ModelSelection sel;
  int64_t batch_size = 8;  // per dp rank
  int64_t elem_bytes = 4;  // fp32 activations
  ParallelConfig par;      // every parallel flag (parallel/parallel_config.h), as train takes them
  ConfigKeys keys;         // ... registered through the one table
  PpPlanFlags pp;          // the printed pipeline plan's own flags
  std::string config;  // --config: a training config file as defaults
  AutoPlanFlags autoplan;  // the planner's ranking (--prefer)
  int gpus_per_node = -1;  // --gpus-per-node: plan as if each node showed this many GPUs (-1: what this process sees)
};

// This rank's entry of the placement table: the GPU training would select (local rank %
// visible GPUs, core/device.h), or its CPU threads when there is none.
std::string placement_entry(int gpus_per_node, int local_rank) {
  const int visible = gpus_per_node >= 0 ? gpus_per_node : cuda_device_count();
  if (visible > 0) return gpu_for_local_rank(local_rank, visible).str();
  const int t = omp_get_max_threads();
  return std::to_string(t) + (t == 1 ? " thread" : " threads");
}

// The plan's flags from a training config file (app/config_defaults.h): only the keys the
// file sets and the command line does not.
void apply_config(const CLI::App& cmd, PlanOptions& o) {
  if (o.config.empty()) return;
  const ConfigFileValues f = read_config_file(o.config);
  const TrainConfig& c = f.cfg;
  apply_config_model(cmd, f, o.sel);
  apply_config_parallel(cmd, f, o.keys);
  if (f.fills(cmd, "batch-size")) o.batch_size = c.batch_size;
}

// The layout options of the parallel flags; without --distributed-mode, the mode the mesh implies.
LayoutOptions plan_layout_options(const PlanOptions& o, const MeshShape& shape) {
  LayoutOptions lo = layout_options(o.par);
  if (o.par.distributed_mode == "none")  // not given: the mode the mesh implies
    lo.mode = shape.pp > 1 ? "pp" : shape.tp > 1 ? "tp" : shape.dp > 1 ? "dp" : "none";
  return lo;
}

// The lines of a memopt measurement: its trials, then per unit and segment the choice, what
// its checkpoint saved and kept, the peaks of its forward and backward and its forward time.
std::string memopt_report(const MemoptSearchResult& r) {
  std::string out;
  char line[512];
  for (const std::string& l : r.log) out += "  trial: " + l + "\n";
  std::snprintf(line, sizeof line, "  %-22s %-9s %-18s %9s %9s %11s %11s %9s\n", "unit", "children", "choice", "saved MB",
                "kept MB", "fwd peak MB", "bwd peak MB", "fwd ms");
  out += line;
  for (const MemoptSegmentReport& g : r.segments) {
    const std::string range = "[" + std::to_string(g.begin) + "," + std::to_string(g.end) + ")";
    std::snprintf(line, sizeof line, "  %-22s %-9s %-18s %9.2f %9.2f %11.1f %11.1f %9.1f\n", g.unit.c_str(),
                  range.c_str(), g.choice.c_str(), g.saved_mb, g.kept_mb, g.forward_peak_mb, g.backward_peak_mb,
                  g.forward_ms);
    out += line;
  }
  return out;
}

// memopt on this process (CPU, fp32, the whole model as one stage, --batch-size samples of the
// synthetic batch): what it chooses per unit and segment, measured on a real step (levels 2-4
// and a budget run their search from one trial step, and print the peak the choice predicted).
void print_memopt_plan(const PlanOptions& o, int pp) {
  auto model = o.sel.build();
  model->finalize(DType::F32, Device::cpu(), 1);
  LayoutOptions lo;
  lo.memopt = layout_options(o.par).memopt;
  Layout layout(*model, nullptr, resolved_layout_plan(lo, MeshShape{}, 1, 0, *model));
  const std::vector<MicroBatch> micro =
      synthetic_batch(model->info, SyntheticBatch{o.batch_size, 1, 0, 1}, DType::F32, Device::cpu(), DType::F32);
  Ctx ctx;
  ctx.seed = 1;
  MemoptSearchResult r = optimize_memopt(layout, micro, ctx);
  if (!r.searched) r = measure_memopt(layout, micro, ctx);
  std::printf("\nmemopt plan of %s: level %d%s, measured on %lld trial step%s of %lld samples, T %d (fp32, CPU, this "
              "process, %.0f ms):\n",
              model->info.name.c_str(), lo.memopt.level, lo.memopt.compress_x ? ", inputs as bits" : "",
              static_cast<long long>(r.trial_steps), r.trial_steps == 1 ? "" : "s", static_cast<long long>(o.batch_size),
              model->info.T, r.optimize_ms);
  std::fputs(memopt_report(r).c_str(), stdout);
  if (r.predicted_peak_mb > 0) std::printf("  predicted peak of the choice: %.1f MB\n", r.predicted_peak_mb);
  std::printf("  measured peak: %.1f MB allocated (model, gradients and activations; no optimizer state)\n", r.peak_mb);
  if (pp > 1)
    std::printf("  (the whole model as one stage: run under mpirun with the mesh's ranks to measure each of the %d "
                "pipeline stages)\n", pp);
}

// memopt under the mesh, per pipeline stage (collective over the world): every rank builds the
// layout `train` would (fp32, CPU), runs memopt's search — or one measured step at level 1 — on
// the synthetic batch in the plan's microbatches, every schedule slot in flight as in training;
// rank 0 prints each pipeline rank's units, choices and peaks as its first rank (dp 0, tp 0)
// measured them.
void print_memopt_stages(const PlanOptions& o, Mesh& mesh, int world_rank) {
  RunRequest req;
  req.model = o.sel;
  req.device = "cpu";
  const LayoutOptions lo = plan_layout_options(o, mesh.shape());
  req.layout = plan_layout(lo, mesh.shape(), mesh.world_size(), batch_request(o.par, o.batch_size));
  RunParts parts = setup_run(req, &mesh);  // collective over the world
  Layout& layout = *parts.layout;
  const BatchPlan& batch = layout.plan().batch;
  const std::vector<MicroBatch> micro =
      synthetic_batch(parts.model->info, SyntheticBatch{batch.replica, static_cast<int>(batch.accum), mesh.dp().rank(), 1},
                      DType::F32, Device::cpu(), DType::F32);
  Ctx ctx;
  ctx.seed = 1;
  MemoptSearchResult r = optimize_memopt(layout, micro, ctx);  // collective over the layout's groups
  if (!r.searched) r = measure_memopt(layout, micro, ctx);
  std::string mine;
  if (mesh.dp().rank() == 0 && mesh.tp().rank() == 0) {
    char line[256];
    const bool any = !r.segments.empty();
    std::snprintf(line, sizeof line, "  pipeline rank %d (world rank %d): %s, measured peak %.1f MB\n", mesh.pp().rank(),
                  world_rank, any ? "memopt on its units below" : "level 0 (its stages are not among memopt's)",
                  r.stage_peak_mb);
    mine = line;
    if (r.stage_predicted_peak_mb > 0) {
      std::snprintf(line, sizeof line, "    predicted peak of its choice: %.1f MB\n", r.stage_predicted_peak_mb);
      mine += line;
    }
    if (any) mine += memopt_report(r);
  }
  const std::vector<std::string> all = all_gather_strings(mesh.world(), mine);
  if (world_rank != 0) return;
  std::string stages;
  for (int s : layout.memopt_stages()) stages += (stages.empty() ? "" : ", ") + std::to_string(s);
  std::printf("\nmemopt plan of %s per pipeline stage: level %d%s, logical stages with memopt: %s "
              "(--pp-memopt-stage-budget-ratio %g), measured under the mesh on %lld trial step%s of %lld samples per dp "
              "replica in %lld microbatches, T %d (fp32, CPU, %.0f ms; peaks without optimizer state):\n",
              parts.model->info.name.c_str(), lo.memopt.level, lo.memopt.compress_x ? ", inputs as bits" : "",
              stages.c_str(), lo.memopt.pp_stage_budget_ratio, static_cast<long long>(r.trial_steps),
              r.trial_steps == 1 ? "" : "s", static_cast<long long>(batch.replica), static_cast<long long>(batch.accum),
              parts.model->info.T, r.optimize_ms);
  for (const std::string& t : all) std::fputs(t.c_str(), stdout);
  std::fflush(stdout);
}

// Product of the --mesh-shape values: the world a one-process preview resolves against.
int preview_world(const MeshFlags& f) {
  long long w = 1;
  for (int d : f.mesh_shape) w *= d > 0 ? d : 1;  // each d <= 2^20 (flag range): no overflow in 64 bits
  if (w > (1 << 20)) SM_INPUT_ERROR("--mesh-shape: a mesh of " << w << " ranks is more than the 1048576 spikemesh supports");
  return static_cast<int>(w);
}

// The layout plan `train` would resolve for this mesh and model (layout_plan.h): the mode
// each dimension implies, the tp and pp flags, --batch-size per dp replica; bound to `model`
// (the plan's tp layers point into it). Pure.
LayoutPlan plan_of(const PlanOptions& o, const MeshShape& shape, int world, Model& model) {
  LayoutPlan plan = plan_layout(plan_layout_options(o, shape), shape, world, batch_request(o.par, o.batch_size));
  bind_layout_plan(plan, model);
  return plan;
}

// `per_stage`: memopt is measured per pipeline stage afterwards (print_memopt_stages).
void print_plan(const PlanOptions& o, const MeshShape& shape, int world, bool per_stage = false) {
  auto model = o.sel.build();
  const LayoutPlan plan = plan_of(o, shape, world, *model);
  std::printf("\n%s", plan.describe().c_str());
  if (shape.tp > 1 || shape.pp == 1) {
    // tp = 1: the same table for one rank (every layer whole)
    const TpPlan tp = shape.tp > 1 ? plan.tp
                                   : make_tp_plan(*model, TpOptions{1, o.par.tp_keep_first, o.par.tp_keep_classifier});
    std::printf("\ntensor-parallel plan of %s for %s (batch %lld per dp rank, T %d, %lld-byte activations):\n",
                model->info.name.c_str(), shape.str().c_str(), static_cast<long long>(o.batch_size), model->info.T,
                static_cast<long long>(o.elem_bytes));
    std::fputs(describe_tp_plan(tp, o.batch_size, model->info.T, o.elem_bytes).c_str(), stdout);
  }
  if (shape.pp > 1) print_pp_plan(o.sel, plan, o.pp);
  if (plan.options.memopt.enabled() && !per_stage) print_memopt_plan(o, shape.pp);
}
}  // namespace

void add_plan_command(CLI::App& app, const AppEnv& env) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "print the process mesh: dp/tp/pp groups, hosts, node locality; with --model, its tensor-parallel plan and, "
      "with pp > 1, its pipeline plan (stages, measured costs, memory, simulated bubble, ASCII timeline)");
  add_model_options(*cmd, o->sel, false);
  cmd->add_option("--batch-size", o->batch_size, "samples per dp rank per step (for the bytes per step)")
      ->capture_default_str()
      ->check(range_validator("batch-size", true));
  add_parallel_flags(*cmd, o->keys, o->par);  // the parallel flags: one table for every command
  add_pp_plan_flags(*cmd, o->pp);
  add_auto_plan_flags(*cmd, o->autoplan);
  cmd->add_option("--gpus-per-node", o->gpus_per_node,
                  "show the GPU each rank would take if every node showed this many GPUs (training takes local rank "
                  "% visible GPUs); default: the GPUs this process sees (none: CPU threads)")
      ->check(range_validator("gpus-per-node", true));
  cmd->add_option("--config", o->config,
                  "a training config file (TOML, as for `spikemesh train --config`): its model, mesh, batch and "
                  "pp keys are the defaults here; flags override single keys (--var NAME=INT one variable)");
  cmd->footer(
      "Rank order: tp varies fastest, then dp, then pp (rank = pp_i*dp*tp + dp_i*tp + tp_i).\n"
      "Examples: mpirun -np 4 spikemesh plan --mesh-shape 2 2 1\n"
      "          spikemesh plan --mesh-shape 1 2 --model cifar10dvs_vgg   # one process: a preview of tp = 2\n"
      "          spikemesh plan --mesh-shape 1 1 4 --model cifar10dvs_vgg --pp-schedule 1f1b --T 4   # pipeline\n"
      "          spikemesh plan --config run.toml   # the mesh and model a training config describes");
  cmd->callback([o, cmd, &env]() {
    o->keys.apply_given_flags();
    apply_config(*cmd, *o);  // the same file on every rank: the same outcome (mesh creation compares)
    // --prefer ranks every layout of these ranks, as `train --distributed-mode auto` would.
    const bool ranking = o->par.distributed_mode == "auto" || !o->par.prefer.empty();
    if (ranking && o->par.distributed_mode == "none") o->par.distributed_mode = "auto";
    validate_parallel_config(o->par);
    const MeshFlags mesh_flags_given = mesh_flags(o->par);
    const bool have_model = !o->sel.model.empty() || !o->sel.spec.empty();
    if (ranking) {  // the cost model's ranking of every layout of these ranks
      if (!have_model) SM_INPUT_ERROR("--prefer needs --model or --model-spec (the model whose layouts are ranked)");
      std::unique_ptr<Comm> world = env.size > 1 ? std::make_unique<Comm>(env.world, "world") : nullptr;
      LayoutTarget t;
      t.model = o->sel;
      t.batch_size = o->batch_size;
      t.world_size = env.size;
      t.local_rank = local_rank_of(env.world, env.size);
      (void)run_auto_plan(o->par, o->keys.given_keys(), t, o->autoplan, world.get(), false);
      return;
    }
    if (env.size == 1 && have_model) {  // a preview: the shape alone, no ranks needed
      const MeshShape shape = resolve_mesh_shape(mesh_flags_given, preview_world(mesh_flags_given));
      std::printf("mesh %s (preview on one process; run under mpirun with %d ranks to see the groups)\n",
                  shape.str().c_str(), static_cast<int>(shape.product()));
      print_plan(*o, shape, static_cast<int>(shape.product()));
      return;
    }
    auto mesh = Mesh::create(env.world, mesh_flags_given);  // collective over the world
    std::string text = mesh->describe();
    const std::string as_if = o->gpus_per_node >= 0 ? " (as if each node showed " + std::to_string(o->gpus_per_node) +
                                                          (o->gpus_per_node == 1 ? " GPU" : " GPUs") + ": --gpus-per-node)"
                                                    : "";
    text += "placement" + as_if +
            ":\n" + mesh->placement(placement_entry(o->gpus_per_node, mesh->local_rank()));  // collective over the world
    const int gpus = o->gpus_per_node >= 0 ? o->gpus_per_node : cuda_device_count();
    if (gpus > 0 && mesh->local_size() > gpus && mesh->local_rank() == 0)  // one line per such node, from its first rank
      SM_WARN(mesh->host() << " has " << mesh->local_size() << " ranks for " << gpus << " GPU" << (gpus == 1 ? "" : "s")
                           << ": ranks share GPUs (one task per GPU: srun --gpus-per-task=1, or fewer --ntasks-per-node)");
    // Rank 0 prints; a bad flag found there fails every rank (collective over the world).
    const bool memopt_per_stage = have_model && mesh->shape().pp > 1 && layout_options(o->par).memopt.enabled();
    agree_on_error(&mesh->world(), [&] {
      if (env.rank != 0) return;
      std::fputs(text.c_str(), stdout);
      std::printf("comm: --comm %s, --comm-timeout %g s\n", o->par.comm.c_str(), o->par.comm_timeout);
      if (have_model) print_plan(*o, mesh->shape(), env.size, memopt_per_stage);
      std::fflush(stdout);
    });
    if (memopt_per_stage) print_memopt_stages(*o, *mesh, env.rank);  // collective over the world
  });
}

}  // namespace sm
