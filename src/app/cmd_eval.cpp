// cmd_eval.cpp — `spikemesh eval`: a checkpoint evaluated on a dataset's test (or train) split
// under any layout it loads into: loss, accuracy, per-class accuracy and counts, per-layer
// firing rates, printed as a table and written to eval.h5 (train/eval_run.h, eval_report.h).
// Takes train's layout, data and device flags through TrainConfigResolver (one registry, the
// same names, help and ranges). With several ranks every step is collective over the world:
// the checkpoint's /meta is read by rank 0 and broadcast, the configuration resolved under
// collective_check and compared, then train's mesh, set-up and load; rank 0 writes the file,
// agreed, so a bad input is one message and a non-zero exit on every rank.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/app/run_mesh.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/planner/auto_choice.h"
#include "spikemesh/train/eval_run.h"
#include "spikemesh/train/gpu_numerics_flags.h"

namespace sm {

namespace {
struct EvalCommand {
  std::string checkpoint, split = "test", out;
  bool save_outputs = false;
  TrainConfig cfg;
  TrainConfigResolver resolver{cfg};
};

// Collective over env.world (one rank: local).
void run_eval(EvalCommand& e, const AppEnv& env) {
  std::unique_ptr<Comm> world;
  if (env.size > 1) world = std::make_unique<Comm>(env.world, "world");
  const std::string path = resolve_eval_checkpoint(world.get(), e.checkpoint);
  const CheckpointInfo ci = read_checkpoint_info(world.get(), path);  // rank 0 reads, every rank learns
  GpuNumericsResolution numerics;  // flags, else the environment (train/gpu_numerics_flags.h)
  resolve_agreed(env, e.resolver, [&] {
    apply_checkpoint_settings(e.resolver, e.cfg, ci);
    e.resolver.apply_given_flags();
    validate_train_config(e.cfg);
    numerics = resolve_gpu_numerics(e.cfg.gpu_numerics, {}, gpu_numerics_env_values(),
                                    gpu_numerics_target(e.cfg.device, e.cfg.precision));
  });
  apply_gpu_numerics(numerics, env.rank == 0);  // before any GPU work
  const Split split = e.split == "train" ? Split::Train : Split::Test;
  const std::string out = e.out.empty() ? default_eval_path(path, split) : e.out;
  // THE layout plan, once, before any other communicator (the same resolution as `train`).
  const LayoutPlan plan = plan_command_layout(e.cfg.parallel, e.resolver.given_keys(),
                                              training_target(e.cfg, world.get(), env.size, local_rank_of(env.world, env.size)),
                                              world.get());
  std::unique_ptr<Mesh> mesh = make_run_mesh(recorded_parallel_config(e.cfg.parallel, plan), plan, env);  // collective
  const EvalReport rep = run_evaluation(e.cfg, ci, split, mesh.get(), plan, e.save_outputs);
  agree_on_error(world.get(), [&] {
    if (env.rank == 0) write_eval_h5(rep, out);
  });
  if (env.rank != 0) return;
  std::printf("%swrote %s\n", eval_table(rep).c_str(), out.c_str());
  std::fflush(stdout);
}
}  // namespace

void add_eval_command(CLI::App& app, const AppEnv& env) {
  auto e = std::make_shared<EvalCommand>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "evaluate a checkpoint on a dataset split: loss, accuracy, per-class accuracy, firing rates -> eval.h5");
  cmd->footer(
      "Examples:\n"
      "  spikemesh eval output/csnn/ckpt_000002811.h5                  # its training data's test split\n"
      "  spikemesh eval output/csnn --split train --out csnn_train.h5   # the run's newest checkpoint\n"
      "  spikemesh eval output/vgg1/ckpt_000000100.h5 --data input/synth_dvs.h5 --eval-batch-size 64\n"
      "  mpirun -np 2 spikemesh eval output/vgg1/ckpt_000000100.h5 --distributed-mode pp --mesh-shape 1 1 2\n"
      "The model, T, precision, encoding, seed, dataset and --frames are the checkpoint's (its resolved configuration);\n"
      "the flags below override the dataset and batch sizes and choose the device and the layout (any layout\n"
      "the checkpoint loads into, as for train). The evaluation batch is --eval-batch-size, else --batch-size,\n"
      "per data rank, as train's evaluation: at the same step and layout the numbers equal train's.\n"
      "Output: a table, and eval.h5 (default: next to the checkpoint; eval_train.h5 for --split train)\n"
      "holding loss, accuracy, /class/{correct,count,accuracy} and /firing_rate (see README, Evaluation);\n"
      "with --save-outputs also /outputs [N, K] (each sample's output mean over T: logits, or firing rates\n"
      "for rate-coded models) and /labels [N], in the dataset's order, e.g. to compare with PyTorch.");
  cmd->add_option("checkpoint", e->checkpoint, "checkpoint file (ckpt_*.h5), or a run directory (its newest)")
      ->required();
  cmd->add_option("--split", e->split, "the dataset split to evaluate")
      ->check(CLI::IsMember({"test", "train"}))
      ->capture_default_str();
  cmd->add_option("--out", e->out, "the HDF5 file to write (default: eval.h5 next to the checkpoint)");
  cmd->add_flag("--save-outputs", e->save_outputs,
                "also write every sample's output mean over T (/outputs) and label (/labels)");
  e->resolver.add_options(*cmd, eval_flag_keys());
  cmd->callback([e, &env]() { run_eval(*e, env); });
}

}  // namespace sm
