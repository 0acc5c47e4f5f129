// cmd_plan.cpp — `spikemesh plan`: build the process mesh exactly as training would and
// print it (shape, which world ranks form each dp/tp/pp group, the host and node of every
// rank, tp groups that span nodes). Also home of add_mesh_flags, the mesh/comm flags shared
// by every command that creates a Mesh.
// Invariant: the mesh is validated collectively (Mesh::create) before anything is printed,
// so a bad --mesh-shape gives one message from rank 0 and a non-zero exit on every rank.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/comm/mesh.h"

namespace sm {

void add_mesh_flags(CLI::App& cmd, MeshFlags& f) {
  cmd.add_option("--mesh-shape", f.mesh_shape,
                 "process mesh DP TP PP (1 to 3 values, missing ones are 1; product = number of ranks); with "
                 "--tp-mesh-dim/--dp-mesh-dim the values are SpikingJelly-style mesh dims. Default: all ranks "
                 "data parallel")
      ->expected(1, 3)
      ->allow_extra_args(false);
  cmd.add_option("--tp-mesh-dim", f.tp_mesh_dim, "index of the --mesh-shape value that is the tensor-parallel size");
  cmd.add_option("--dp-mesh-dim", f.dp_mesh_dim, "index of the --mesh-shape value that is the data-parallel size");
  cmd.add_option("--comm", f.comm, "library for device tensors: auto (NCCL when every rank owns a distinct GPU), mpi, nccl")
      ->capture_default_str();
  cmd.add_option("--comm-timeout", f.comm_timeout,
                 "seconds a collective may wait before the job is aborted with a message naming the operation, "
                 "the communicator and the missing ranks; 0 = wait forever")
      ->capture_default_str();
}

void add_plan_command(CLI::App& app, const AppEnv& env) {
  auto flags = std::make_shared<MeshFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "print the process mesh: dp/tp/pp groups, hosts, node locality");
  add_mesh_flags(*cmd, *flags);
  cmd->footer(
      "Rank order: tp varies fastest, then dp, then pp (rank = pp_i*dp*tp + dp_i*tp + tp_i).\n"
      "Example: mpirun -np 4 spikemesh plan --mesh-shape 2 2 1");
  cmd->callback([flags, &env]() {
    auto mesh = Mesh::create(env.world, *flags);  // collective over the world
    std::string text = mesh->describe();
    if (env.rank == 0) {
      std::fputs(text.c_str(), stdout);
      std::printf("comm: --comm %s, --comm-timeout %g s\n", flags->comm.c_str(), flags->comm_timeout);
      std::fflush(stdout);
    }
  });
}

}  // namespace sm
