// pp_timeline.h — what a measured pipeline timeline says: the gathered step (collective over
// the pp comm), and, pure, the measured bubble
// of one step (every rank's recorded actions, pp_runtime.h) and the action costs measured in
// it, so that the simulator (pp_simulator.h) can replay the same schedule with them and the
// two bubbles can be compared (bench, pipeline.h5, scripts/plot_pipeline.py).
// Times are seconds on pipeline rank 0's monotonic clock: every rank's clock is mapped onto it
// at a barrier when the step is gathered (error: the barrier's exit skew, microseconds).
#pragma once
#include <vector>

#include "spikemesh/parallel/pipeline/pp_runtime.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"

namespace sm {

class Comm;

// One step of every pipeline rank: per_rank[r] = rank r's recorded actions.
using PpStepTimeline = std::vector<std::vector<PpRecordedAction>>;

// Every pipeline rank's recorded actions of the last step (PipelineRuntime::last_timeline()),
// on every rank, on pp rank 0's clock. Collective over `pp`.
PpStepTimeline gather_step_timeline(Comm& pp, const std::vector<PpRecordedAction>& mine);

// 1 − Σ compute time / (ranks · (latest end − earliest start)); compute = F, B, W, BW.
double measured_bubble(const PpStepTimeline& step);

// Mean measured duration per logical stage of F, B and W (a BW counts half B, half W) and
// of a SEND/RECV-free transfer post (mean SEND duration) — the simulator's inputs.
PpCosts costs_from_timeline(const PpSchedule& schedule, const std::vector<PpStepTimeline>& steps);

// The step shifted so that its earliest action starts at 0.
PpStepTimeline aligned(const PpStepTimeline& step);

}  // namespace sm
