// conv_policy.h — the process's GPU numerics: the convolution-algorithm policy and the fp32
// precision of convolutions and matrix products (PyTorch's
// torch.backends.cudnn.conv.fp32_precision and torch.backends.cuda.matmul.fp32_precision).
//
// Algorithm policy (--conv-algos, default from SPIKEMESH_CONV_ALGOS):
//   exact (default)   CPU-faithful: deterministic engines; f32 without FFT/Winograd transforms
//                     (results within ~1e-6 relative of a direct sum, like the CPU's)
//   deterministic     bitwise reproducible run to run: any deterministic engine, transforms
//                     (FFT/Winograd) allowed
//   fast              anything cuDNN offers (atomics, FFT, Winograd)
//   <policy>-tuned    the same filter, ranked by timing each candidate once per shape
//                     (PyTorch's cudnn.benchmark = True) instead of cuDNN's heuristic
// fp32 precision (--conv-fp32-precision / --matmul-fp32-precision, defaults from
// SPIKEMESH_CONV_FP32_PRECISION / SPIKEMESH_MATMUL_FP32_PRECISION): ieee (full fp32 FMA) or
// tf32 (TF32 tensor cores, ~1e-3 relative). Only f32 data on a CUDA device is affected; the
// CPU (oneDNN) and f64/bf16/f16 ignore them. The front ends refuse a non-default value GIVEN for
// a CPU or fp64 run and ignore one from the environment there (train/gpu_numerics_flags.h).
//
// Invariant: set_gpu_numerics() is called once per process, by the command's front end, before
// the first GPU kernel; every later reader (conv_cudnn, gemm_cublas) sees that one value.
#pragma once
#include <string>

namespace sm {

enum class ConvAlgoFamily { Exact, Deterministic, Fast };
enum class Fp32Precision { IEEE, TF32 };

struct ConvPolicy {
  std::string name = "exact";
  ConvAlgoFamily family = ConvAlgoFamily::Exact;
  bool deterministic = true;     // exact, deterministic: bitwise reproducible engines only
  bool allow_imprecise = false;  // deterministic, fast: FFT/Winograd transforms allowed
  bool tuned = false;            // *-tuned: ranked by measured time, not the heuristic
};

// The policy named by `value` ("" = exact); InputError naming `source` (the flag or variable,
// default SPIKEMESH_CONV_ALGOS) and the valid names. Messages read "FLAG VALUE" when `source` is
// a flag ("--..."), "SOURCE=VALUE" otherwise (also for fp32_precision_from_name).
ConvPolicy conv_policy_from_name(const std::string& value, const std::string& source = "SPIKEMESH_CONV_ALGOS");
// SPIKEMESH_CONV_ALGOS's policy (exact when unset).
ConvPolicy conv_policy_from_env();

// "ieee" | "tf32" ("" = ieee); InputError naming `source` otherwise.
Fp32Precision fp32_precision_from_name(const std::string& value, const std::string& source);
const char* fp32_precision_name(Fp32Precision p);

struct GpuNumerics {
  ConvPolicy conv;
  Fp32Precision conv_fp32 = Fp32Precision::IEEE;
  Fp32Precision matmul_fp32 = Fp32Precision::IEEE;
  bool is_default() const;  // exact, ieee, ieee
};

// The environment's defaults: SPIKEMESH_CONV_ALGOS, SPIKEMESH_CONV_FP32_PRECISION,
// SPIKEMESH_MATMUL_FP32_PRECISION (InputError naming the variable on a bad value).
GpuNumerics gpu_numerics_from_env();
// The process's numerics (gpu_numerics_from_env() until set_gpu_numerics is called).
const GpuNumerics& gpu_numerics();
void set_gpu_numerics(const GpuNumerics& n);

}  // namespace sm
