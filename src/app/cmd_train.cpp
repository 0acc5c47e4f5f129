// cmd_train.cpp — `spikemesh train`: resolve the configuration (defaults < --config <
// flags), then run the trainer. One rank for now (data parallelism builds on this).
#include <CLI/CLI.hpp>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/core/error.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/trainer.h"

namespace sm {

namespace {
struct TrainCommand {
  TrainConfig cfg;
  TrainConfigResolver resolver{cfg};
};
}  // namespace

void add_train_command(CLI::App& app, const AppEnv& env) {
  auto tc = std::make_shared<TrainCommand>();
  CLI::App* cmd = app.add_subcommand("train", "train a model on an HDF5 dataset (progress, metrics, checkpoints)");
  cmd->footer(
      "Settings resolve as: built-in defaults < --config FILE.toml < flags. A config file uses the\n"
      "flag names as keys (e.g. `batch-size = 64`, `var = [\"C=32\"]`).\n"
      "Examples:\n"
      "  spikemesh train --config input/configs/default.toml\n"
      "  spikemesh train --model cifar10dvs_vgg --data input/synth_dvs.h5 --batch-size 4 --epochs 2\n"
      "  spikemesh train --config run.toml --run-name exp1 --resume auto   # continue exp1\n"
      "Output: <output>/<run-name>/{log.txt, config.toml, metrics.h5, ckpt_*.h5} (see output/README.md).\n"
      "SIGTERM or SIGUSR1: finish the current step, write a checkpoint, exit 0.");
  tc->resolver.add_options(*cmd);
  cmd->callback([tc, &env]() {
    if (env.size > 1)
      SM_INPUT_ERROR("spikemesh train runs on one rank in this version (got " << env.size
                                                                              << " ranks); data parallelism is not built yet");
    tc->resolver.resolve();
    install_stop_signal_handlers();
    TrainSummary s = run_training(tc->cfg, tc->resolver.to_toml());
    (void)s;
  });
}

}  // namespace sm
