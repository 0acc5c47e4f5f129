// spike_conv_sweep.h — `spikemesh bench --kernel spike-conv` (spike_conv_sweep.cpp): dense vs
// binary-input convolution time over firing rates and the measured crossover per shape; and
// `--kernel winograd`: the dense 3×3 passes through oneDNN direct, oneDNN Winograd and our own.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/kernels/cpu/conv.h"

namespace sm {

// "Cin,Cout,H,K[,stride]" -> the geometry of batch `batch`, padding K/2 (InputError naming
// --conv-shape on a malformed one).
cpu::Conv2dGeometry parse_conv_shape(const std::string& text, int64_t batch);

// cifar10dvs_vgg's and spikformer_ti's convolutions of spikes, as "Cin,Cout,H,K".
const std::vector<std::string>& default_spike_conv_shapes();
// Prints the table for each "Cin,Cout,H,K[,stride]" shape (InputError naming --conv-shape on
// a malformed one) at batch `batch` (T·N), each time the median of `reps` runs.
void run_spike_conv_sweep(const std::vector<std::string>& shapes, int64_t batch, int reps);
// cifar10dvs_vgg's 3×3 convolutions, as "Cin,Cout,H,K".
const std::vector<std::string>& default_winograd_shapes();
// Prints forward and input-gradient times per kernel for each shape (3×3 stride 1 only).
void run_winograd_sweep(const std::vector<std::string>& shapes, int64_t batch, int reps);

}  // namespace sm
