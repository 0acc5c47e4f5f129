// cost_model.cpp — the cost model's profile types (cost_model.h) and the prediction of one
// candidate: placed (unit_placement.h), its compute timed (time_model.h), then per rank its tail
// (dp reductions, optimizer step) and its peak memory (memory_model.h). The candidates
// themselves: layout_candidates.cpp.
#include "spikemesh/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "spikemesh/core/error.h"
#include "spikemesh/planner/memory_model.h"
#include "spikemesh/planner/time_model.h"
#include "spikemesh/planner/unit_placement.h"

namespace sm {

namespace {
// Per pp rank: the step ends when the slowest finishes its dp reductions and optimizer step
// (those two of it go into `out`, the tail returned), and the largest rank's peak is the
// layout's (its state, activations and their growth per sample go into `out`).
double add_rank_tails_and_peaks(const LayoutCandidate& c, const UnitPlacement& pl, const ModelProfile& profile,
                                const MachineCosts& machine, int64_t replica_batch, double n, LayoutPrediction& out) {
  const int dp = c.mesh.dp, M = c.mesh.pp > 1 ? c.microbatches : 1;
  double worst_tail = 0, worst_peak = -1;
  for (int r = 0; r < c.mesh.pp; ++r) {
    std::vector<double> unit_mb;
    for (size_t u : pl.rank_units[r]) unit_mb.push_back(pl.base->param_mb[u]);
    const double param_mb = std::accumulate(unit_mb.begin(), unit_mb.end(), 0.0);
    const double comm = dp_comm_ms(unit_mb, c.reduction, dp, M, machine);
    const bool sharded = dp > 1 && c.reduction != GradientReduction::AllReduce;
    const double opt_ms = optimizer_step_ms(param_mb, sharded, dp, machine);
    if (comm + opt_ms > worst_tail) {
      worst_tail = comm + opt_ms;
      out.dp_comm_ms = comm;
      out.optimizer_ms = opt_ms;
    }
    const StrategyMemory sm = strategy_memory(unit_mb, c.reduction, dp, profile.optimizer_states, machine);
    const double backward = backward_peak(pl, sm, r, n);
    const double opt_scratch = machine.optimizer_scratch * param_mb / (sharded ? dp : 1);
    const double peak = std::max(backward, sm.state + opt_scratch);
    if (peak > worst_peak) {
      worst_peak = peak;
      out.state_mb = sm.state;
      out.activation_mb = peak - sm.state;
      // growth per replica sample: the backward peak at twice the batch, minus this one, over the batch
      out.activation_mb_per_sample =
          replica_batch > 0 && backward >= sm.state + opt_scratch
              ? (backward_peak(pl, sm, r, 2 * n) - backward) / static_cast<double>(replica_batch)
              : 0;
    }
  }
  out.peak_mb = worst_peak;
  return worst_tail;
}
}  // namespace

const char* collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::SendRecv: return "send_recv";
  }
  return "?";
}

LinkCost MachineCosts::link(CollectiveKind k, int p) const {
  if (p <= 1) return {};
  auto it = links.find({static_cast<int>(k), p});
  if (it != links.end()) return it->second;
  const LinkCost* best = nullptr;
  int best_d = 1 << 30;
  for (const auto& [key, cost] : links)
    if (key.first == static_cast<int>(k) && std::abs(key.second - p) < best_d) best = &cost, best_d = std::abs(key.second - p);
  return best ? *best : LinkCost{};
}

UnitSample TpProfile::unit(size_t u, double n) const {
  SM_CHECK(u < lo.size() && u < hi.size(), "cost model: unit " << u << " not profiled");
  const UnitSample &a = lo[u], &b = hi[u];
  const double span = static_cast<double>(n_hi - n_lo);
  auto at = [&](double ya, double yb) {
    if (span <= 0) return ya * n / static_cast<double>(n_lo);  // one point: proportional
    return std::max(0.0, ya + (yb - ya) * (n - static_cast<double>(n_lo)) / span);
  };
  return UnitSample{at(a.forward_ms, b.forward_ms), at(a.backward_ms, b.backward_ms), at(a.saved_mb, b.saved_mb),
                    at(a.work_mb, b.work_mb), at(a.input_kept_mb, b.input_kept_mb), at(a.out_mb, b.out_mb)};
}

const TpProfile* ModelProfile::find(int tp, int memopt_level) const {
  for (const TpProfile& e : entries)
    if (e.tp == tp && e.memopt_level == memopt_level) return &e;
  return nullptr;
}

LayoutPrediction predict_layout(const LayoutCandidate& c, const ModelProfile& profile, const MachineCosts& machine,
                                int64_t replica_batch) {
  UnitPlacement pl = place_units(c, profile, machine);
  const int P = c.mesh.pp;
  const int M = P > 1 ? c.microbatches : 1;
  const double n = static_cast<double>(replica_batch) / M;
  const ComputeTimeline compute = P == 1 ? single_rank_compute(pl, n) : pipeline_compute(pl, c, machine, n);
  LayoutPrediction out;
  out.partition = compute.partition;
  out.tp_comm_ms = compute.tp_comm_ms;
  int busiest = 0;
  for (int r = 0; r < P; ++r)
    if (compute.busy[r] > compute.busy[busiest]) busiest = r;
  const double worst_tail = add_rank_tails_and_peaks(c, pl, profile, machine, replica_batch, n, out);
  out.compute_ms = compute.busy[busiest];
  out.bubble_ms = std::max(0.0, compute.makespan - compute.busy[busiest]);
  out.step_ms = compute.makespan + worst_tail;
  return out;
}

}  // namespace sm
