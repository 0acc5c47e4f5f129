// auto_choice.cpp — the commands' side of the automatic layout choice (auto_choice.h).
#include "auto_choice.h"

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"
#include "spikemesh/core/flag_ranges.h"

namespace sm {

int local_rank_of(const AppEnv& env) {
  if (env.size == 1) return 0;
  MPI_Comm node;
  MPI_Comm_split_type(env.world, MPI_COMM_TYPE_SHARED, env.rank, MPI_INFO_NULL, &node);
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

AutoLayoutResult plan_auto_layout(const AppEnv& env, const AutoLayoutRequest& r) {
  std::unique_ptr<Comm> world = env.size > 1 ? std::make_unique<Comm>(env.world, "world") : nullptr;
  return choose_layout(world.get(), r);
}

void add_auto_plan_flags(CLI::App& cmd, AutoPlanFlags& f, bool with_prefer) {
  if (with_prefer)
    cmd.add_option("--prefer", f.prefer,
                   "with --model, under mpirun: rank every layout of the job's ranks by the cost model (speed | memory "
                   "| capacity) and print the top ones, the pick and why, as `train --distributed-mode auto` would");
  cmd.add_option("--calibration", f.calibration,
                 "the calibration file (default $SPIKEMESH_CALIBRATION or ~/.cache/spikemesh/calibration.json)");
  cmd.add_option("--global-batch-size", f.global_batch, "samples per step over every replica (default --batch-size x ranks)")
      ->check(range_validator("global-batch-size", true));
  cmd.add_option("--precision", f.precision, "fp32 | bf16 | fp16 (GPU) | fp64: the run the layouts are planned for")
      ->capture_default_str();
  cmd.add_option("--device", f.device, "cpu | cuda | auto")->capture_default_str();
  cmd.add_option("--optimizer", f.optimizer, "sgd | adam | adamw (optimizer state in the memory model)")->capture_default_str();
  cmd.add_option("--top", f.top, "layouts printed")->capture_default_str()->check(range_validator("top", true));
  cmd.add_option("--predictions", f.predictions, "write every layout's prediction as JSON lines to this file");
}

AutoLayoutResult run_auto_plan(const AppEnv& env, const ModelSelection& sel, const AutoPlanFlags& f,
                               int64_t batch_per_rank, bool keep_first, bool keep_classifier, bool remeasure) {
  AutoLayoutRequest r;
  r.prefer = preference_from_name(f.prefer.empty() ? "speed" : f.prefer);
  r.world = env.size;
  r.global_batch = f.global_batch > 0 ? f.global_batch : batch_per_rank * env.size;
  r.calibration_path = f.calibration;
  r.remeasure = remeasure;
  r.model_name = sel.model;
  (void)precision_from_name(f.precision);
  if (f.optimizer != "sgd" && f.optimizer != "adam" && f.optimizer != "adamw")
    SM_INPUT_ERROR("--optimizer must be sgd, adam or adamw, got '" << f.optimizer << "'");
  r.profile = profile_request_of(sel, f.precision, planning_device(f.device, f.precision, local_rank_of(env)),
                                 f.optimizer, 0.9, keep_first, keep_classifier);
  const AutoLayoutResult res = plan_auto_layout(env, r);
  if (env.rank == 0) {
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

int64_t auto_global_batch(const TrainConfig& c, int world) {
  return c.global_batch_size > 0 ? c.global_batch_size : c.batch_size * world;
}

void apply_auto_layout(TrainConfig& c, const std::set<std::string>& given, const AppEnv& env) {
  const bool automatic = c.distributed_mode == "auto";
  if (!automatic && c.prefer.empty()) return;
  std::unique_ptr<Comm> world = env.size > 1 ? std::make_unique<Comm>(env.world, "world") : nullptr;
  AutoLayoutRequest r;
  auto fixed = [&](const char* key) { return given.count(key) > 0; };
  LayoutConstraints& f = r.fixed;
  if (!automatic) f.mode = c.distributed_mode;
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
  if (!automatic && f.all_set())
    SM_INPUT_ERROR("--prefer " << c.prefer << " with --distributed-mode " << c.distributed_mode
                               << ": --mesh-shape, --optimizer-sharding and --memopt-level are all given, so there is "
                                  "nothing left to choose; drop --prefer or use --distributed-mode auto");
  r.prefer = preference_from_name(c.prefer.empty() ? "speed" : c.prefer);
  r.world = env.size;
  r.global_batch = auto_global_batch(c, env.size);
  r.calibration_path = c.calibration;
  r.memory_budget_mb = c.memory_budget_mb;
  ModelSelection sel;
  sel.model = c.model_spec.empty() ? c.model : "";
  sel.spec = c.model_spec;
  sel.vars = c.vars;
  sel.dropout = c.dropout;
  sel.T = static_cast<int>(c.T);
  if (!c.data.empty()) {  // an event dataset fixes T (as the run will)
    DatasetInfo di;
    agree_on_error(world.get(), [&] { di = H5Dataset::open(c.data).info(); });
    if (di.is_events()) sel.T = di.T;
  }
  r.model_name = sel.model;
  r.profile = profile_request_of(sel, c.precision, planning_device(c.device, c.precision, local_rank_of(env)),
                                 c.optimizer, c.momentum, c.tp_keep_first, c.tp_keep_classifier);
  AutoLayoutResult res;
  agree_on_error(world.get(), [&] { (void)sel.build(); });  // a bad model fails every rank with its message
  res = choose_layout(world.get(), r);
  if (env.rank == 0) {
    std::printf("%s", res.report().c_str());
    std::fflush(stdout);
  }
  const LayoutCandidate& ch = res.chosen;
  c.distributed_mode = ch.mode();
  c.mesh_shape = {ch.mesh.dp, ch.mesh.tp, ch.mesh.pp};
  c.tp_mesh_dim = c.dp_mesh_dim = -1;
  c.optimizer_sharding = ch.sharding();
  if (ch.mesh.pp > 1) {
    c.pp_schedule = ch.schedule;
    c.pp_virtual_stages = ch.virtual_stages;
    c.pp_microbatches = ch.microbatches;
    if (!fixed("pp-layout")) c.pp_layout = layout_text(res.chosen_pp_layout);  // the partition predicted
  }
  c.memopt_level = ch.memopt_level;
  c.global_batch_size = r.global_batch;
}

}  // namespace sm
