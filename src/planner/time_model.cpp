// time_model.cpp — the step-time half of the cost model (time_model.h).
#include "spikemesh/planner/time_model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "spikemesh/parallel/pipeline/pp_simulator.h"

namespace sm {

namespace {
constexpr double kMiB = 1048576.0;
constexpr double kBucketMb = 25.0;  // LayoutOptions' default --bucket-mb

// Per logical stage: forward with half its tp time, backward with the other half, split evenly
// into B and W; `message_mb` receives the largest activation crossing a stage boundary (bits
// when it is spikes) and `tp_ms` the tp time spread over the ranks (reported only).
PpCosts stage_costs(const UnitPlacement& pl, double n, int M, int P, double& message_mb, double& tp_ms) {
  const int S = pl.schedule->logical_stages();
  const size_t U = pl.units();
  PpCosts costs;
  costs.f.assign(S, 0.0), costs.b.assign(S, 0.0), costs.w.assign(S, 0.0);
  message_mb = 0;
  for (size_t u = 0; u < U; ++u) {
    const UnitSample s = pl.sample(u, n);
    const double t = tp_unit_ms(pl, u, n);
    const int st = pl.stage_of[u];
    costs.f[st] += s.forward_ms + t / 2;
    costs.b[st] += (s.backward_ms + t / 2) / 2;
    costs.w[st] += (s.backward_ms + t / 2) / 2;
    if (u + 1 < U && pl.stage_of[u + 1] != st)
      message_mb =
          std::max(message_mb, pl.base->out_elements[u] * n * (pl.base->out_binary[u] ? 1.0 / 8 : pl.elem_bytes) / kMiB);
    tp_ms += t * M / P;
  }
  return costs;
}

// Oversubscribed cores (x > 1): the dry runs ran with every rank busy; in a pipeline only the
// simulated occupancy is, so each rank computes faster (never faster than alone). Rescales the
// measured costs by the occupancy and simulates again, twice.
PpSimulation simulate_with_occupancy(const PpSchedule& schedule, const PpCosts& measured, double x) {
  const int P = schedule.ranks, S = schedule.logical_stages();
  PpCosts costs = measured;
  PpSimulation sim = simulate(schedule, costs);
  for (int it = 0; it < 2 && x > 1; ++it) {
    double busy_sum = 0;
    for (double b : sim.busy) busy_sum += b;
    const double occupancy = busy_sum / (P * std::max(sim.makespan, 1e-12));
    const double scale = std::max(1.0, occupancy * x) / x;
    for (int st = 0; st < S; ++st)
      costs.f[st] = measured.f[st] * scale, costs.b[st] = measured.b[st] * scale, costs.w[st] = measured.w[st] * scale;
    sim = simulate(schedule, costs);
  }
  return sim;
}
}  // namespace

double tp_unit_ms(const UnitPlacement& pl, size_t u, double n) {
  const LinkCost& l = pl.tp_link;
  return pl.tp > 1 ? pl.base->tp_calls[u] * l.alpha_ms + pl.base->tp_elements[u] * n * pl.elem_bytes / kMiB * l.ms_per_mb
                   : 0.0;
}

ComputeTimeline single_rank_compute(const UnitPlacement& pl, double n) {
  ComputeTimeline t;
  t.busy.assign(1, 0.0);
  for (size_t u = 0; u < pl.units(); ++u) {
    const UnitSample s = pl.sample(u, n);
    t.busy[0] += s.forward_ms + s.backward_ms + tp_unit_ms(pl, u, n);
    t.tp_comm_ms += tp_unit_ms(pl, u, n);
  }
  t.makespan = t.busy[0];
  return t;
}

ComputeTimeline pipeline_compute(UnitPlacement& pl, const LayoutCandidate& c, const MachineCosts& machine, double n) {
  const int P = c.mesh.pp, M = c.microbatches;
  auto schedule = std::make_unique<PpSchedule>(make_schedule(c.schedule, P, c.virtual_stages, M));
  std::vector<double> unit_ms(pl.units());
  for (size_t u = 0; u < pl.units(); ++u) {
    const UnitSample s = pl.base->unit(u, n);
    unit_ms[u] = s.forward_ms + s.backward_ms + tp_unit_ms(pl, u, n);
  }
  ComputeTimeline t;
  t.partition = simulated_best_partition(unit_ms, *schedule);
  place_pipeline_stages(pl, std::move(schedule), t.partition, c.memopt_level, n);
  double message_mb = 0;
  PpCosts costs = stage_costs(pl, n, M, P, message_mb, t.tp_comm_ms);
  costs.comm = machine.link(CollectiveKind::SendRecv, 2).ms(message_mb);
  const PpSimulation sim = simulate_with_occupancy(*pl.schedule, costs, machine.oversubscription);
  t.makespan = sim.makespan;
  t.busy.assign(sim.busy.begin(), sim.busy.begin() + P);
  return t;
}

double dp_comm_ms(const std::vector<double>& unit_mb, GradientReduction r, int dp, int M, const MachineCosts& m) {
  if (dp <= 1) return 0;
  double t = 0;
  if (r == GradientReduction::AllReduce) {
    const double P = std::accumulate(unit_mb.begin(), unit_mb.end(), 0.0);
    const LinkCost l = m.link(CollectiveKind::AllReduce, dp);
    const double buckets = std::max(1.0, std::ceil(P / kBucketMb));
    return P > 0 ? buckets * l.alpha_ms + P * l.ms_per_mb : 0.0;
  }
  const LinkCost rs = m.link(CollectiveKind::ReduceScatter, dp), ag = m.link(CollectiveKind::AllGather, dp);
  size_t last = unit_mb.size();
  for (size_t u = 0; u < unit_mb.size(); ++u)
    if (unit_mb[u] > 0) last = u;
  for (size_t u = 0; u < unit_mb.size(); ++u) {
    if (unit_mb[u] <= 0) continue;
    if (r == GradientReduction::Fsdp)
      t += (2.0 * M - (u == last ? 1 : 0)) * ag.ms(unit_mb[u]) + M * rs.ms(unit_mb[u]);
    else
      t += rs.ms(unit_mb[u]) + ag.ms(unit_mb[u]);
  }
  return t;
}

double optimizer_step_ms(double param_mb, bool sharded, int dp, const MachineCosts& m) {
  const double elements = param_mb * kMiB / 4.0 / (sharded ? dp : 1);
  return elements * m.optimizer_ns_per_element * 1e-6;
}

}  // namespace sm
