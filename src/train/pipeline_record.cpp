// pipeline_record.cpp — gathering and writing the pipeline timeline (pipeline_record.h).
#include "spikemesh/train/pipeline_record.h"

#include <algorithm>
#include <sstream>

#include "spikemesh/core/timer.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"

namespace sm {

namespace {
// Columns of one table of actions (measured or simulated).
struct Columns {
  std::vector<int64_t> step;
  std::vector<int32_t> rank, kind, stage, microbatch;
  std::vector<double> start, end;
  void add(int64_t st, int r, const PpAction& a, double s, double e) {
    step.push_back(st);
    rank.push_back(r);
    kind.push_back(static_cast<int32_t>(a.kind));
    stage.push_back(a.stage);
    microbatch.push_back(a.microbatch);
    start.push_back(s);
    end.push_back(e);
  }
  void write(const H5Group& g) const {
    const int64_t n = static_cast<int64_t>(step.size());
    g.write_raw("step", DType::I64, {n}, step.data());
    g.write_raw("rank", DType::I32, {n}, rank.data());
    g.write_raw("kind", DType::I32, {n}, kind.data());
    g.write_raw("stage", DType::I32, {n}, stage.data());
    g.write_raw("microbatch", DType::I32, {n}, microbatch.data());
    g.write_raw("start", DType::F64, {n}, start.data());
    g.write_raw("end", DType::F64, {n}, end.data());
  }
};
}  // namespace

PipelineRecorder::PipelineRecorder(Layout& layout, int64_t steps)
    : layout_(layout), limit_(layout.pipeline() ? steps : 0) {}

bool PipelineRecorder::active() const { return static_cast<int64_t>(steps_.size()) < limit_; }

void PipelineRecorder::after_step(int64_t step) {
  if (!active()) return;
  steps_.push_back(gather_step_timeline(*layout_.groups().pp_comm(), layout_.pipeline()->last_timeline()));
  step_numbers_.push_back(step);
}

void PipelineRecorder::write(const std::string& path) const {
  if (!layout_.groups().is_root() || steps_.empty()) return;
  const PipelineRuntime& rt = *layout_.pipeline();
  const PpSchedule& sched = rt.schedule();
  H5File f = H5File::create(path);
  f.set_attr("format", "spikemesh pipeline timeline v1");
  f.set_attr("schedule", sched.kind);
  f.set_attr("ranks", sched.ranks);
  f.set_attr("virtual_stages", sched.virtual_stages);
  f.set_attr("microbatches", sched.microbatches);
  f.set_attr("layout", layout_text(rt.units_per_stage()));
  f.set_attr("schedule_text", to_text(sched));
  f.set_attr("kind_codes", "0 F, 1 B, 2 W, 3 BW, 4 SEND_F, 5 RECV_F, 6 SEND_B, 7 RECV_B");
  f.set_attr("time_unit", "seconds from the step's earliest action (pp rank 0's clock)");
  Columns measured;
  std::vector<double> bubbles;
  for (size_t k = 0; k < steps_.size(); ++k) {
    const PpStepTimeline st = aligned(steps_[k]);
    bubbles.push_back(measured_bubble(st));
    for (size_t r = 0; r < st.size(); ++r)
      for (const PpRecordedAction& a : st[r]) measured.add(step_numbers_[k], static_cast<int>(r), a.action, a.start, a.end);
  }
  // The simulator's replay with the costs measured in the recorded steps (the first step, which
  // includes one-time set-up, is left out when there are others).
  std::vector<PpStepTimeline> sample(steps_.begin() + (steps_.size() > 1 ? 1 : 0), steps_.end());
  const PpCosts costs = costs_from_timeline(sched, sample);
  const PpSimulation sim = simulate(sched, costs);
  Columns simulated;
  for (size_t r = 0; r < sim.per_rank.size(); ++r)
    for (const PpTimedAction& a : sim.per_rank[r]) simulated.add(0, static_cast<int>(r), a.action, a.start, a.end);
  measured.write(f.require_group("measured"));
  simulated.write(f.require_group("simulated"));
  {
    H5Group steps = f.require_group("steps");
    steps.write_raw("step", DType::I64, {static_cast<int64_t>(step_numbers_.size())}, step_numbers_.data());
    steps.write_raw("measured_bubble", DType::F64, {static_cast<int64_t>(bubbles.size())}, bubbles.data());
  }
  std::vector<double> bubbles_warm(bubbles.begin() + (bubbles.size() > 1 ? 1 : 0), bubbles.end());
  f.set_attr("measured_bubble", median(bubbles_warm));
  f.set_attr("simulated_bubble", sim.bubble_fraction);
  {
    H5Group c = f.require_group("costs");
    const int64_t S = static_cast<int64_t>(costs.f.size());
    c.write_raw("f", DType::F64, {S}, costs.f.data());
    c.write_raw("b", DType::F64, {S}, costs.b.data());
    c.write_raw("w", DType::F64, {S}, costs.w.data());
    c.set_attr("comm", costs.comm);
    const std::vector<double>& unit = layout_.pp_unit_costs();
    if (!unit.empty()) c.write_raw("unit_dry_run_ms", DType::F64, {static_cast<int64_t>(unit.size())}, unit.data());
  }  // every group closed before the file
  f.close();
}

}  // namespace sm
