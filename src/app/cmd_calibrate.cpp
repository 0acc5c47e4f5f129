// cmd_calibrate.cpp — `spikemesh calibrate`: measures this job's machine for the cost model
// (planner/calibration.h: every collective at every group size of the job's ranks, the
// optimizer, the memory per rank) and writes the calibration file; with --model it also
// profiles that model and prints the ranking `--distributed-mode auto` would use.
// Invariant: collective over the world; rank 0 alone writes the file (atomically).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/app/model_options.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/config_keys.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/parallel/parallel_config.h"
#include "spikemesh/planner/auto_choice.h"

namespace sm {

namespace {
struct CalibrateOptions {
  AutoPlanFlags plan;
  ModelSelection sel;
  int64_t batch_size = 8;
  ParallelConfig par;  // every parallel flag (parallel/parallel_config.h): --calibration, --prefer, constraints
  ConfigKeys keys;     // ... registered through the one table
};

void print_machine(const CalibrationCache& c, const std::string& path) {
  std::printf("calibration of %s\n  written to %s\n", c.fingerprint.c_str(), path.c_str());
  std::printf("  %-15s %5s %12s %12s %14s\n", "collective", "ranks", "alpha ms", "ms per MiB", "bandwidth GB/s");
  for (const auto& [key, l] : c.machine.links)
    std::printf("  %-15s %5d %12.4f %12.4f %14.2f\n", collective_kind_name(static_cast<CollectiveKind>(key.first)),
                key.second, l.alpha_ms, l.ms_per_mb, l.ms_per_mb > 0 ? 1048576.0 / 1e9 / (l.ms_per_mb / 1000.0) : 0.0);
  std::printf("  optimizer (adam): %.3f ns per parameter element; memory per rank: %.0f MB\n",
              c.machine.optimizer_ns_per_element, c.machine.capacity_mb);
}
}  // namespace

void add_calibrate_command(CLI::App& app, const AppEnv& env) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "measure this machine for the layout cost model (collectives at every group size of the job's ranks, the "
      "optimizer, memory per rank) and write the calibration file; with --model also profile that model and print "
      "the layouts `--distributed-mode auto` would rank");
  add_model_options(*cmd, o->sel, false);
  cmd->add_option("--batch-size", o->batch_size, "with --model: samples per rank per step")
      ->capture_default_str()
      ->check(range_validator("batch-size", true));
  add_parallel_flags(*cmd, o->keys, o->par);  // the parallel flags: one table for every command
  add_auto_plan_flags(*cmd, o->plan);
  cmd->footer(
      "Run it with the ranks and placement of the jobs it is for (the file is keyed by CPU, GPU, ranks per node,\n"
      "world size and threads; `train --distributed-mode auto` measures on first use and re-measures when the key\n"
      "changes).\n"
      "Examples: mpirun -np 4 spikemesh calibrate\n"
      "          mpirun -np 4 spikemesh calibrate --model cifar10dvs_vgg --T 4 --batch-size 2 --prefer memory");
  cmd->callback([o, &env]() {
    o->keys.apply_given_flags();
    if (o->par.distributed_mode == "none") o->par.distributed_mode = "auto";  // it ranks every layout
    validate_parallel_config(o->par);
    std::unique_ptr<Comm> world = env.size > 1 ? std::make_unique<Comm>(env.world, "world") : nullptr;
    const int local_rank = local_rank_of(env.world, env.size);
    if (!o->sel.model.empty() || !o->sel.spec.empty()) {
      LayoutTarget t;
      t.model = o->sel;
      t.batch_size = o->batch_size;
      t.world_size = env.size;
      t.local_rank = local_rank;
      (void)run_auto_plan(o->par, o->keys.given_keys(), t, o->plan, world.get(), true);
      return;
    }
    const std::string& cal = o->par.calibration;
    const std::string path = cal.empty() ? default_calibration_path() : cal;
    const CalibrationCache c = calibrate_machine(world.get(), planning_device(o->plan.device, o->plan.precision, local_rank), path);
    if (env.rank == 0) print_machine(c, path), std::fflush(stdout);
  });
}

}  // namespace sm
