// cmd_train.cpp — `spikemesh train`: resolve the configuration (defaults < --config < flags),
// agree on it over the ranks, build the process mesh, then run the trainer.
// With several ranks every step below is collective over the world: the configuration is
// resolved under collective_check (one message, every rank fails) and its hash compared
// over the world before any other work, so ranks started with different flags or files stop
// with a clear message instead of hanging in the first mismatched collective.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>

#include "spikemesh/data/augment_spec.h"
#include "spikemesh/app/commands.h"
#include "spikemesh/app/run_mesh.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/text_file.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/trainer.h"
#include "spikemesh/planner/auto_choice.h"

namespace sm {

namespace {
struct TrainCommand {
  TrainConfig cfg;
  TrainConfigResolver resolver{cfg};
};

// The config.toml of the run a --resume continues ("" when none: a fresh run, a default run
// name, or an older run directory without one): <output>/<run-name>/ for auto, the checkpoint's
// directory for a file. Rank 0 reads it; collective over `world` (null: one rank).
std::string resumed_run_config(Comm* world, const TrainConfig& c, std::string& path) {
  if (c.resume.empty() || (c.resume == "auto" && c.run_name.empty())) return "";
  if (c.resume == "auto") {
    path = c.output + "/" + c.run_name + "/config.toml";
  } else {
    const size_t slash = c.resume.rfind('/');
    path = (slash == std::string::npos ? std::string(".") : c.resume.substr(0, slash)) + "/config.toml";
  }
  std::string text;
  agree_on_error(world, [&] {
    std::error_code ec;
    const bool reader = !world || world->rank() == 0;
    if (reader && std::filesystem::is_regular_file(path, ec)) text = read_text_file(path, "--resume");
  });
  return world ? broadcast_string(*world, text, 0) : text;
}

// The run's GPU numerics (train/gpu_numerics_flags.h): flags and --config keys, else the resumed
// run's config.toml, else the environment, else exact/ieee/ieee; refused on the CPU when given.
// Sets them for the process and stores the resolved names in `c` (config.toml, checkpoints).
// Collective over the world, before any GPU work.
void resolve_train_numerics(TrainConfig& c, const AppEnv& env) {
  std::unique_ptr<Comm> world;
  if (env.size > 1) world = std::make_unique<Comm>(env.world, "world");
  std::string origin;
  const std::string recorded = resumed_run_config(world.get(), c, origin);
  GpuNumericsResolution res;
  auto resolve = [&] {
    res = resolve_gpu_numerics(c.gpu_numerics, recorded_gpu_numerics(recorded, origin), gpu_numerics_env_values(),
                               gpu_numerics_target(c.device, c.precision), origin);
  };
  if (world) collective_check(*world, resolve);
  else resolve();
  apply_gpu_numerics(res, env.rank == 0);
  c.gpu_numerics = gpu_numerics_names(res.numerics);
}
}  // namespace

void add_train_command(CLI::App& app, const AppEnv& env) {
  auto tc = std::make_shared<TrainCommand>();
  CLI::App* cmd = app.add_subcommand("train", "train a model on an HDF5 dataset (progress, metrics, checkpoints)");
  cmd->footer(std::string(
      "Settings resolve as: built-in defaults < --config FILE.toml < flags. A config file uses the\n"
      "flag names as keys (e.g. `batch-size = 64`, `var = [\"C=32\"]`, `mesh-shape = [4, 1, 1]`).\n"
      "Several ranks (mpirun -np N spikemesh train ...): --distributed-mode dp (optionally\n"
      "--optimizer-sharding zero|zero2) or fsdp; --batch-size is per rank and micro-step, so the\n"
      "global batch is batch-size x dp x grad-accum (or set --global-batch-size).\n"
      "Examples:\n"
      "  spikemesh train --config input/configs/default.toml\n"
      "  spikemesh train --model cifar10dvs_vgg --data input/synth_dvs.h5 --batch-size 4 --epochs 2\n"
      "  spikemesh train --config run.toml --run-name exp1 --resume auto   # continue exp1\n"
      "  mpirun -np 4 spikemesh train --config run.toml --distributed-mode dp --sync-bn\n"
      "  spikemesh train --config run.toml --init init.h5   # start from imported weights (spikemesh ckpt import)\n"
      "  spikemesh train --model cifar10dvs_vgg --data c10dvs_48_ev.h5 --frames 16,time   # frames from its --events\n"
      "Output: <output>/<run-name>/{log.txt, config.toml, metrics.h5, ckpt_*.h5} (see output/README.md).\n"
      "SIGTERM or SIGUSR1 (to any rank): every rank finishes the same step, a checkpoint is written, exit 0.\n"
      "--augment steps (NAME[:P[:M]], applied in order to each training sample on the prefetch thread;\n"
      "mixup/cutmix last, at most one of them per sample; never at evaluation; docs/datasets.md):\n") +
      augment_ops_help() +
      "  e.g. --augment hflip,roll:0.5:5,rotate:0.3:15,cutout:0.5:16,cutmix:0.5:1  (CIFAR10-DVS)\n"
      "       --augment timeshift:0.5:3,jitter:0.5:2,dropevent:0.5:0.1              (SHD)");
  tc->resolver.add_options(*cmd);
  cmd->callback([tc, &env]() {
    resolve_agreed(env, tc->resolver, [&] { tc->resolver.resolve(); });  // collective over the world
    resolve_train_numerics(tc->cfg, env);  // collective too; before any GPU work (a calibration's too)
    std::unique_ptr<Comm> world = env.size > 1 ? std::make_unique<Comm>(env.world, "world") : nullptr;
    // THE layout plan, once, before any other communicator (auto / --prefer: the planner's pick).
    const LayoutPlan plan = plan_command_layout(
        tc->cfg.parallel, tc->resolver.given_keys(),
        training_target(tc->cfg, world.get(), env.size, local_rank_of(env.world, env.size)), world.get());
    tc->cfg.parallel = recorded_parallel_config(tc->cfg.parallel, plan);  // config.toml records what runs
    std::unique_ptr<Mesh> mesh = make_run_mesh(tc->cfg.parallel, plan, env);  // collective over the world
    install_stop_signal_handlers();
    (void)run_training(tc->cfg, tc->resolver.to_toml(), mesh.get(), plan);
  });
}

}  // namespace sm
