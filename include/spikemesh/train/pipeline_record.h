// pipeline_record.h — the measured pipeline timeline of a run: every action's start and end on
// every pipeline rank for the first N steps (gathered over the pp comm), written by world rank
// 0 as <run>/pipeline.h5 next to the simulator's replay of the same schedule with the measured
// action costs (file format: output/README.md; drawn by scripts/plot_pipeline.py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/parallel/pipeline/pp_timeline.h"

namespace sm {

class Layout;

class PipelineRecorder {
 public:
  // Records the first `steps` steps seen (0: none); nothing at all without a pipeline.
  PipelineRecorder(Layout& layout, int64_t steps);
  bool active() const;  // a pipeline, and steps still to record
  // After a training step (global step number `step`, 1-based): gathers the step's timeline.
  // Collective over the layout's pp comm while active() (every rank of a run agrees on it).
  void after_step(int64_t step);
  // Writes `path` when this rank is world rank 0 and something was recorded. Not collective.
  void write(const std::string& path) const;

 private:
  Layout& layout_;
  int64_t limit_ = 0;
  std::vector<int64_t> step_numbers_;
  std::vector<PpStepTimeline> steps_;
};

}  // namespace sm
