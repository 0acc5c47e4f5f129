// conv_policy.cpp — the GPU numerics policy parsed and held for the process (kernels/conv_policy.h).
#include "spikemesh/kernels/conv_policy.h"

#include <cstdlib>
#include <mutex>

#include "spikemesh/core/error.h"

namespace sm {

namespace {
// "--conv-algos fast" for a flag, "SPIKEMESH_CONV_ALGOS=fast" for a variable or file key.
std::string given_as(const std::string& source, const std::string& value) {
  return source.rfind("--", 0) == 0 ? source + " " + value : source + "=" + value;
}
}  // namespace

ConvPolicy conv_policy_from_name(const std::string& value, const std::string& source) {
  ConvPolicy p;
  std::string base = value.empty() ? "exact" : value;
  const std::string suffix = "-tuned";
  if (base.size() > suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0) {
    p.tuned = true;
    base.resize(base.size() - suffix.size());
  }
  if (base == "exact") {
    p.family = ConvAlgoFamily::Exact;
  } else if (base == "deterministic") {
    p.family = ConvAlgoFamily::Deterministic;
    p.allow_imprecise = true;
  } else if (base == "fast") {
    p.family = ConvAlgoFamily::Fast;
    p.deterministic = false;
    p.allow_imprecise = true;
  } else {
    SM_INPUT_ERROR(given_as(source, value)
                          << ": unknown convolution policy (valid: exact, deterministic, fast, each optionally "
                             "with -tuned: exact, exact-tuned, deterministic, deterministic-tuned, fast, fast-tuned)");
  }
  p.name = value.empty() ? "exact" : value;
  return p;
}

ConvPolicy conv_policy_from_env() {
  const char* e = std::getenv("SPIKEMESH_CONV_ALGOS");
  return conv_policy_from_name(e ? e : "");
}

Fp32Precision fp32_precision_from_name(const std::string& value, const std::string& source) {
  if (value.empty() || value == "ieee") return Fp32Precision::IEEE;
  if (value == "tf32") return Fp32Precision::TF32;
  SM_INPUT_ERROR(given_as(source, value) << ": unknown fp32 precision (valid: ieee, tf32)");
}

const char* fp32_precision_name(Fp32Precision p) { return p == Fp32Precision::TF32 ? "tf32" : "ieee"; }

bool GpuNumerics::is_default() const {
  return conv.family == ConvAlgoFamily::Exact && !conv.tuned && conv_fp32 == Fp32Precision::IEEE &&
         matmul_fp32 == Fp32Precision::IEEE;
}

GpuNumerics gpu_numerics_from_env() {
  GpuNumerics n;
  n.conv = conv_policy_from_env();
  const char* c = std::getenv("SPIKEMESH_CONV_FP32_PRECISION");
  n.conv_fp32 = fp32_precision_from_name(c ? c : "", "SPIKEMESH_CONV_FP32_PRECISION");
  const char* m = std::getenv("SPIKEMESH_MATMUL_FP32_PRECISION");
  n.matmul_fp32 = fp32_precision_from_name(m ? m : "", "SPIKEMESH_MATMUL_FP32_PRECISION");
  return n;
}

namespace {
std::mutex& numerics_mu() {
  static std::mutex mu;
  return mu;
}
GpuNumerics*& numerics_slot() {
  static GpuNumerics* n = nullptr;  // never destroyed (read by kernels until exit)
  return n;
}
}  // namespace

const GpuNumerics& gpu_numerics() {
  std::lock_guard<std::mutex> lock(numerics_mu());
  GpuNumerics*& n = numerics_slot();
  if (!n) n = new GpuNumerics(gpu_numerics_from_env());
  return *n;
}

void set_gpu_numerics(const GpuNumerics& value) {
  std::lock_guard<std::mutex> lock(numerics_mu());
  GpuNumerics*& n = numerics_slot();
  if (!n) n = new GpuNumerics(value);
  else *n = value;
}

}  // namespace sm
