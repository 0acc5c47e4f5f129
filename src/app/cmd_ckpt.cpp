// cmd_ckpt.cpp — `spikemesh ckpt`: checkpoints after (or during) training.
//   info FILE          what a checkpoint holds (step, epoch, data cursor, model, precision,
//                      mesh, optimizer, parameter list, resolved configuration);
//   verify FILE...     every checksum, completeness against the model and optimizer the file
//                      records, a format this build reads: "FILE: ok (...)" or each problem,
//                      exit 1 when any file has one (train/checkpoint_tools.h);
//   export FILE --out  the model's parameters and buffers, whole, as a flat state-dict HDF5
//                      with PyTorch/SpikingJelly names (then scripts/ckpt_to_torch.py -> .pt).
// Every subcommand works on rank 0 alone (under mpirun the other ranks do nothing).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <vector>

#include "spikemesh/app/commands.h"
#include "spikemesh/core/error.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/train/checkpoint_tools.h"

namespace sm {

namespace {

void add_info(CLI::App& cmd, const AppEnv& env) {
  auto file = std::make_shared<std::string>();
  auto show_config = std::make_shared<bool>(false);
  CLI::App* info = cmd.add_subcommand("info", "print what a checkpoint holds");
  info->footer(
      "Examples:\n"
      "  spikemesh ckpt info output/vgg1/ckpt_000000100.h5\n"
      "  spikemesh ckpt info output/vgg1/ckpt_000000100.h5 --config   # also the resolved configuration");
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

void add_verify(CLI::App& cmd, const AppEnv& env) {
  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* verify = cmd.add_subcommand("verify", "check checkpoints: checksums, completeness, readable format");
  verify->footer(
      "Examples:\n"
      "  spikemesh ckpt verify output/vgg1/ckpt_000000100.h5\n"
      "  spikemesh ckpt verify output/vgg1/ckpt_*.h5\n"
      "Prints 'FILE: ok (N tensors, M bytes, step S, layout L)' per file, or each problem found\n"
      "(a checksum mismatch, a missing or misshapen tensor, a damaged /meta field, a newer\n"
      "format, a file that is not a checkpoint); exits 1 when any file has a problem.");
  verify->add_option("files", *files, "checkpoint files (ckpt_*.h5)")->required();
  verify->callback([files, &env]() {
    if (env.rank != 0) return;
    size_t failed = 0;
    for (const std::string& path : *files) {
      const CheckpointScan s = verify_checkpoint(path);
      if (s.problems.empty()) {
        std::printf("%s: ok (%lld tensors, %lld bytes, step %lld, layout %s)\n", path.c_str(),
                    static_cast<long long>(s.tensors), static_cast<long long>(s.bytes),
                    static_cast<long long>(s.info.state.step), s.info.mesh.empty() ? "?" : s.info.mesh.c_str());
        continue;
      }
      ++failed;
      std::printf("%s: FAILED (%zu problem%s)\n", path.c_str(), s.problems.size(), s.problems.size() > 1 ? "s" : "");
      for (const std::string& p : s.problems) std::printf("  %s\n", p.c_str());
    }
    std::fflush(stdout);
    if (failed)
      SM_INPUT_ERROR(failed << " of " << files->size() << " checkpoint" << (files->size() > 1 ? "s" : "")
                            << " failed verification (problems above)");
  });
}

void add_export(CLI::App& cmd, const AppEnv& env) {
  auto file = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* exp = cmd.add_subcommand("export", "write a checkpoint's model state dict as a flat HDF5 file");
  exp->footer(
      "Examples:\n"
      "  spikemesh ckpt export output/vgg1/ckpt_000000100.h5 --out vgg1.h5\n"
      "  spikemesh ckpt export output/tp2/ckpt_000000500.h5 --out tp2.h5   # any layout: gathered whole\n"
      "  /usr/bin/python3 scripts/ckpt_to_torch.py vgg1.h5 vgg1.pt   # then model.load_state_dict(torch.load('vgg1.pt'))\n"
      "The file holds one dataset per parameter and buffer (BN running statistics included), gathered\n"
      "whole whatever layout wrote the checkpoint (dp, ZeRO, FSDP, tp, pp), named as in the PyTorch /\n"
      "SpikingJelly model's state_dict, in the stored dtype; attributes model, T, step, epoch, precision.");
  exp->add_option("file", *file, "checkpoint file (ckpt_*.h5)")->required();
  exp->add_option("--out", *out, "the state-dict HDF5 file to write")->required();
  exp->callback([file, out, &env]() {
    if (env.rank != 0) return;
    if (*out == *file) SM_INPUT_ERROR("--out " << *out << " is the checkpoint itself; name another file");
    const CheckpointModel cm = export_state_dict(*file, *out);
    std::printf("wrote %s: %zu parameters (%lld elements) + %zu buffers of model %s, T %lld, step %lld\n",
                out->c_str(), cm.model->params().size(), static_cast<long long>(cm.model->num_parameters()),
                cm.model->buffers().size(), cm.info.model.c_str(),
                static_cast<long long>(cm.T), static_cast<long long>(cm.info.state.step));
  });
}

}  // namespace

void add_ckpt_command(CLI::App& app, const AppEnv& env) {
  CLI::App* cmd = app.add_subcommand("ckpt", "inspect, verify and export checkpoints");
  cmd->require_subcommand(1);
  cmd->footer(
      "Examples:\n"
      "  spikemesh ckpt info output/vgg1/ckpt_000000100.h5\n"
      "  spikemesh ckpt verify output/vgg1/ckpt_*.h5\n"
      "  spikemesh ckpt export output/vgg1/ckpt_000000100.h5 --out vgg1.h5\n"
      "  /usr/bin/python3 scripts/ckpt_to_torch.py vgg1.h5 vgg1.pt\n"
      "Each subcommand has its own --help.");
  add_info(*cmd, env);
  add_verify(*cmd, env);
  add_export(*cmd, env);
}

}  // namespace sm
