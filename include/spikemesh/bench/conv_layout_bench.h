// conv_layout_bench.h — `spikemesh bench --kernel conv-layout` (conv_layout_bench.cpp): the
// bf16 convolutions of cifar10dvs_vgg through cuDNN's graph API in NCHW and in channels-last
// NHWC, each direction timed with CUDA events, to measure whether cuDNN pays for NCHW<->NHWC
// transposes in bf16. GPU only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sm {

// Prints the table for each "Cin,Cout,H,K[,stride]" shape (default: cifar10dvs_vgg's 3×3
// convolutions) at batch `batch` (T·N folded, as the layers run them): per direction the
// median of `reps` timed runs after `warmup` (at least one: the plan is built there) in NCHW
// and NHWC, their ratio and the engine of each. `device` is --device: cpu, or no GPU visible,
// or a build without CUDA or cuDNN is refused with one InputError.
void run_conv_layout_bench(const std::vector<std::string>& shapes, int64_t batch, int reps, int warmup,
                           const std::string& device);

}  // namespace sm
