// kernel_bench.h — the kernel microbenchmarks of `spikemesh bench --kernel`: lif (the fused
// neuron kernels, GPU), spike-conv (dense vs binary-input convolution over firing rates, CPU),
// winograd (the 3x3 passes, CPU) and conv-layout (bf16 NCHW vs NHWC through cuDNN, GPU). One
// process; each prints its own table. Input errors name the flag.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sm {

struct KernelBenchOptions {
  std::string kernel;                    // lif | spike-conv | winograd | conv-layout
  std::vector<std::string> conv_shapes;  // "Cin,Cout,H,K[,stride]" (empty: the models' own)
  int64_t batch_size = 8;                // batch = batch_size x T for the convolutions
  int T = 0;                             // 0: 1 (CPU sweeps), 10 (conv-layout), the kernel's default (lif)
  int64_t steps = 20, warmup = 5;        // timed and untimed repetitions
  int64_t kernel_neurons = 1 << 22;      // lif: neurons
  std::string precision = "fp32";        // lif: fp32 | bf16
  std::string device = "auto";
};

// Runs o.kernel; `print`: this process prints the result table (lif).
void run_kernel_bench(const KernelBenchOptions& o, bool print);

}  // namespace sm
