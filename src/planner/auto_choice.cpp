// auto_choice.cpp — a command's layout plan, resolved once: the planner's pick or the flags
// (auto_choice.h).
#include "spikemesh/planner/auto_choice.h"

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"
#include "spikemesh/train/train_plan.h"

namespace sm {

int local_rank_of(MPI_Comm world, int world_size) {
  if (world_size == 1) return 0;
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

Device planning_device(const std::string& device_flag, const std::string& precision, int local_rank) {
  const Precision p = precision_from_name(precision);
  const DeviceRequest r = device_request_from_name(device_flag);
  const int visible = cuda_device_count();
  if (r == DeviceRequest::Cpu || p == Precision::FP64 || visible == 0) return Device::cpu();
  return gpu_for_local_rank(local_rank, visible);
}

namespace {
// The planner's profile request for a model selection.
ProfileRequest profile_request_of(const ModelSelection& sel, const std::string& precision, Device dev,
                                  const std::string& optimizer, double momentum, bool keep_first, bool keep_classifier) {
  ProfileRequest r;
  r.build = [sel] { return sel.build(); };
  std::string key = sel.model.empty() ? sel.spec : sel.model;
  for (const std::string& v : sel.vars) key += " " + v;
  if (sel.T > 0) key += " T=" + std::to_string(sel.T);
  r.key = key;
  const Precision p = precision_from_name(precision);
  r.dtype = master_dtype(p);
  r.activations = dev.is_cuda() ? activation_dtype(p) : r.dtype;
  r.device = dev;
  r.tp_keep_first = keep_first;
  r.tp_keep_classifier = keep_classifier;
  r.optimizer_states = optimizer == "sgd" ? (momentum > 0 ? 1 : 0) : 2;
  return r;
}


bool automatic(const ParallelConfig& c, const std::set<std::string>& given) {
  (void)given;
  return c.distributed_mode == "auto" || !c.prefer.empty();
}

// The planner's request: t's model and batch under c's preference, the flags in `given` fixed.
AutoLayoutRequest auto_request(const ParallelConfig& c, const std::set<std::string>& given, const LayoutTarget& t) {
  AutoLayoutRequest r;
  auto fixed = [&](const char* key) { return given.count(key) > 0; };
  LayoutConstraints& f = r.fixed;
  const bool choose_mode = c.distributed_mode == "auto" || c.distributed_mode == "none";
  if (!choose_mode) f.mode = c.distributed_mode;
  if (fixed("mesh-shape")) {
    if (c.tp_mesh_dim >= 0 || c.dp_mesh_dim >= 0)
      SM_INPUT_ERROR("--prefer with --tp-mesh-dim/--dp-mesh-dim: give --mesh-shape as DP TP PP, or leave the mesh "
                     "to the planner");
    f.mesh_shape = c.mesh_shape;
  }
  if (fixed("optimizer-sharding")) f.sharding = c.optimizer_sharding;
  if (fixed("pp-schedule") && c.pp_schedule != "auto") f.pp_schedule = c.pp_schedule;
  if (fixed("pp-virtual-stages")) f.pp_virtual_stages = static_cast<int>(c.pp_virtual_stages);
  if (fixed("pp-microbatches")) f.pp_microbatches = static_cast<int>(c.pp_microbatches);
  if (fixed("memopt-level")) f.memopt_level = static_cast<int>(c.memopt_level);
  if (!choose_mode && f.all_set())
    SM_INPUT_ERROR("--prefer " << c.prefer << " with --distributed-mode " << c.distributed_mode
                               << ": --mesh-shape, --optimizer-sharding and --memopt-level are all given, so there is "
                                  "nothing left to choose; drop --prefer or use --distributed-mode auto");
  r.prefer = preference_from_name(c.prefer.empty() ? "speed" : c.prefer);
  r.world = t.world_size;
  r.global_batch = c.global_batch_size > 0 ? c.global_batch_size : t.batch_size * t.world_size;
  r.calibration_path = c.calibration;
  r.memory_budget_mb = c.memory_budget_mb;
  r.model_name = t.model.model;
  (void)precision_from_name(t.precision);
  if (t.optimizer != "sgd" && t.optimizer != "adam" && t.optimizer != "adamw")
    SM_INPUT_ERROR("--optimizer must be sgd, adam or adamw, got '" << t.optimizer << "'");
  r.profile = profile_request_of(t.model, t.precision, planning_device(t.device, t.precision, t.local_rank),
                                 t.optimizer, t.momentum, c.tp_keep_first, c.tp_keep_classifier);
  return r;
}

// The layout options of the planner's pick: c's, with the pick's mode, sharding, pipeline and memopt.
LayoutOptions chosen_options(const ParallelConfig& c, const std::set<std::string>& given, const AutoLayoutResult& res,
                             DType master) {
  const LayoutCandidate& ch = res.chosen;
  LayoutOptions o = layout_options(c, master);
  o.mode = ch.mode();
  o.strategy.sharding = ch.sharding();
  if (ch.mesh.pp > 1) {
    o.pp_schedule = ch.schedule;
    o.pp_virtual_stages = ch.virtual_stages;
    o.pp_microbatches = ch.microbatches;
    if (!given.count("pp-layout")) o.pp_layout = layout_text(res.chosen_pp_layout);  // the partition predicted
  }
  o.memopt.level = ch.memopt_level;
  return o;
}

// Runs `f` on every rank, agreed over `world` (one message, every rank fails).
template <class F>
void agreed(Comm* world, F&& f) {
  if (world) collective_check(*world, f);
  else f();
}
}  // namespace

LayoutTarget training_target(const TrainConfig& c, Comm* world, int world_size, int local_rank) {
  LayoutTarget t;
  t.model = model_selection_of(c);
  if (!c.data.empty() && (c.parallel.distributed_mode == "auto" || !c.parallel.prefer.empty())) {
    DatasetInfo di;  // an event dataset fixes T (as the run will)
    agree_on_error(world, [&] { di = open_run_dataset(c, nullptr, false).info(); });
    if (di.is_events()) t.model.T = di.T;
  }
  t.precision = c.precision;
  t.device = c.device;
  t.optimizer = c.optimizer;
  t.momentum = c.momentum;
  t.batch_size = c.batch_size;
  t.world_size = world_size;
  t.local_rank = local_rank;
  return t;
}

LayoutPlan plan_command_layout(const ParallelConfig& c, const std::set<std::string>& given, const LayoutTarget& t,
                               Comm* world, AutoLayoutResult* choice) {
  const DType master = master_dtype(precision_from_name(t.precision));
  LayoutPlan plan;
  if (!automatic(c, given)) {
    // Pure and identical on every rank; a --pp-schedule-file is read here on every rank, so a
    // rank that cannot read it fails every rank with one message.
    agreed(world, [&] {
      const MeshShape shape = resolve_mesh_shape(mesh_flags(c), t.world_size);
      plan = plan_layout(layout_options(c, master), shape, t.world_size, batch_request(c, t.batch_size));
    });
    return plan;
  }
  AutoLayoutRequest r;
  agreed(world, [&] { r = auto_request(c, given, t); });
  agree_on_error(world, [&] { (void)t.model.build(); });  // a bad model fails every rank with its message
  const AutoLayoutResult res = choose_layout(world, r);
  if (!world || world->rank() == 0) {
    std::printf("%s", res.report().c_str());
    std::fflush(stdout);
  }
  agreed(world, [&] {
    const MeshShape shape{res.chosen.mesh.dp, res.chosen.mesh.tp, res.chosen.mesh.pp};
    plan = plan_layout(chosen_options(c, given, res, master), shape, t.world_size,
                       BatchRequest{t.batch_size, r.global_batch, 1});
  });
  if (choice) *choice = res;
  return plan;
}

ParallelConfig recorded_parallel_config(const ParallelConfig& c, const LayoutPlan& plan) {
  ParallelConfig r = c;
  const LayoutOptions& o = plan.options;
  if (c.distributed_mode != "auto" && c.prefer.empty()) return r;  // the flags as given
  r.distributed_mode = o.mode;
  r.mesh_shape = {plan.mesh.dp, plan.mesh.tp, plan.mesh.pp};
  r.tp_mesh_dim = r.dp_mesh_dim = -1;
  r.optimizer_sharding = o.strategy.sharding;
  if (plan.pipelined()) {
    r.pp_schedule = o.pp_schedule;
    r.pp_virtual_stages = o.pp_virtual_stages;
    r.pp_microbatches = o.pp_microbatches;
    r.pp_layout = o.pp_layout;
  }
  r.memopt_level = o.memopt.level;
  r.global_batch_size = plan.batch.global;
  return r;
}

std::string predictions_json(const AutoLayoutResult& r) {
  std::string out;
  for (const RankedLayout& x : r.ranked) {
    const LayoutCandidate& c = x.candidate;
    const LayoutPrediction& p = x.prediction;
    nlohmann::ordered_json j{{"label", c.label()},
                             {"mode", c.mode()},
                             {"mesh_shape", {c.mesh.dp, c.mesh.tp, c.mesh.pp}},
                             {"optimizer_sharding", c.sharding()},
                             {"pp_schedule", c.schedule},
                             {"pp_virtual_stages", c.virtual_stages},
                             {"pp_microbatches", c.microbatches},
                             {"memopt_level", c.memopt_level},
                             {"pp_layout", p.partition.empty() ? "" : layout_text(p.partition)},
                             {"predicted_step_ms", p.step_ms},
                             {"predicted_compute_ms", p.compute_ms},
                             {"predicted_bubble_ms", p.bubble_ms},
                             {"predicted_tp_comm_ms", p.tp_comm_ms},
                             {"predicted_dp_comm_ms", p.dp_comm_ms},
                             {"predicted_optimizer_ms", p.optimizer_ms},
                             {"predicted_peak_mb", p.peak_mb},
                             {"predicted_state_mb", p.state_mb},
                             {"predicted_activation_mb", p.activation_mb},
                             {"fits", x.fits},
                             {"chosen", c.label() == r.chosen.label()},
                             {"spikingjelly_rule", c.label() == r.spikingjelly_rule.label()}};
    out += j.dump() + "\n";
  }
  return out;
}

void add_auto_plan_flags(CLI::App& cmd, AutoPlanFlags& f) {
  cmd.add_option("--precision", f.precision, "fp32 | bf16 | fp16 (GPU) | fp64: the run the layouts are planned for")
      ->capture_default_str();
  cmd.add_option("--device", f.device, "cpu | cuda | auto")->capture_default_str();
  cmd.add_option("--optimizer", f.optimizer, "sgd | adam | adamw (optimizer state in the memory model)")->capture_default_str();
  cmd.add_option("--top", f.top, "layouts printed")->capture_default_str()->check(range_validator("top", true));
  cmd.add_option("--predictions", f.predictions, "write every layout's prediction as JSON lines to this file");
}

AutoLayoutResult run_auto_plan(const ParallelConfig& c, const std::set<std::string>& given, const LayoutTarget& t,
                               const AutoPlanFlags& f, Comm* world, bool remeasure) {
  LayoutTarget target = t;
  target.precision = f.precision;
  target.device = f.device;
  target.optimizer = f.optimizer;
  AutoLayoutRequest r;
  agreed(world, [&] { r = auto_request(c, given, target); });
  r.remeasure = remeasure;
  const AutoLayoutResult res = choose_layout(world, r);
  if (!world || world->rank() == 0) {
    std::printf("%s", res.report(f.top).c_str());
    if (!f.predictions.empty()) {
      std::FILE* out = std::fopen(f.predictions.c_str(), "w");
      if (!out) SM_INPUT_ERROR("--predictions " << f.predictions << ": cannot write the file");
      const std::string text = predictions_json(res);
      std::fwrite(text.data(), 1, text.size(), out);
      std::fclose(out);
      std::printf("predictions of %zu layouts written to %s\n", res.ranked.size(), f.predictions.c_str());
    }
    std::fflush(stdout);
  }
  return res;
}

}  // namespace sm
