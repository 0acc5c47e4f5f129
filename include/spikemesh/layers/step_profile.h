// step_profile.h — the per-layer, per-pass time table of ONE training step (`bench --profile`
// on a GPU): rows (layer name, type, pass, ms, share of the step) sorted by time, the per-type
// aggregate, and the rest of the step (optimizer, loss, gaps between layers) as the remainder.
// Pure host logic over recorded timings (the CUDA-event recorder is gpu_layer_profile.h), so
// that everything here is tested without a GPU.
// Invariants: timings of the same (layer, pass) are summed (calls counted); rows sort by
// descending ms, ties by layer name then pass order; shares are of step_ms (0 when step_ms is
// not positive); rest_ms = step_ms − the sum of the rows, clamped at 0 (overlapping leaves
// would otherwise make it negative); the type aggregate sorts like the rows, ties by type.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace sm {

// forward; backward (backward_input that also accumulates the parameter gradients);
// backward-input and backward-weight (the split of B and W, ctx.split_wgrad).
enum class ProfilePass { Forward, Backward, BackwardInput, BackwardWeight };
const char* profile_pass_name(ProfilePass p);

// One timed call of a leaf layer's pass.
struct PassTiming {
  std::string layer;  // full layer name ("" : the type stands in)
  std::string type;   // spec type name, e.g. "conv2d"
  ProfilePass pass = ProfilePass::Forward;
  double ms = 0.0;
};

struct StepProfileRow {
  std::string layer, type;
  ProfilePass pass = ProfilePass::Forward;
  double ms = 0.0, share = 0.0;  // share of the step, 0..1
  int64_t calls = 0;
};

struct StepProfileType {
  std::string type;
  double forward_ms = 0.0, backward_ms = 0.0;  // backward: every backward pass
  double share = 0.0;
  int64_t layers = 0;  // distinct layer names of this type
  double total_ms() const { return forward_ms + backward_ms; }
};

struct StepProfile {
  std::string source;             // how the times were taken, e.g. "cuda-events"
  double step_ms = 0.0;           // the profiled step, start to end
  double layers_ms = 0.0;         // the sum of the rows
  double rest_ms = 0.0;           // step_ms − layers_ms, at least 0
  double optimizer_phase_ms = -1.0;  // the step's optimizer phase as the step timed it (< 0: unknown)
  std::vector<StepProfileRow> rows;
  std::vector<StepProfileType> types;
};

StepProfile build_step_profile(const std::vector<PassTiming>& timings, double step_ms, const std::string& source);

// {"source", "step_ms", "layers_ms", "rest_ms", ["optimizer_phase_ms",] "rows": [{"layer",
// "type", "pass", "ms", "share", "calls"}...], "types": [{"type", "forward_ms", "backward_ms",
// "share", "layers"}...]} — every row, in table order.
nlohmann::ordered_json step_profile_json(const StepProfile& p);

// The printed table: the first `max_rows` rows (0: all; the others summed in one line), the
// rest of the step, then the per-type aggregate. Lines start with two spaces.
std::string format_step_profile(const StepProfile& p, size_t max_rows);

}  // namespace sm
