// conv_policy.cpp — SPIKEMESH_CONV_ALGOS parsed (kernels/conv_policy.h).
#include "spikemesh/kernels/conv_policy.h"

#include <cstdlib>

#include "spikemesh/core/error.h"

namespace sm {

ConvPolicy conv_policy_from_name(const std::string& value) {
  ConvPolicy p;
  if (value.empty() || value == "exact") return p;
  p.name = value;
  if (value == "exact-tuned") {
    p.tuned = true;
  } else if (value == "fast") {
    p.allow_imprecise = true;
  } else if (value == "fast-tuned") {
    p.allow_imprecise = p.tuned = true;
  } else {
    SM_INPUT_ERROR("SPIKEMESH_CONV_ALGOS=" << value
                                           << ": unknown convolution policy (valid: exact, exact-tuned, fast, fast-tuned)");
  }
  return p;
}

ConvPolicy conv_policy_from_env() {
  const char* e = std::getenv("SPIKEMESH_CONV_ALGOS");
  return conv_policy_from_name(e ? e : "");
}

}  // namespace sm
