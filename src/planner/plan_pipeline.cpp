// plan_pipeline.cpp — `spikemesh plan` for pipelines (plan_pipeline.h).
#include "spikemesh/planner/plan_pipeline.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "spikemesh/core/error.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/pipeline/pp_costs.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"
#include "spikemesh/parallel/pipeline/pp_runtime.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"
#include "spikemesh/core/flag_ranges.h"

namespace sm {

void add_pp_plan_flags(CLI::App& cmd, PpPlanFlags& f) {
  cmd.add_flag("--pp-print-schedule", f.print_schedule, "pp: print the schedule's actions (the --pp-schedule-file form)");
  cmd.add_option("--timeline-columns", f.columns, "width of the ASCII timeline")->capture_default_str()
      ->check(range_validator("timeline-columns", true));
}

void print_pp_plan(const ModelSelection& sel, const LayoutPlan& plan, const PpPlanFlags& f) {
  const MeshShape& shape = plan.mesh;
  const int P = shape.pp, v = plan.options.pp_virtual_stages, S = P * v;
  auto model = sel.build();
  model->finalize(DType::F32, Device::cpu(), 1);
  const PpSchedule& sched = plan.schedule;
  check_pp_message_tags(sched);
  const int M = sched.microbatches;
  const int64_t batch = plan.batch.replica;
  const int64_t n = batch / M;
  const UnitDryRun dry = dry_run_units(*model, n, Ctx{}, true, DType::F32);
  const std::vector<int> layout = plan.partition.empty() ? simulated_best_partition(dry.ms, sched) : plan.partition;
  const std::vector<double> cost = stage_costs(dry.ms, layout);
  const int T = model->info.T;
  std::printf("\npipeline plan of %s: pp %d x %d virtual stage%s = %d logical stages, schedule %s, %d microbatches of "
              "%lld samples (batch %lld per replica, T %d)\n",
              model->info.name.c_str(), P, v, v > 1 ? "s" : "", S, sched.kind.c_str(), M, static_cast<long long>(n),
              static_cast<long long>(batch), T);
  std::printf("partition %s (%s); unit costs from a dry run on this process: forward + backward of one microbatch%s\n",
              layout_text(layout).c_str(), plan.options.pp_layout.empty() ? "the split whose schedule simulates fastest with the measured costs" : "--pp-layout",
              shape.tp > 1 ? " of the whole units (a run measures its tp shards)" : "");
  std::printf("  %-5s %-4s %-40s %9s %10s %12s %14s\n", "stage", "rank", "units", "cost ms", "params MiB",
              "saved MiB/mb", "sends per mb");
  size_t u = 0;
  std::vector<double> saved_of_stage;
  for (int s = 0; s < S; ++s) {
    const size_t first = u, last = u + layout[s] - 1;
    double params = 0, saved = 0;
    for (size_t k = first; k <= last; ++k) {
      params += static_cast<double>(model->units[k]->num_params()) * 4 / 1048576.0;
      saved += dry.saved_mb[k];
    }
    saved_of_stage.push_back(saved);
    auto name_of = [&](size_t k) {  // an unnamed unit by its index
      const std::string& nm = model->units[k]->name();
      return nm.empty() ? "unit " + std::to_string(k) : nm;
    };
    std::string names = name_of(first) + (last > first ? " .. " + name_of(last) : "");
    names += " (" + std::to_string(layout[s]) + ")";
    std::string sends = "-";
    if (s + 1 < S) {
      int64_t numel = T * n;
      for (int64_t d : dry.out_shape[last]) numel *= d;
      const bool bits = model->units[last]->emits_spikes();
      char b[48];
      std::snprintf(b, sizeof b, "%.3f MiB%s", (bits ? numel / 8.0 : numel * 4.0) / 1048576.0, bits ? " bits" : "");
      sends = b;
    }
    std::printf("  %-5d %-4d %-40s %9.2f %10.2f %12.2f %14s\n", s, sched.rank_of_stage(s), names.c_str(), cost[s], params,
                saved, sends.c_str());
    u = last + 1;
  }
  const PpSimulation sim = simulate(sched, stage_costs_of(dry.ms, layout));  // F = B = W = a third
  std::printf("simulated (F = B = W = a third of the measured cost): step %.1f ms, bubble %.1f%%\n", sim.makespan,
              100 * sim.bubble_fraction);
  for (int r = 0; r < P; ++r) {
    double per_mb = 0;
    for (int s = r; s < S; s += P) per_mb += saved_of_stage[s] / v;
    std::printf("  rank %d: bubble %.1f%%, peak live activations %d microbatch-stages (~%.1f MiB saved)%s\n", r,
                100 * sim.bubble[r], sim.peak_live_activations[r], sim.peak_live_activations[r] * per_mb,
                sim.peak_pending_wgrads[r] ? (", " + std::to_string(sim.peak_pending_wgrads[r]) + " pending W").c_str() : "");
  }
  std::printf("timeline (F forward, B backward, W weight gradient, ~ transfer, . idle):\n%s",
              ascii_timeline(sim, static_cast<int>(f.columns)).c_str());
  if (f.print_schedule) std::printf("schedule (--pp-schedule-file form):\n%s", to_text(sched).c_str());
}

}  // namespace sm
