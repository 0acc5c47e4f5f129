// commands.cpp — the list of subcommands and the version string.
#include "spikemesh/app/commands.h"

#include <hdf5.h>

#include <CLI/CLI.hpp>
#include <sstream>

#include "spikemesh/core/device.h"

namespace sm {

void register_all_commands(CLI::App& app, const AppEnv& env) {
  add_model_command(app, env);
  add_dump_grads_command(app, env);
  add_data_command(app, env);
  add_train_command(app, env);
  add_eval_command(app, env);
  add_ckpt_command(app, env);
  add_bench_command(app, env);
  add_plan_command(app, env);
  add_commtest_command(app, env);
  add_calibrate_command(app, env);
}

std::string version_string() {
  auto yn = [](bool b) { return b ? "yes" : "no"; };
  bool cublas = false, cudnn = false, nccl = false;
#ifdef SPIKEMESH_HAVE_CUBLAS
  cublas = true;
#endif
#ifdef SPIKEMESH_HAVE_CUDNN
  cudnn = true;
#endif
#ifdef SPIKEMESH_HAVE_NCCL
  nccl = true;
#endif
#ifdef H5_HAVE_PARALLEL
  const char* h5_kind = " (parallel)";
#else
  const char* h5_kind = " (serial)";
#endif
  std::ostringstream os;
  os << "spikemesh 0.1.0\n"
     << "  build: C++17, CUDA " << yn(built_with_cuda()) << ", cuBLAS " << yn(cublas) << ", cuDNN "
     << yn(cudnn) << ", NCCL " << yn(nccl) << ", oneDNN yes, HDF5 " << H5_VERS_MAJOR << "."
     << H5_VERS_MINOR << "." << H5_VERS_RELEASE << h5_kind;
  return os.str();
}

}  // namespace sm
