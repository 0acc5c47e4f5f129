// main.cpp — spikemesh's entry point: MPI start-up, process identity, the CLI11 subcommand
// dispatch, and the one place that turns errors into messages and exit codes.
// Invariants: this file and comm/mesh are the only ones naming MPI_COMM_WORLD; every exit
// path after MPI_Init_thread goes through MPI_Finalize (or MPI_Abort when one rank failed
// alone with others possibly waiting in a collective).
//   exit 0  success, --help, --version
//   exit 1  an sm::Error or other exception from a subcommand
//   exit N  CLI11's own code for a bad command line (unknown flag, missing value, ...)
#include <malloc.h>
#include <mpi.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include "spikemesh/app/commands.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/reachability.h"
#include "spikemesh/core/crash_report.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/io_retry.h"
#include "spikemesh/core/log.h"
#include "spikemesh/kernels/conv_engine_policy.h"
#include "spikemesh/kernels/conv_policy.h"
#include "spikemesh/kernels/cpu/isa.h"
#include "spikemesh/kernels/spike_conv_choice.h"
#include "spikemesh/layers/fused_epilogue.h"
#include "spikemesh/layers/time_invariant_prefix.h"

namespace {

// Default OpenMP threads: the node's cores divided among the ranks on this node, so an
// oversubscribed mpirun never runs cores x ranks threads (docs/architecture.md §6).
// OMP_NUM_THREADS wins.
void default_thread_count(MPI_Comm world) {
  if (std::getenv("OMP_NUM_THREADS")) return;
  MPI_Comm node;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return;
  int local = 1;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  int threads = omp_get_num_procs() / (local > 0 ? local : 1);
  omp_set_num_threads(threads > 0 ? threads : 1);
}

// --comm-timeout S (or --comm-timeout=S) from the raw command line, for the exchanges that
// precede parsing (check_ring_reachable). Anything unparsable is left to the parser's message.
void preset_comm_timeout(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    if (a == "--comm-timeout" && i + 1 < argc) v = argv[i + 1];
    else if (a.rfind("--comm-timeout=", 0) == 0) v = a.substr(15);
    else continue;
    char* end = nullptr;
    const double s = std::strtod(v.c_str(), &end);
    if (end && *end == '\0' && end != v.c_str() && s >= 0) sm::set_comm_timeout_seconds(s);
  }
}

void print_error(const std::string& msg) {
  std::fprintf(stderr, "spikemesh: error: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::string app_description() {
  return "spikemesh trains spiking neural networks (SNNs) on CPUs and GPUs, from one rank to an\n"
         "MPI cluster (launch with mpirun, srun or sbatch). Each subcommand has its own --help.";
}

std::string app_footer() {
  return "A typical workflow (each subcommand's --help shows its own examples):\n"
         "  spikemesh data fashion-mnist                                  # -> input/fashion_mnist.h5\n"
         "  spikemesh model --model fmnist_csnn --var C=32                 # layers, parameters, shapes\n"
         "  spikemesh train --config input/configs/default.toml --run-name csnn\n"
         "  mpirun -np 4 spikemesh train --config input/configs/default.toml --distributed-mode dp\n"
         "  spikemesh eval output/csnn                                     # test split -> output/csnn/eval.h5\n"
         "  spikemesh ckpt verify output/csnn/ckpt_*.h5\n"
         "  spikemesh ckpt export output/csnn/ckpt_000002811.h5 --out csnn.h5   # PyTorch state dict\n"
         "  spikemesh ckpt import sj_csnn.safetensors --model fmnist_csnn --out init.h5   # weights from PyTorch\n"
         "\nEnvironment: SPIKEMESH_LOG_LEVEL=debug|info|warn|error (debug names every oneDNN/cuDNN kernel chosen);\n"
         "  SPIKEMESH_CONV_ALGOS=exact|deterministic|fast[-tuned], SPIKEMESH_CONV_FP32_PRECISION=ieee|tf32,\n"
         "  SPIKEMESH_MATMUL_FP32_PRECISION=ieee|tf32 (GPU numerics: the defaults of --conv-algos,\n"
         "  --conv-fp32-precision and --matmul-fp32-precision of train, bench and eval; exact, ieee, ieee\n"
         "  when unset; ignored by CPU runs);\n"
         "  SPIKEMESH_CONV_ALGO=auto|dense|sparse (CPU f32 convolutions of spikes, the default of --conv-algo);\n"
         "  SPIKEMESH_FUSE=1|0 (CPU: batch norm and the neuron or max pooling after it in one pass; 1, the\n"
         "  default, is on);\n"
         "  SPIKEMESH_MERGE_STEPS=1|0 (CPU: a static input repeated over T runs the model's layers before its first\n"
         "  neuron once; 1, the default, is on);\n"
         "  SPIKEMESH_CPU_AVX512=1|0 (CPU: the spike-convolution sums and neuron sweeps in AVX-512 registers where\n"
         "  the CPU has AVX-512; 0 runs their AVX2 copies, bitwise the same results; oneDNN is not affected, see\n"
         "  ONEDNN_MAX_CPU_ISA; 1, the default, is on);\n"
         "  SPIKEMESH_WINOGRAD=auto|own|off (CPU 3x3 convolutions: auto takes oneDNN's Winograd where it has one\n"
         "  (AVX-512), else our F(2x2,3x3) on wide layers; own forces ours; off runs direct);\n"
         "  SPIKEMESH_CUDNN_API=auto|graph|legacy (GPU convolutions: auto, the default, runs cuDNN's graph API and\n"
         "  its legacy API for a shape the graph API cannot plan);\n"
         "  SPIKEMESH_IO_RETRIES=N (attempts of a failed training read or checkpoint write, default 4) and\n"
         "  SPIKEMESH_IO_RETRY_DELAY_MS=MS (the first wait, default 500, doubling): transient shared-file-system errors.\n"
         "\nErrors print one line 'spikemesh: error: ...' and exit non-zero.";
}

// The environment's settings, read identically on every rank (InputError on a bad value):
// SPIKEMESH_LOG_LEVEL = debug | info | warn | error, and the GPU numerics variables
// (SPIKEMESH_CONV_ALGOS, SPIKEMESH_CONV_FP32_PRECISION, SPIKEMESH_MATMUL_FP32_PRECISION) and
// SPIKEMESH_CUDNN_API checked here so that a typo fails on every device, not at a GPU's first
// convolution; SPIKEMESH_CONV_ALGO (the CPU's --conv-algo default), SPIKEMESH_FUSE (the fused
// batch-norm epilogue), SPIKEMESH_MERGE_STEPS (repeated input steps run once) and
// SPIKEMESH_WINOGRAD (the CPU's Winograd kernels) and SPIKEMESH_CPU_AVX512 (the own kernels'
// registers) checked and applied.
void apply_environment() {
  if (const char* level = std::getenv("SPIKEMESH_LOG_LEVEL")) {
    const std::string v = level;
    if (v == "debug") sm::log_set_level(sm::LogLevel::Debug);
    else if (v == "info") sm::log_set_level(sm::LogLevel::Info);
    else if (v == "warn") sm::log_set_level(sm::LogLevel::Warn);
    else if (v == "error") sm::log_set_level(sm::LogLevel::Error);
    else SM_INPUT_ERROR("SPIKEMESH_LOG_LEVEL=" << v << ": unknown level (valid: debug, info, warn, error)");
  }
  (void)sm::gpu_numerics_from_env();
  (void)sm::cuda::conv_api_from_env();  // SPIKEMESH_CUDNN_API
  sm::apply_spike_conv_algo_env();
  sm::apply_fused_epilogues_env();
  sm::apply_merge_steps_env();
  sm::apply_winograd_env();
  sm::cpu::apply_cpu_isa_env();
  (void)sm::io_retry_policy();  // SPIKEMESH_IO_RETRIES, SPIKEMESH_IO_RETRY_DELAY_MS
}

// glibc raises its mmap threshold each time a large mmapped block is freed, after which such
// blocks come from the heap and stay resident when freed: a long run's RSS jumped by tens of MB
// at an arbitrary step and stayed there (`make soak`). A fixed 4 MiB threshold keeps blocks that
// large mmapped (returned to the system on free); smaller ones are unaffected, and the step time
// is unchanged (paired runs, docs/results.md). MALLOC_MMAP_THRESHOLD_ set by the user wins.
void fix_malloc_mmap_threshold() {
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 4 << 20);
}

// Parses and runs the chosen subcommand; returns the process exit code.
int run(int argc, char** argv, const sm::AppEnv& env) {
  CLI::App app{app_description(), "spikemesh"};
  app.footer(app_footer());
  app.set_version_flag("--version", sm::version_string(), "print the version and build configuration and exit");
  // At most one subcommand; "none" is reported after parsing so that an unknown flag gets
  // CLI11's "not expected" message rather than "A subcommand is required".
  app.require_subcommand(0, 1);
  sm::register_all_commands(app, env);
  try {
    apply_environment();
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      if (env.rank == 0) {
        std::fputs(app.help().c_str(), stderr);
        print_error("no subcommand given (see the list above)");
      }
      return 1;
    }
    return 0;
  } catch (const CLI::ParseError& e) {
    // --help / --version arrive here too (exit code 0); print on rank 0 only.
    if (e.get_exit_code() != 0) {  // a real parse error: one line, named flag, non-zero exit
      if (env.rank == 0) print_error(std::string(e.what()) + " (see --help)");
      return e.get_exit_code();
    }
    std::ostringstream out, err;
    int code = app.exit(e, out, err);
    if (env.rank == 0) {
      std::fputs(out.str().c_str(), stdout);
      std::fputs(err.str().c_str(), stderr);
      std::fflush(stdout);
      std::fflush(stderr);
    }
    return code;
  } catch (const sm::Error& e) {
    if (e.kind() == sm::ErrorKind::Input || e.agreed_ranks() == env.size) {
      // Input errors are validated identically on every rank, and an error agreed over the
      // whole job (agree_on_error) is thrown by every rank: rank 0 speaks for all.
      if (env.rank == 0) print_error(e.what());
      return 1;
    }
    // Internal/library errors name their rank; this rank may be failing alone.
    print_error(e.what());
    if (env.size > 1) MPI_Abort(env.world, 1);
    return 1;
  } catch (const std::exception& e) {
    print_error(std::string(e.what()) + " (" + sm::where_am_i() + ")");
    if (env.size > 1) MPI_Abort(env.world, 1);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  fix_malloc_mmap_threshold();
  int provided = 0;
  // Multiple: a checkpoint written in the background (train/checkpoint_writer.h) makes MPI calls on
  // the HDF5 thread while the main thread communicates; with less, checkpoints stay synchronous.
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    print_error("MPI_Init_thread failed");
    return 1;
  }
  // Before anything that communicates (MPI_Comm_dup already does): one message each way
  // with the ring neighbours, under --comm-timeout when the command line gives it.
  sm::AppEnv env;
  MPI_Comm_rank(MPI_COMM_WORLD, &env.rank);  // local calls: no communication yet
  MPI_Comm_size(MPI_COMM_WORLD, &env.size);
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int host_len = 0;
  MPI_Get_processor_name(host, &host_len);
  env.host.assign(host, static_cast<size_t>(host_len));
  sm::set_process_identity(env.rank, env.host);
  sm::install_crash_report(sm::where_am_i().c_str());  // after MPI_Init: its handler runs after ours
  sm::log_set_rank(env.rank);
  preset_comm_timeout(argc, argv);
  sm::check_ring_reachable(MPI_COMM_WORLD);
  MPI_Comm_dup(MPI_COMM_WORLD, &env.world);  // the same ranks and order as MPI_COMM_WORLD
  if (provided < MPI_THREAD_SERIALIZED)  // MULTIPLE is checked where it is needed (--ckpt-async)
    SM_WARN("the MPI library provides thread level " << provided << " < MPI_THREAD_SERIALIZED; "
            "keep data prefetch on the main thread");
  default_thread_count(env.world);

  int rc = run(argc, argv, env);

  MPI_Comm_free(&env.world);
  MPI_Finalize();
  return rc;
}
