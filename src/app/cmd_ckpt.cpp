// cmd_ckpt.cpp — `spikemesh ckpt`: checkpoints after (or during) training.
//   info FILE          what a checkpoint holds (step, epoch, data cursor, model, precision,
//                      mesh, optimizer, parameter list, resolved configuration);
//   verify FILE...     every checksum, completeness against the model and optimizer the file
//                      records, a format this build reads: "FILE: ok (...)" or each problem,
//                      exit 1 when any file has one (train/checkpoint_tools.h);
//   export FILE --out  the model's parameters and buffers, whole, as a flat state-dict HDF5 or
//                      safetensors with PyTorch/SpikingJelly names, or the model as a NIR graph;
//   import FILE --out  a state dict (safetensors, an export, a checkpoint) checked against a
//                      model and written as a step-0 checkpoint (train --init takes it).
// Every subcommand works on rank 0 alone (under mpirun the other ranks do nothing).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "spikemesh/app/commands.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/train/checkpoint_tools.h"
#include "spikemesh/train/state_dict_io.h"
#include "spikemesh/train/train_config.h"

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
  struct Args {
    std::string file, out, format;
    double nir_dt = 1e-4;
  };
  auto a = std::make_shared<Args>();
  CLI::App* exp = cmd.add_subcommand("export", "write a checkpoint's model as a state dict (HDF5, safetensors) or a NIR graph");
  exp->footer(
      "Examples:\n"
      "  spikemesh ckpt export output/vgg1/ckpt_000000100.h5 --out vgg1.h5\n"
      "  spikemesh ckpt export output/vgg1/ckpt_000000100.h5 --out vgg1.safetensors   # safetensors.torch.load_file\n"
      "  spikemesh ckpt export output/csnn/ckpt_000000500.h5 --out csnn.nir            # NIR graph (nir.read)\n"
      "  /usr/bin/python3 scripts/ckpt_to_torch.py vgg1.h5 vgg1.pt   # then model.load_state_dict(torch.load('vgg1.pt'))\n"
      "h5 and safetensors hold one tensor per parameter and buffer (BN running statistics included), gathered\n"
      "whole whatever layout wrote the checkpoint (dp, ZeRO, FSDP, tp, pp), named as in the PyTorch /\n"
      "SpikingJelly model's state_dict, in the stored dtype. nir: the model as a NIR graph for neuromorphic\n"
      "hardware and NIR-reading frameworks (batch norm folded, dropout left out; max pooling, attention and\n"
      "soft resets cannot be expressed: docs/checkpoints.md, NIR).");
  exp->add_option("file", a->file, "checkpoint file (ckpt_*.h5)")->required();
  exp->add_option("--out", a->out, "the file to write")->required();
  exp->add_option("--format", a->format, "h5 | safetensors | nir (default: by --out's extension: .safetensors, .nir, else h5)")
      ->check(CLI::IsMember({"h5", "safetensors", "nir"}));
  exp->add_option("--nir-dt", a->nir_dt, "nir: the time step in seconds the neuron parameters are expressed in")
      ->check(range_validator("nir-dt", false))
      ->capture_default_str();
  exp->callback([a, &env]() {
    if (env.rank != 0) return;
    std::error_code ec;
    if (a->out == a->file || std::filesystem::equivalent(a->file, a->out, ec))
      SM_INPUT_ERROR("--out " << a->out << " is the checkpoint itself; name another file");
    const StateDictFormat format = state_dict_format(a->format, a->out);
    if (format == StateDictFormat::Nir && !(a->nir_dt > 0)) SM_INPUT_ERROR("--nir-dt must be positive, got " << a->nir_dt);
    CheckpointModel cm = load_checkpoint_model(a->file);
    std::printf("%s\n", write_state_dict(cm, a->out, format, a->nir_dt, a->file).c_str());
  });
}

// The train keys an import takes: what builds the model and what a later run of it records.
const std::vector<std::string>& import_keys() {
  static const std::vector<std::string> k = {"model", "model-spec", "var", "T", "dropout", "precision", "seed"};
  return k;
}

void add_import(CLI::App& cmd, const AppEnv& env) {
  struct Args {
    std::string file, out;
    TrainConfig cfg;
    TrainConfigResolver resolver{cfg};
  };
  auto a = std::make_shared<Args>();
  CLI::App* imp = cmd.add_subcommand("import", "turn a PyTorch/SpikingJelly state dict into a step-0 checkpoint");
  imp->footer(
      "Examples:\n"
      "  spikemesh ckpt import vgg.safetensors --model cifar10dvs_vgg --out init.h5\n"
      "  /usr/bin/python3 scripts/torch_to_safetensors.py sj_csnn.pt csnn.safetensors   # a .pt first\n"
      "  spikemesh ckpt import csnn.safetensors --model fmnist_csnn --var C=128 --precision fp64 --out init.h5\n"
      "  spikemesh train --model fmnist_csnn --data fmnist.h5 --init init.h5   # fresh optimizer, any layout\n"
      "  spikemesh eval init.h5 --data fmnist.h5\n"
      "Input: safetensors, a `ckpt export` HDF5 file or a checkpoint, named as the model's state_dict\n"
      "(PyTorch / SpikingJelly names; a 'module.' or '_orig_mod.' prefix on every name is dropped). Every\n"
      "tensor is checked against the model (names, shapes, dtypes, finite values); one message lists every\n"
      "mismatch and nothing is written. Floats are converted to --precision's master dtype.");
  imp->add_option("file", a->file, "the state dict: .safetensors, a `ckpt export` .h5, or a checkpoint")->required();
  imp->add_option("--out", a->out, "the checkpoint to write (step 0)")->required();
  a->resolver.add_options(*imp, import_keys());
  imp->callback([a, &env]() {
    a->resolver.apply_given_flags();
    if (env.rank != 0) return;
    if (a->cfg.model.empty() == a->cfg.model_spec.empty())
      SM_INPUT_ERROR("ckpt import needs exactly one of --model and --model-spec");
    const ImportSummary s = import_state_dict(a->file, a->out, a->cfg, a->resolver.to_toml());
    for (const std::string& n : s.notes) std::printf("note: %s\n", n.c_str());
    std::printf("wrote %s: step-0 checkpoint of model %s from %s (%s): %lld tensors, %lld parameter elements, %s\n",
                a->out.c_str(), s.model.c_str(), a->file.c_str(), s.kind.c_str(), static_cast<long long>(s.tensors),
                static_cast<long long>(s.elements), a->cfg.precision.c_str());
  });
}

}  // namespace

void add_ckpt_command(CLI::App& app, const AppEnv& env) {
  CLI::App* cmd = app.add_subcommand("ckpt", "inspect, verify, export and import checkpoints");
  cmd->require_subcommand(1);
  cmd->footer(
      "Examples:\n"
      "  spikemesh ckpt info output/vgg1/ckpt_000000100.h5\n"
      "  spikemesh ckpt verify output/vgg1/ckpt_*.h5\n"
      "  spikemesh ckpt export output/vgg1/ckpt_000000100.h5 --out vgg1.safetensors\n"
      "  spikemesh ckpt import vgg.safetensors --model cifar10dvs_vgg --out init.h5\n"
      "Each subcommand has its own --help.");
  add_info(*cmd, env);
  add_verify(*cmd, env);
  add_export(*cmd, env);
  add_import(*cmd, env);
}

}  // namespace sm
