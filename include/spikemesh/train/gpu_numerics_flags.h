// gpu_numerics_flags.h — the GPU numerics choices of `train`, `bench` and `eval`
// (kernels/conv_policy.h): the three flags, registered on a command by ONE function, and how a
// run's choice is resolved from them, a resumed run's record and the environment.
//
//   --conv-algos exact|deterministic|fast[-tuned]   default SPIKEMESH_CONV_ALGOS, else exact
//   --conv-fp32-precision ieee|tf32                 default SPIKEMESH_CONV_FP32_PRECISION, else ieee
//   --matmul-fp32-precision ieee|tf32               default SPIKEMESH_MATMUL_FP32_PRECISION, else ieee
//
// Precedence, per choice: a flag (or, for train, a --config key) > the resumed run's recorded
// value (train --resume: the checkpoint's configuration) > the environment > the default.
// A given value that differs from the resumed run's record wins, with one warning.
// The CPU and fp64: the choices only concern CUDA convolutions and matrix products in fp32/bf16/f16.
// On a run that uses the CPU (--device cpu, --precision fp64, or --device auto without a usable
// GPU) a non-default value that was GIVEN (flag or --config key) is an Input error naming it;
// one that comes only from the environment or a resumed record is ignored without an error
// (clusters export the variables for every job), and the run uses, and records, exact/ieee/ieee.
// Invariant: the resolution is a pure function of its inputs (tested without a GPU); the front
// end calls set_gpu_numerics() with its result once, before any GPU work.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "spikemesh/kernels/conv_policy.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace sm {

// The three choices as names ("" = not given / not recorded / not set).
struct GpuNumericsFlags {
  std::string conv_algos, conv_fp32_precision, matmul_fp32_precision;

  static constexpr int kCount = 3;
  std::string& at(int i);
  const std::string& at(int i) const;
  // "conv-algos", "conv-fp32-precision", "matmul-fp32-precision" (the flags without "--", the
  // TOML keys of train's configuration) and their environment variables.
  static const char* key(int i);
  static const char* env_var(int i);
};

// Adds --conv-algos, --conv-fp32-precision and --matmul-fp32-precision (with their help) to `cmd`,
// bound to `f`; returns the three options in key order. Values are checked at resolution
// (an Input error naming the flag), not by CLI11.
std::array<CLI::Option*, GpuNumericsFlags::kCount> add_gpu_numerics_flags(CLI::App& cmd, GpuNumericsFlags& f);

// The environment's values as given (unchecked; "" = unset).
GpuNumericsFlags gpu_numerics_env_values();

// The resumed run's recorded choices from its resolved configuration (TOML text, a checkpoint's
// /meta config); keys it lacks (an older run) stay "". Input error naming `origin` on bad TOML.
GpuNumericsFlags recorded_gpu_numerics(const std::string& config_toml, const std::string& origin);

// Where the run computes: what decides whether the choices can apply.
struct GpuNumericsTarget {
  std::string device = "auto";     // --device: cpu | cuda | auto
  std::string precision = "fp32";  // --precision
  int visible_gpus = 0;            // cuda_device_count()
  std::string no_gpu_reason;       // cuda_unavailable_reason() when visible_gpus == 0
  bool uses_cpu() const;           // --device cpu, fp64, or auto without a GPU
};

struct GpuNumericsResolution {
  GpuNumerics numerics;               // what the run uses (and records)
  std::vector<std::string> warnings;  // a given value replacing a resumed run's record (one each)
  std::vector<std::string> notes;     // environment values a resumed record overrides (info)
  std::vector<std::string> ignored;   // environment or record values a CPU run leaves unused (debug)
};

// given: flags / --config keys; recorded: the resumed run's ({} when not resuming); env:
// gpu_numerics_env_values(). Input error naming the flag (or variable, or `recorded_origin`)
// on an unknown name, and on a given non-default value when the target uses the CPU.
GpuNumericsResolution resolve_gpu_numerics(const GpuNumericsFlags& given, const GpuNumericsFlags& recorded,
                                           const GpuNumericsFlags& env, const GpuNumericsTarget& target,
                                           const std::string& recorded_origin = "the resumed run's configuration");

// The resolved choices as names, for a configuration file or a record.
GpuNumericsFlags gpu_numerics_names(const GpuNumerics& n);

// The target of a run with these --device and --precision values on this process (its visible GPUs).
GpuNumericsTarget gpu_numerics_target(const std::string& device, const std::string& precision);

// set_gpu_numerics(r.numerics); when `speak` (rank 0), the warnings, notes (info) and ignored
// values (debug) are logged.
void apply_gpu_numerics(const GpuNumericsResolution& r, bool speak);

}  // namespace sm
