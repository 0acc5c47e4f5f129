// pp_timeline.cpp — measured bubble and measured costs of pipeline steps (pp_timeline.h).
#include "spikemesh/parallel/pipeline/pp_timeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "spikemesh/comm/agree.h"
#include "spikemesh/core/error.h"

namespace sm {

namespace {
void span_of(const PpStepTimeline& step, double& first, double& last) {
  first = 1e300;
  last = -1e300;
  for (const auto& rank : step)
    for (const PpRecordedAction& a : rank) {
      first = std::min(first, a.start);
      last = std::max(last, a.end);
    }
}
}  // namespace

PpStepTimeline gather_step_timeline(Comm& pp, const std::vector<PpRecordedAction>& mine) {
  constexpr size_t kFields = 5;  // kind, stage, microbatch, start, end: one row of doubles per action
  // Clocks of different nodes have unrelated origins: every rank reads its clock as it leaves
  // one barrier, and its times are shifted by rank 0's reading minus its own.
  pp.barrier();  // collective over pp
  std::vector<double> rows{
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()};
  for (const PpRecordedAction& a : mine)
    rows.insert(rows.end(), {static_cast<double>(static_cast<int>(a.action.kind)), static_cast<double>(a.action.stage),
                             static_cast<double>(a.action.microbatch), a.start, a.end});
  const std::string bytes(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(double));
  PpStepTimeline out;
  double sync0 = 0;
  for (const std::string& b : all_gather_strings(pp, bytes)) {  // collective over pp
    std::vector<double> d(b.size() / sizeof(double));
    std::memcpy(d.data(), b.data(), b.size());
    if (out.empty()) sync0 = d[0];
    const double shift = sync0 - d[0];  // onto rank 0's clock
    out.emplace_back();
    for (size_t i = 1; i + kFields <= d.size(); i += kFields) {
      PpRecordedAction a;
      a.action.kind = static_cast<PpActionKind>(static_cast<int>(d[i]));
      a.action.stage = static_cast<int>(d[i + 1]);
      a.action.microbatch = static_cast<int>(d[i + 2]);
      a.start = d[i + 3] + shift;
      a.end = d[i + 4] + shift;
      out.back().push_back(a);
    }
  }
  return out;
}

double measured_bubble(const PpStepTimeline& step) {
  double first, last, busy = 0;
  span_of(step, first, last);
  if (step.empty() || last <= first) return 0.0;
  for (const auto& rank : step)
    for (const PpRecordedAction& a : rank)
      if (is_compute(a.action.kind)) busy += a.end - a.start;
  return 1.0 - busy / (static_cast<double>(step.size()) * (last - first));
}

PpCosts costs_from_timeline(const PpSchedule& schedule, const std::vector<PpStepTimeline>& steps) {
  const int S = schedule.logical_stages();
  PpCosts c;
  std::vector<double> f(S, 0), b(S, 0), w(S, 0);
  std::vector<int> nf(S, 0), nb(S, 0), nw(S, 0);
  double comm = 0;
  int ncomm = 0;
  for (const PpStepTimeline& step : steps)
    for (const auto& rank : step)
      for (const PpRecordedAction& a : rank) {
        const double d = a.end - a.start;
        const int s = a.action.stage;
        SM_CHECK(s >= 0 && s < S, "timeline action of stage " << s << " for " << S << " stages");
        switch (a.action.kind) {
          case PpActionKind::F: f[s] += d, ++nf[s]; break;
          case PpActionKind::B: b[s] += d, ++nb[s]; break;
          case PpActionKind::W: w[s] += d, ++nw[s]; break;
          case PpActionKind::BW: b[s] += d / 2, w[s] += d / 2, ++nb[s], ++nw[s]; break;
          case PpActionKind::SEND_F:
          case PpActionKind::SEND_B: comm += d, ++ncomm; break;
          default: break;
        }
      }
  for (int s = 0; s < S; ++s) {
    c.f.push_back(nf[s] ? f[s] / nf[s] : 0.0);
    c.b.push_back(nb[s] ? b[s] / nb[s] : 0.0);
    c.w.push_back(nw[s] ? w[s] / nw[s] : 0.0);
  }
  c.comm = ncomm ? comm / ncomm : 0.0;
  return c;
}

PpStepTimeline aligned(const PpStepTimeline& step) {
  double first, last;
  span_of(step, first, last);
  PpStepTimeline out = step;
  for (auto& rank : out)
    for (PpRecordedAction& a : rank) {
      a.start -= first;
      a.end -= first;
    }
  return out;
}

}  // namespace sm
