// memopt_search.h — memopt levels 2 to 4 and --memory-budget-mb (docs/architecture.md §4a):
// the configuration of the stage's checkpointed segments chosen from ONE measured level-1 step
// (the caller's own step when it ran one under MemoptStepObserver; otherwise a trial step),
// predicted (train/memopt_predict.h) before anything is tried, then at most two trial steps of
// the run's own batch (forward and backward of every microbatch, no optimizer step; batch-norm
// running statistics, gradients and neuron state put back afterwards):
//
//  level 2  level 1, then the segment with the highest predicted peak split into pieces over
//           its samples, doubling while the predicted peak drops by more than 1% (the next
//           highest segment in turn); then piece chains (models/piece_chain.h: 2 to 4 units
//           whose backward runs in 2, 4 or 8 sample pieces together) while one lowers the
//           predicted peak by more than 1%; one trial verifies it;
//  level 3  level 2, then the other segments that can run in pieces go over time in chunks of
//           4, 2 or 1 steps, the chunk with the lowest predicted peak (a fixed chunk length:
//           what a piece holds does not grow with T);
//  level 4  the lowest predicted peak whose predicted step time is within --memopt-max-slowdown
//           (1.2) of level 0's: from level 0, greedily the change that lowers the highest
//           segment peak the most per predicted millisecond (checkpointing a segment before it,
//           or that segment checkpointed and in more sample pieces);
//  --memory-budget-mb B  the fewest pieces that bring the prediction under B (chains, then
//           time chunks too if needed), then un-checkpointing as level 4 while the prediction stays <= B;
//           a budget under the smallest predicted peak is refused before any trial, naming it.
// A trial whose measured peak is more than 5% above its prediction (or above the budget) is
// corrected once from its own measurement (segments checkpointed again, or more pieces); the
// configuration that runs is the best one measured. The level-0 step of a budget from level 0
// counts as the measured step; when it misses the budget the level-1 trial is one of the two.
// Collective over the layout's groups: every rank runs the same trial steps, and the numbers
// decisions are made from are maxima over the stage's dp and tp groups (the peak over the
// world), so the ranks of a stage choose the same configuration.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/timer.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/models/memopt_plan.h"
#include "spikemesh/train/memopt_predict.h"

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
  int trial_steps = 0;          // trial steps of the search (the caller's observed step not counted)
  double peak_mb = 0;          // measured peak of the chosen configuration (max over the world)
  double predicted_peak_mb = 0;  // the prediction the configuration was chosen by (0: none)
  double stage_peak_mb = 0;        // peak_mb and predicted_peak_mb of this pipeline stage (max over its dp/tp groups)
  double stage_predicted_peak_mb = 0;
  std::vector<std::string> log;  // one line per trial: what changed, the peak
  std::vector<MemoptSegmentReport> segments;  // the chosen configuration, measured (this stage)
};

// Whether the layout's memopt options need a search (a level of 2 or more, or a budget).
bool memopt_search_needed(const Layout& layout);

// The caller's own training step, measured for the search (construct it just before the step,
// finish() just after). The allocator bytes the step leaves behind for good (optimizer state
// made by a first step) are added to what it measured, as every later step carries them.
class MemoptStepObserver {
 public:
  explicit MemoptStepObserver(Layout& layout);
  ~MemoptStepObserver();
  MemoptStepObserver(const MemoptStepObserver&) = delete;
  MemoptStepObserver& operator=(const MemoptStepObserver&) = delete;
  // Collective over the layout's groups.
  MemoptTrial finish();

 private:
  Layout& layout_;
  std::unique_ptr<MemoptProbe> probe_;
  size_t before_ = 0, outer_peak_ = 0;
  Timer timer_;
};

// Chooses and applies (layout.set_memopt) the configuration of layout.plan().options.memopt.
// `micro`: the microbatches of one real step on this rank; `ctx`: seed and step of that step;
// `observed`: the caller's step under the layout's configuration (nullptr: a trial step measures
// it first). Collective over the layout's groups.
MemoptSearchResult optimize_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx,
                                   const MemoptTrial* observed = nullptr);
// The configuration the layout runs now, measured on one trial step (`spikemesh plan`);
// collective as above.
MemoptSearchResult measure_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx);

}  // namespace sm
