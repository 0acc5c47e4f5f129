// unit_placement.cpp — placing a layout candidate's units on ranks, stages and profiles
// (unit_placement.h).
#include "spikemesh/planner/unit_placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "spikemesh/core/error.h"

namespace sm {

UnitPlacement place_units(const LayoutCandidate& c, const ModelProfile& profile, const MachineCosts& machine) {
  const int tp = c.mesh.tp, P = c.mesh.pp;
  UnitPlacement pl;
  pl.base = profile.find(tp, 0);
  pl.opt = c.memopt_level > 0 ? profile.find(tp, c.memopt_level) : pl.base;
  if (!pl.base || !pl.opt)
    SM_INPUT_ERROR("cost model: model '" << profile.model << "' has no measured profile for tp " << tp << " at memopt "
                                         << c.memopt_level);
  const size_t U = pl.base->units();
  pl.tp = tp;
  pl.tp_link = machine.link(CollectiveKind::AllReduce, tp);
  pl.elem_bytes = profile.elem_bytes;
  pl.memopt_unit.assign(U, c.memopt_level > 0 && P == 1);
  pl.stage_of.assign(U, 0);
  pl.rank_units.assign(P, {});
  if (P == 1)
    for (size_t u = 0; u < U; ++u) pl.rank_units[0].push_back(u);
  return pl;
}

void place_pipeline_stages(UnitPlacement& pl, std::unique_ptr<PpSchedule> schedule, const std::vector<int>& partition,
                           int memopt_level, double n) {
  const size_t U = pl.units();
  const int S = schedule->logical_stages();
  for (int s = 0, u = 0; s < S; ++s)
    for (int k = 0; k < partition[s]; ++k) pl.stage_of[u++] = s;
  if (memopt_level > 0) {  // the stages with the most saved bytes
    std::vector<double> bytes(S, 0.0);
    for (size_t u = 0; u < U; ++u) bytes[pl.stage_of[u]] += pl.base->unit(u, n).saved_mb;
    std::vector<int> order(S);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
    const int k = std::max(1, static_cast<int>(std::lround(0.5 * S)));
    for (size_t u = 0; u < U; ++u)
      pl.memopt_unit[u] = std::find(order.begin(), order.begin() + k, pl.stage_of[u]) != order.begin() + k;
  }
  for (size_t u = 0; u < U; ++u) pl.rank_units[schedule->rank_of_stage(pl.stage_of[u])].push_back(u);
  pl.schedule = std::move(schedule);
}

}  // namespace sm
