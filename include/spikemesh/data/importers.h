// importers.h — making spikemesh datasets: Fashion-MNIST from Debian's IDX files, and a
// synthetic, learnable event-frame dataset with CIFAR10-DVS's shape for tests/benchmarks.
#pragma once
#include <cstdint>
#include <string>

namespace sm {

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte(.gz) from src_dir and writes `out`
// (u8 NCHW [N, 1, 28, 28], x_scale 1/255, 10 classes). Returns samples written.
int64_t import_fashion_mnist(const std::string& src_dir, const std::string& out);

struct SynthDvsConfig {
  int classes = 10, T = 10, size = 48;
  int64_t train = 1000, test = 200;
  uint64_t seed = 1;
};
// Event counts [N, T, 2, size, size] (u8): each class is a bright bar moving in its own
// direction (angle 2π·c/classes) from a random start; polarity 0 counts pixels the bar
// enters, polarity 1 pixels it leaves, plus sparse noise events.
int64_t make_synth_dvs(const SynthDvsConfig& cfg, const std::string& out);

}  // namespace sm
