// spike_conv_sweep.h — `spikemesh bench --kernel spike-conv` (spike_conv_sweep.cpp): dense vs
// binary-input convolution time over firing rates and the measured crossover per shape.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sm {

// cifar10dvs_vgg's and spikformer_ti's convolutions of spikes, as "Cin,Cout,H,K".
const std::vector<std::string>& default_spike_conv_shapes();
// Prints the table for each "Cin,Cout,H,K[,stride]" shape (InputError naming --conv-shape on
// a malformed one) at batch `batch` (T·N), each time the median of `reps` runs.
void run_spike_conv_sweep(const std::vector<std::string>& shapes, int64_t batch, int reps);

}  // namespace sm
