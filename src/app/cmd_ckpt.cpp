// cmd_ckpt.cpp — `spikemesh ckpt info FILE`: what a checkpoint holds (step, epoch, data
// cursor, model, precision, mesh, optimizer, parameter list, resolved configuration).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"

namespace sm {

void add_ckpt_command(CLI::App& app, const AppEnv& env) {
  auto file = std::make_shared<std::string>();
  auto show_config = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("ckpt", "inspect checkpoints");
  cmd->require_subcommand(1);
  CLI::App* info = cmd->add_subcommand("info", "print what a checkpoint holds");
  info->add_option("file", *file, "checkpoint file (ckpt_*.h5)")->required();
  info->add_flag("--config", *show_config, "also print the resolved configuration it was written with");
  info->callback([file, show_config, &env]() {
    CheckpointInfo ci = read_checkpoint_info(*file);
    if (env.rank != 0) return;
    std::printf("%s (complete, format %lld)\n  model %s, precision %s, mesh %s\n"
                "  step %lld, epoch %lld, next batch %lld, seed %lld, optimizer step %lld\n"
                "  %lld parameter tensors, %lld optimizer state tensors\n",
                ci.path.c_str(), static_cast<long long>(ci.format_version), ci.model.c_str(), ci.precision.c_str(),
                ci.mesh.c_str(), static_cast<long long>(ci.state.step), static_cast<long long>(ci.state.epoch),
                static_cast<long long>(ci.state.batch_in_epoch), static_cast<long long>(ci.state.seed),
                static_cast<long long>(ci.optimizer_step), static_cast<long long>(ci.num_params),
                static_cast<long long>(ci.num_optim_states));
    H5File f = H5File::open(*file);
    H5Group p = f.open_group("/params");
    for (const std::string& n : p.list_datasets())
      std::printf("    %-40s %s %s\n", n.c_str(), dtype_name(p.dataset_dtype(n)), shape_str(p.dataset_shape(n)).c_str());
    if (*show_config) std::printf("configuration:\n%s", ci.config_toml.c_str());
  });
}

}  // namespace sm
