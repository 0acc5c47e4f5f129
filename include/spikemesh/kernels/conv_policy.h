// conv_policy.h — the process's convolution-algorithm policy, SPIKEMESH_CONV_ALGOS (read by
// kernels/cuda/conv_cudnn.h's default_conv_options(); validated at start-up by the program so
// that a typo fails on every device, not only at a GPU's first convolution).
//   exact (default, unset or empty)  deterministic algorithms; f32: FMA math, no FFT/Winograd
//   exact-tuned                      the same filters, ranked by timing each algorithm once
//   fast                             any algorithm cuDNN ranks (FFT, Winograd, atomics); no TF32
//   fast-tuned                       fast, ranked by timing (PyTorch's cudnn.benchmark = True)
// CPU convolutions (oneDNN) do not depend on it.
#pragma once
#include <string>

namespace sm {

struct ConvPolicy {
  std::string name = "exact";
  bool allow_imprecise = false;  // fast*: non-deterministic and FFT/Winograd algorithms allowed
  bool tuned = false;            // *-tuned: ranked by measured time, not the heuristic
};

// The policy named by `value`; InputError naming SPIKEMESH_CONV_ALGOS and the valid names.
ConvPolicy conv_policy_from_name(const std::string& value);
// SPIKEMESH_CONV_ALGOS's policy (exact when unset).
ConvPolicy conv_policy_from_env();

}  // namespace sm
