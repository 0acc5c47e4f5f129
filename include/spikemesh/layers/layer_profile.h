// layer_profile.h — optional per-layer-type timing of forward and backward (`bench --profile`).
// When enabled, Layer's non-virtual entry points time every LEAF layer (composites would
// count their children twice) with the host clock and add the time to its type's row.
// Invariants: disabled by default and then costs one branch per call; times of CPU layers
// only (a CUDA launch returns before its kernel finishes, so CUDA layers are not timed);
// backward = backward_input + backward_weight.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sm {

struct LayerTypeTiming {
  std::string type;          // spec type name, e.g. "conv2d"
  double forward_ms = 0.0;   // summed over calls
  double backward_ms = 0.0;  // backward_input + backward_weight, summed
  int64_t forward_calls = 0;
  double forward_flops = 0.0;  // conv2d/conv1d/linear: 2·weight elements·output positions, summed
};

void layer_profile_enable(bool on);
bool layer_profile_enabled();
void layer_profile_reset();
// Adds one call's time to its type's row and, when `layer` is given, to that layer's row.
void layer_profile_add(const std::string& type, double forward_ms, double backward_ms, bool is_forward_call,
                       double forward_flops = 0.0, const std::string& layer = "");
// Rows by descending total time.
std::vector<LayerTypeTiming> layer_profile_report();

// One leaf layer's (or fused pair's, "bn+next") time, summed over calls.
struct LayerTiming {
  std::string layer, type;
  double forward_ms = 0.0, backward_ms = 0.0;
};
// Rows in first-call order (the forward's order of the model's layers).
std::vector<LayerTiming> layer_profile_layers();

// Per weight layer whose input is a spike tensor (f32, CPU): the firing rate it saw and, per
// pass, which kernel ran (spike_conv_choice.h) and its time. Rows in first-call order.
struct SpikeConvRow {
  std::string layer;          // full layer name, e.g. "features.2.proj_bn.0"
  std::string geometry;       // "Cin→Cout HxW kK" of one call
  double density_sum = 0.0;   // summed over forward calls
  int64_t forward_calls = 0, forward_sparse = 0, weight_calls = 0, weight_sparse = 0;
  double forward_ms = 0.0, weight_ms = 0.0;
  double crossover_forward = 0.0, crossover_weights = 0.0;
  double firing_rate() const { return forward_calls > 0 ? density_sum / forward_calls : 0.0; }
  // "dense", "sparse" or "mixed" (both over the calls)
  const char* forward_kernel() const { return kernel_of(forward_sparse, forward_calls); }
  const char* weights_kernel() const { return kernel_of(weight_sparse, weight_calls); }
  static const char* kernel_of(int64_t sparse, int64_t calls) {
    return sparse == 0 ? "dense" : sparse == calls ? "sparse" : "mixed";
  }
};
void layer_profile_spike_conv(const std::string& layer, const std::string& geometry, bool forward, double density,
                              bool sparse, double ms, double crossover);
std::vector<SpikeConvRow> layer_profile_spike_conv_report();

}  // namespace sm
