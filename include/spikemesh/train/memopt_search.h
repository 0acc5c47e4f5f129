// memopt_search.h — memopt levels 2 to 4 and --memory-budget-mb (docs/architecture.md §4a):
// configurations of the stage's checkpointed segments chosen by measuring real steps of the
// run's own batch (forward and backward of every microbatch, no optimizer step; batch-norm
// running statistics, gradients and neuron state put back afterwards), with
// layers/memopt_probe.h giving every segment's peak bytes, saved and kept bytes and times.
//
//  level 2  level 1, then the segment where the peak happens is split into pieces over its
//           samples, doubling the pieces while the measured peak drops (a few trial steps);
//  level 3  level 2, then every segment that can run in pieces goes over time in chunks of
//           4, 2, then 1 steps while the peak drops (a fixed chunk length: what a piece holds
//           does not grow with T);
//  level 4  level 1, the peak segment split over samples (two trials at most); then segments
//           that are not split are un-checkpointed greedily, slowest recompute first, while the
//           peak PREDICTED from the last measurement (a segment kept whole adds saved - kept
//           bytes to every later segment's peaks) does not rise above the measured one; one
//           more step verifies it (falling back if the real peak rose above the prediction).
//  --memory-budget-mb B  the configurations are tried in that order (from level 0 when
//           --memopt-level 0) and the search stops at the first whose measured peak is <= B
//           (level 4: un-checkpoints while the prediction stays <= B); when none reaches it,
//           an Input error names the flag and the smallest peak reached.
// Every search starts with one unmeasured warm-up step (the first step of a run creates
// kernel primitives and allocator blocks).
// Collective over the layout's groups: every rank runs the same trial steps, and the numbers
// decisions are made from are maxima over the stage's dp and tp groups (the peak over the
// world), so the ranks of a stage choose the same configuration.
#pragma once
#include <string>
#include <vector>

#include "spikemesh/layers/ctx.h"
#include "spikemesh/models/memopt_plan.h"

namespace sm {

class Layout;
struct MicroBatch;

// One segment of this rank's stage as the chosen configuration ran it (measured).
struct MemoptSegmentReport {
  std::string unit;          // unit name ("unit k" when unnamed)
  size_t begin = 0, end = 0;  // its children
  std::string choice;        // MemoptSegment::describe()
  double saved_mb = 0, kept_mb = 0, forward_peak_mb = 0, backward_peak_mb = 0, forward_ms = 0;
};

struct MemoptSearchResult {
  bool searched = false;       // trial steps were run (level >= 2 or a budget)
  double optimize_ms = 0;      // wall time of the search, trial steps included
  int trial_steps = 0;
  double peak_mb = 0;          // measured peak of the chosen configuration (max over the world)
  double predicted_peak_mb = 0;  // level 4: the prediction it was chosen by (0: none)
  std::vector<std::string> log;  // one line per trial: what changed, the peak
  std::vector<MemoptSegmentReport> segments;  // the chosen configuration, measured (this stage)
};

// Chooses and applies (layout.set_memopt) the configuration of layout.plan().options.memopt.
// `micro`: the microbatches of one real step on this rank; `ctx`: seed and step of that step.
MemoptSearchResult optimize_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx);
// The configuration the layout runs now, measured on one trial step (`spikemesh plan`);
// collective as above.
MemoptSearchResult measure_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx);

}  // namespace sm
