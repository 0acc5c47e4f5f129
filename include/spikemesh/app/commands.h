// commands.h — the command-line front end: one registration function per subcommand.
// main.cpp creates the CLI11 app, calls every add_*_command, parses, and turns any sm::Error
// escaping a subcommand's callback into one "spikemesh: error: ..." line and a non-zero exit.
// Invariant: a subcommand does all its work inside its CLI11 callback, using only the
// AppEnv it was registered with (never MPI_COMM_WORLD: main.cpp owns that name).
// To add a subcommand: write src/app/cmd_<name>.cpp defining add_<name>_command, declare it
// here, and call it from register_all_commands (src/app/commands.cpp).
#pragma once
#include <mpi.h>

#include <string>

namespace CLI {
class App;
}

namespace sm {

// Process-wide facts every subcommand may need; filled by main.cpp after MPI_Init_thread.
struct AppEnv {
  MPI_Comm world = MPI_COMM_NULL;  // the world communicator (a copy owned by main)
  int rank = 0;                    // rank in `world`
  int size = 1;                    // ranks in `world`
  std::string host;                // MPI processor name
};

// "spikemesh 0.1.0" plus the build configuration (CUDA, cuDNN, cuBLAS, NCCL, oneDNN).
std::string version_string();

// Registers every subcommand below on `app`; `env` must outlive app.parse().
void register_all_commands(CLI::App& app, const AppEnv& env);

// `spikemesh model`: print a model's unit/layer summary, or --list the built-in models.
void add_model_command(CLI::App& app, const AppEnv& env);
// `spikemesh dump-grads`: one batch forward/backward + K optimizer steps, written to HDF5
// (the PyTorch parity hook, tests/parity/torch_parity.py; also a debugging aid).
void add_dump_grads_command(CLI::App& app, const AppEnv& env);

// `spikemesh data`: import Fashion-MNIST, make synth-dvs, print a dataset's schema.
void add_data_command(CLI::App& app, const AppEnv& env);
// `spikemesh train`: the training loop (trainer.h) with config resolution.
void add_train_command(CLI::App& app, const AppEnv& env);
// `spikemesh eval`: a checkpoint evaluated on a dataset split under any layout -> eval.h5.
void add_eval_command(CLI::App& app, const AppEnv& env);
// `spikemesh ckpt info | verify | export`: inspect, verify and export checkpoints.
void add_ckpt_command(CLI::App& app, const AppEnv& env);
// `spikemesh bench`: timed steps on a fixed synthetic batch, JSON-lines records.
void add_bench_command(CLI::App& app, const AppEnv& env);
// `spikemesh plan`: print the process mesh (groups, hosts, node locality).
void add_plan_command(CLI::App& app, const AppEnv& env);
// `spikemesh commtest`: self-checking bandwidth test of every collective (nccl-tests style).
void add_commtest_command(CLI::App& app, const AppEnv& env);
// `spikemesh calibrate` (cmd_calibrate.cpp): the cost model's measurements of this machine.
void add_calibrate_command(CLI::App& app, const AppEnv& env);

}  // namespace sm
