// cmd_model.cpp — `spikemesh model`: print a model's summary (units, layers, per-sample
// shapes, parameter counts) or list the built-in models. Prints on rank 0 only; touches no
// communicator, so it can run anywhere (a login node, under mpirun, in CI).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/app/config_defaults.h"
#include "spikemesh/app/model_options.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {

namespace {

struct ModelCommandOptions {
  ModelSelection selection;
  bool list = false;
  std::string config;  // --config: a training config file as defaults
};

void list_models(const AppEnv& env) {
  if (env.rank != 0) return;
  std::printf("%-18s %-16s %7s %3s %12s  %s\n", "model", "input", "classes", "T", "parameters", "loss");
  for (const std::string& name : builtin_model_names()) {
    std::unique_ptr<Model> m = load_builtin_model(name);
    std::printf("%-18s %-16s %7d %3d %12lld  %s\n", name.c_str(), shape_str(m->info.input_shape).c_str(),
                m->info.num_classes, m->info.T, static_cast<long long>(m->num_parameters()),
                m->info.loss.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void add_model_command(CLI::App& app, const AppEnv& env) {
  auto opts = std::make_shared<ModelCommandOptions>();
  CLI::App* cmd = app.add_subcommand("model", "print a model's units, layers, shapes and parameter counts");
  cmd->footer(
      "Examples:\n"
      "  spikemesh model --list\n"
      "  spikemesh model --model cifar10dvs_vgg --T 4 --dropout 0\n"
      "  spikemesh model --model-spec my_net.toml --var C=16\n"
      "  spikemesh model --config input/configs/fmnist_spikformer.toml --var E=32\n"
      "A spec's variables (e.g. C, the channel width) are listed at the top of its TOML file.");
  add_model_options(*cmd, opts->selection);
  CLI::Option* list = cmd->add_flag("--list", opts->list, "list the built-in models and exit");
  list->excludes(cmd->get_option("--model"))->excludes(cmd->get_option("--model-spec"));
  cmd->add_option("--config", opts->config,
                  "a training config file (TOML, as for `spikemesh train --config`): its model keys (model, "
                  "model-spec, var, T, dropout) are the defaults; flags override single keys")
      ->excludes(list);

  cmd->callback([opts, cmd, &env]() {
    if (opts->list) {
      list_models(env);
      return;
    }
    if (!opts->config.empty()) apply_config_model(*cmd, read_config_file(opts->config), opts->selection);
    std::unique_ptr<Model> model = opts->selection.build();
    if (env.rank == 0) {
      std::fputs(model->summary().c_str(), stdout);
      std::fflush(stdout);
    }
  });
}

}  // namespace sm
