// gpu_numerics_flags.cpp — the GPU numerics flags and their resolution (train/gpu_numerics_flags.h).
#include "spikemesh/train/gpu_numerics_flags.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <toml++/toml.h>

#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/toml_guard.h"

namespace sm {

namespace {
const char* const kKeys[GpuNumericsFlags::kCount] = {"conv-algos", "conv-fp32-precision", "matmul-fp32-precision"};
const char* const kEnvVars[GpuNumericsFlags::kCount] = {"SPIKEMESH_CONV_ALGOS", "SPIKEMESH_CONV_FP32_PRECISION",
                                                        "SPIKEMESH_MATMUL_FP32_PRECISION"};

const char* default_name(int i) { return i == 0 ? "exact" : "ieee"; }

// The canonical name of `value` for choice i; Input error naming `source` when unknown.
std::string canonical(int i, const std::string& value, const std::string& source) {
  if (i == 0) return conv_policy_from_name(value, source).name;
  return fp32_precision_name(fp32_precision_from_name(value, source));
}

// Why a given non-default value cannot apply to a run on the CPU (target.uses_cpu()).
std::string cpu_refusal(int i, const std::string& value, const GpuNumericsTarget& t) {
  const std::string what = i == 0 ? "the convolution-algorithm policy chooses among cuDNN's algorithms on CUDA "
                                    "devices (the CPU's convolutions are always exact)"
                                  : "TF32 exists only on CUDA devices";
  std::string where;
  if (t.precision == "fp64")
    where = "--precision fp64 runs on the CPU, the exact reference";
  else if (t.device == "cpu")
    where = "this run uses the CPU (--device cpu)";
  else
    where = "this run uses the CPU (--device " + t.device + ": no usable GPU" +
            (t.no_gpu_reason.empty() ? "" : ": " + t.no_gpu_reason) + ")";
  return std::string("--") + kKeys[i] + " " + value + ": " + what + "; " + where +
         " (drop the flag or its --config key)";
}
}  // namespace

std::string& GpuNumericsFlags::at(int i) {
  return i == 0 ? conv_algos : i == 1 ? conv_fp32_precision : matmul_fp32_precision;
}
const std::string& GpuNumericsFlags::at(int i) const {
  return i == 0 ? conv_algos : i == 1 ? conv_fp32_precision : matmul_fp32_precision;
}
const char* GpuNumericsFlags::key(int i) { return kKeys[i]; }
const char* GpuNumericsFlags::env_var(int i) { return kEnvVars[i]; }

std::array<CLI::Option*, GpuNumericsFlags::kCount> add_gpu_numerics_flags(CLI::App& cmd, GpuNumericsFlags& f) {
  static const char* const kHelp[GpuNumericsFlags::kCount] = {
      "GPU convolution algorithms (cuDNN): exact (CPU-faithful: deterministic, no FFT/Winograd for fp32) | "
      "deterministic (bitwise reproducible run to run, any deterministic algorithm) | fast (anything, e.g. atomics), "
      "each optionally -tuned (every candidate timed once per shape: PyTorch's cudnn.benchmark); default "
      "$SPIKEMESH_CONV_ALGOS, else exact",
      "fp32 GPU convolutions: ieee (full fp32) | tf32 (TF32 tensor cores, about 1e-3 relative): PyTorch's "
      "torch.backends.cudnn.conv.fp32_precision; default $SPIKEMESH_CONV_FP32_PRECISION, else ieee; bf16/fp16 "
      "runs ignore it",
      "fp32 GPU matrix products (cuBLAS: linear layers): ieee | tf32: PyTorch's "
      "torch.backends.cuda.matmul.fp32_precision; default $SPIKEMESH_MATMUL_FP32_PRECISION, else ieee; bf16/fp16 "
      "runs ignore it"};
  static const char* const kCommon =
      ". CUDA only: a non-default value given for a CPU or fp64 run is an error (one from the environment is "
      "ignored there); train --resume keeps the run's recorded value unless this flag changes it";
  std::array<CLI::Option*, GpuNumericsFlags::kCount> opts{};
  for (int i = 0; i < GpuNumericsFlags::kCount; ++i)
    opts[i] = cmd.add_option(std::string("--") + kKeys[i], f.at(i), std::string(kHelp[i]) + kCommon);
  return opts;
}

GpuNumericsFlags gpu_numerics_env_values() {
  GpuNumericsFlags f;
  for (int i = 0; i < GpuNumericsFlags::kCount; ++i)
    if (const char* v = std::getenv(kEnvVars[i])) f.at(i) = v;
  return f;
}

GpuNumericsFlags recorded_gpu_numerics(const std::string& config_toml, const std::string& origin) {
  GpuNumericsFlags f;
  if (config_toml.empty()) return f;
  if (const std::string why = toml_parser_bug_reason(config_toml); !why.empty()) SM_INPUT_ERROR(origin << ": " << why);
  toml::table t;
  try {
    t = toml::parse(config_toml, origin);
  } catch (const toml::parse_error& e) {
    SM_INPUT_ERROR(origin << ": " << e.description());
  }
  for (int i = 0; i < GpuNumericsFlags::kCount; ++i)
    if (const toml::node* n = t.get(kKeys[i]))
      if (const auto* s = n->as_string()) f.at(i) = s->get();
  return f;
}

bool GpuNumericsTarget::uses_cpu() const {
  return device == "cpu" || precision == "fp64" || (device == "auto" && visible_gpus == 0);
}

GpuNumericsResolution resolve_gpu_numerics(const GpuNumericsFlags& given, const GpuNumericsFlags& recorded,
                                           const GpuNumericsFlags& env, const GpuNumericsTarget& target,
                                           const std::string& recorded_origin) {
  GpuNumericsResolution res;
  GpuNumericsFlags chosen;
  for (int i = 0; i < GpuNumericsFlags::kCount; ++i) {
    const std::string flag = std::string("--") + kKeys[i];
    const std::string g = given.at(i).empty() ? "" : canonical(i, given.at(i), flag);
    const std::string r = recorded.at(i).empty() ? "" : canonical(i, recorded.at(i), recorded_origin + ": " + kKeys[i]);
    const std::string e = env.at(i).empty() ? "" : canonical(i, env.at(i), kEnvVars[i]);
    std::string& c = chosen.at(i);
    if (!g.empty()) {
      c = g;
      if (!r.empty() && r != g)
        res.warnings.push_back(flag + " " + g + " differs from the run's recorded " + r +
                               ": the resumed run continues with " + g);
    } else if (!r.empty()) {
      c = r;
      if (!e.empty() && e != r)
        res.notes.push_back(std::string(kEnvVars[i]) + "=" + e +
                            " is not applied: the resumed run keeps its recorded " + r + " (" + flag + " changes it)");
    } else {
      c = e.empty() ? default_name(i) : e;
    }
    if (target.uses_cpu() && c != default_name(i)) {
      if (!g.empty()) SM_INPUT_ERROR(cpu_refusal(i, c, target));
      const std::string from = r.empty() ? std::string(kEnvVars[i]) + "=" + c
                                         : "the resumed run's " + std::string(kKeys[i]) + " " + c;
      res.ignored.push_back(from + " does not apply to a CPU run: it uses and records " + default_name(i));
      c = default_name(i);
    }
  }
  res.numerics.conv = conv_policy_from_name(chosen.conv_algos, "--conv-algos");
  res.numerics.conv_fp32 = fp32_precision_from_name(chosen.conv_fp32_precision, "--conv-fp32-precision");
  res.numerics.matmul_fp32 = fp32_precision_from_name(chosen.matmul_fp32_precision, "--matmul-fp32-precision");
  return res;
}

GpuNumericsFlags gpu_numerics_names(const GpuNumerics& n) {
  GpuNumericsFlags f;
  f.conv_algos = n.conv.name;
  f.conv_fp32_precision = fp32_precision_name(n.conv_fp32);
  f.matmul_fp32_precision = fp32_precision_name(n.matmul_fp32);
  return f;
}

GpuNumericsTarget gpu_numerics_target(const std::string& device, const std::string& precision) {
  GpuNumericsTarget t;
  t.device = device;
  t.precision = precision;
  t.visible_gpus = cuda_device_count();
  if (t.visible_gpus == 0) t.no_gpu_reason = cuda_unavailable_reason();
  return t;
}

void apply_gpu_numerics(const GpuNumericsResolution& r, bool speak) {
  set_gpu_numerics(r.numerics);
  if (!speak) return;
  for (const std::string& w : r.warnings) SM_WARN(w);
  for (const std::string& n : r.notes) SM_INFO(n);
  for (const std::string& n : r.ignored) SM_DEBUG(n);
}

}  // namespace sm
