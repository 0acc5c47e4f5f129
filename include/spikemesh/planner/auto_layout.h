// auto_layout.h — `--distributed-mode auto --prefer speed|memory|capacity` (docs/architecture.md
// §5b): every feasible layout of the job's ranks is predicted by the cost model
// (planner/cost_model.h) from the calibration (planner/calibration.h: measured once per
// machine and model, cached), ranked by the preference, and the best is chosen with a reason.
//   speed     the fastest predicted step among the layouts that fit in a rank's memory
//   memory    the smallest predicted peak among those within 1.5x of the fastest
//   capacity  the largest global batch that would fit (the memory left over the growth of the
//             peak per sample), ties to the faster
// An explicit mode (or other layout flags) plus --prefer only fills what was not set: the
// candidates are those that agree with every given flag.
// Every function here is collective over `world` (nullptr: one process) and returns the same
// choice on every rank.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/planner/calibration.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/planner/cost_model.h"

namespace sm {

// What the user fixed; empty / 0 / -1: free for the planner.
struct LayoutConstraints {
  std::string mode;                 // an explicit --distributed-mode (not auto)
  std::vector<int64_t> mesh_shape;  // --mesh-shape DP TP PP as given (missing values are 1)
  std::string sharding;             // --optimizer-sharding
  std::string pp_schedule;          // --pp-schedule (not auto)
  int pp_virtual_stages = 0;
  int pp_microbatches = 0;
  int memopt_level = -1;
  bool allows(const LayoutCandidate& c) const;
  bool any() const;                 // something is fixed
  bool all_set() const;             // nothing is left to fill (mode and mesh and sharding and memopt)
};

struct AutoLayoutRequest {
  ProfileRequest profile;       // the model (sizes are filled by choose_layout)
  std::string model_name;       // for SpikingJelly's rule (the VGG)
  int world = 1;
  int64_t global_batch = 1;     // samples per optimizer step over every replica
  Preference prefer = Preference::Speed;
  LayoutConstraints fixed;
  std::string calibration_path; // "": default_calibration_path()
  double memory_budget_mb = 0;  // > 0: the memory a rank may use instead of the machine's
  bool remeasure = false;       // measure the machine and the model again (`spikemesh calibrate`)
};

struct RankedLayout {
  LayoutCandidate candidate;
  LayoutPrediction prediction;
  bool fits = true;
  double max_global_batch = 0;  // capacity: the largest global batch predicted to fit
};

struct AutoLayoutResult {
  std::vector<RankedLayout> ranked;  // best first (those that fit, then the others)
  LayoutCandidate chosen;
  std::vector<int> chosen_pp_layout;  // pp: the partition its prediction is for (units per logical stage)
  std::string reason;
  LayoutCandidate spikingjelly_rule;  // what SpikingJelly's recommender would pick (a floor)
  bool spikingjelly_rule_ranked = false;
  RankedLayout spikingjelly_prediction;
  std::string calibration_note;       // where the calibration came from
  // The top `top` rows (predicted step ms, samples/s, peak MB, state + activations), the pick
  // and its reason, and SpikingJelly's rule for comparison.
  std::string report(int top = 5) const;
};

// Collective over `world`: reads (or measures and writes, rank 0) the calibration, predicts,
// ranks and chooses. Input errors: no candidate agrees with the fixed flags, none fits (names the
// closest), a calibration file that is not one.
AutoLayoutResult choose_layout(Comm* world, AutoLayoutRequest r);

// Collective over `world`: measures the machine (calibration.h) and writes it into the file at
// `path` ("" the default), keeping the file's model profiles when the machine is the same.
// Returns the cache written.
CalibrationCache calibrate_machine(Comm* world, Device dev, const std::string& path);

// SpikingJelly's recommender (docs/semantics.md, the `--prefer` row), for `model_name`, `world` ranks and `global_batch`.
LayoutCandidate spikingjelly_rule(const std::string& model_name, int world, int64_t global_batch, Preference p,
                                  int units);

}  // namespace sm
