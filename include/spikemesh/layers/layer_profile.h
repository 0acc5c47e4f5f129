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
void layer_profile_add(const std::string& type, double forward_ms, double backward_ms, bool is_forward_call,
                       double forward_flops = 0.0);
// Rows by descending total time.
std::vector<LayerTypeTiming> layer_profile_report();

}  // namespace sm
