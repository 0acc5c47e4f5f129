// test_pp_timeline.cpp — the measured-timeline analysis (parallel/pipeline/pp_timeline.h) against the
// simulator: a "measured" step made of the simulator's own timed actions must give back the
// simulator's bubble, and the costs recovered from it must be the costs it was simulated with.
#include <gtest/gtest.h>

#include "spikemesh/parallel/pipeline/pp_timeline.h"

namespace sm {
namespace {

PpStepTimeline as_recorded(const PpSimulation& sim, double offset) {
  PpStepTimeline out(sim.per_rank.size());
  for (size_t r = 0; r < sim.per_rank.size(); ++r)
    for (const PpTimedAction& a : sim.per_rank[r]) out[r].push_back(PpRecordedAction{a.action, a.start + offset, a.end + offset});
  return out;
}

PpCosts uneven(int stages) {
  PpCosts c;
  for (int s = 0; s < stages; ++s) {
    c.f.push_back(1.0 + 0.25 * s);
    c.b.push_back(1.5 + 0.5 * s);
    c.w.push_back(0.75 + 0.125 * s);
  }
  c.comm = 0.125;
  return c;
}

TEST(PpTimeline, MeasuredBubbleOfASimulatedStepIsTheSimulatorsBubble) {
  for (const char* kind : {"gpipe", "1f1b", "interleaved", "zero_bubble"}) {
    const int v = std::string(kind) == "gpipe" || std::string(kind) == "1f1b" ? 1 : 2;
    const PpSchedule sched = make_schedule(kind, 3, v, 6);
    const PpSimulation sim = simulate(sched, uneven(sched.logical_stages()));
    const PpStepTimeline step = as_recorded(sim, 1234.5);  // any clock origin
    EXPECT_NEAR(measured_bubble(step), sim.bubble_fraction, 1e-12) << kind;
    const PpStepTimeline al = aligned(step);
    double first = 1e300;
    for (const auto& r : al)
      for (const PpRecordedAction& a : r) first = std::min(first, a.start);
    EXPECT_DOUBLE_EQ(first, 0.0) << kind;
  }
}

TEST(PpTimeline, CostsRecoveredFromTheTimelineReplayTheSameStep) {
  for (const char* kind : {"1f1b", "zero_bubble"}) {
    const int v = std::string(kind) == "1f1b" ? 1 : 2;
    const PpSchedule sched = make_schedule(kind, 2, v, 4);
    const PpCosts c = uneven(sched.logical_stages());
    const PpSimulation sim = simulate(sched, c);
    const PpCosts got = costs_from_timeline(sched, {as_recorded(sim, 0.0), as_recorded(sim, 7.0)});
    for (int s = 0; s < sched.logical_stages(); ++s) {
      EXPECT_NEAR(got.f[s], c.f[s], 1e-12) << kind << " stage " << s;
      if (v == 2) {  // B and W measured apart
        EXPECT_NEAR(got.b[s], c.b[s], 1e-12) << kind << " stage " << s;
        EXPECT_NEAR(got.w[s], c.w[s], 1e-12) << kind << " stage " << s;
      } else {  // a BW splits evenly: b + w is what the timeline knows
        EXPECT_NEAR(got.b[s] + got.w[s], c.b[s] + c.w[s], 1e-12) << kind << " stage " << s;
      }
    }
    EXPECT_NEAR(got.comm, c.comm, 1e-12) << kind;
    EXPECT_NEAR(simulate(sched, got).makespan, sim.makespan, 1e-9) << kind;
  }
}

}  // namespace
}  // namespace sm
