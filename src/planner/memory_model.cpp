// memory_model.cpp — the peak-memory half of the cost model (memory_model.h).
#include "spikemesh/planner/memory_model.h"

#include <algorithm>
#include <numeric>

namespace sm {

namespace {
constexpr double kMiB = 1048576.0;
constexpr double kBucketMb = 25.0;  // LayoutOptions' default --bucket-mb

// dp's all-reduce (data_parallel.cpp): buckets of kBucketMb filled in backward order; one of
// several segments packs into a buffer it keeps; a bucket is launched when its first unit is
// done, and the last `window` launched are in flight (their measured scratch `s_ar` held).
void bucketed_all_reduce_memory(const std::vector<double>& unit_mb, int window, double s_ar, StrategyMemory& out) {
  const size_t U = unit_mb.size();
  std::vector<double> launched(U + 1, 0.0);  // launched[i]: MiB of the buckets done before unit i
  double fill = 0, packed = 0;
  int segments = 0;
  size_t lowest = U;
  auto close = [&] {
    if (fill <= 0) return;
    if (segments > 1) packed += fill;
    launched[lowest] += fill;
    fill = 0, segments = 0;
  };
  for (size_t i = U; i-- > 0;) {
    double left = unit_mb[i];
    while (left > 0) {
      const double take = std::min(left, kBucketMb - fill);
      fill += take, left -= take, ++segments, lowest = i;
      if (fill >= kBucketMb) close();
    }
  }
  close();
  out.state += packed;
  std::vector<double> flying;  // the buckets launched, most recent last; the last `window` in flight
  for (size_t i = U; i-- > 0;) {
    double mb = 0;
    for (size_t b = flying.size() > static_cast<size_t>(window) ? flying.size() - window : 0; b < flying.size(); ++b)
      mb += flying[b];
    out.in_flight[i] = s_ar * mb;
    if (launched[i] > 0) flying.push_back(launched[i]);
  }
}

// Per unit of rank r: the bytes the OTHER live (stage, microbatch) pairs keep while it runs its
// backward, the most over its stage's backwards — replaying rank r's schedule, a pair alive from
// its F to its B (0 for pp = 1).
std::vector<double> others_alive(const UnitPlacement& pl, int r, double n) {
  const size_t U = pl.units();
  std::vector<double> others(U, 0.0);
  if (!pl.schedule) return others;
  std::vector<double> stage_mb(static_cast<size_t>(pl.schedule->logical_stages()), 0.0);
  for (size_t u = 0; u < U; ++u) stage_mb[pl.stage_of[u]] += UnitPlacement::keeps(u, pl.sample(u, n));
  double alive = 0;
  for (const PpAction& a : pl.schedule->per_rank[r]) {
    if (a.kind == PpActionKind::F) alive += stage_mb[a.stage];
    if (a.kind != PpActionKind::B && a.kind != PpActionKind::BW) continue;
    alive -= stage_mb[a.stage];
    for (size_t u = 0; u < U; ++u)
      if (pl.stage_of[u] == a.stage) others[u] = std::max(others[u], alive);
  }
  return others;
}
}  // namespace

StrategyMemory strategy_memory(const std::vector<double>& unit_mb, GradientReduction r, int dp, int states,
                               const MachineCosts& m) {
  const size_t U = unit_mb.size();
  const double P = std::accumulate(unit_mb.begin(), unit_mb.end(), 0.0);
  std::vector<double> sorted = unit_mb;
  std::sort(sorted.rbegin(), sorted.rend());
  const double max1 = sorted.empty() ? 0 : sorted[0], max2 = sorted.size() > 1 ? sorted[1] : 0;
  const double k = states;
  const double s_ar = m.link(CollectiveKind::AllReduce, dp).scratch_per_mb;
  const double s_rs = m.link(CollectiveKind::ReduceScatter, dp).scratch_per_mb;
  StrategyMemory out;
  out.in_flight.assign(U, 0.0);
  if (dp <= 1) {
    out.state = (2 + k) * P;
    return out;
  }
  std::vector<double> after(U + 1, 0.0);  // after[i]: MiB of the units after i (done first)
  for (size_t i = U; i-- > 0;) after[i] = after[i + 1] + unit_mb[i];
  // recent[i]: MiB of the dp - 1 nearest units after i with parameters: the reductions still in
  // flight at i's backward. Each is tested after every unit's backward, and MPI's non-blocking
  // collective advances a round per test: p - 1 rounds for p ranks.
  const int window = std::max(1, dp - 1);
  std::vector<double> recent(U, 0.0);
  for (size_t i = 0; i < U; ++i) {
    int seen = 0;
    for (size_t v = i + 1; v < U && seen < window; ++v)
      if (unit_mb[v] > 0) recent[i] += unit_mb[v], ++seen;
  }
  switch (r) {
    case GradientReduction::AllReduce:
      out.state = (2 + k) * P;
      bucketed_all_reduce_memory(unit_mb, window, s_ar, out);
      return out;
    case GradientReduction::Zero1:  // full values and gradients, master and grad chunks
      out.state = 2 * P + (2 + k) * P / dp;
      for (size_t i = 0; i < U; ++i) out.in_flight[i] = s_rs * recent[i];
      return out;
    case GradientReduction::Zero2:  // a unit's full gradient lives from its backward to the end of backward
      out.state = P + (3 + k) * P / dp;
      for (size_t i = 0; i < U; ++i) out.in_flight[i] = after[i] + s_rs * recent[i];
      return out;
    case GradientReduction::Fsdp:  // chunks and the gathered pair; full gradients and reduced chunks
      // kept until end_backward (fsdp.cpp)
      out.state = (2 + k) * P / dp + max1 + max2;
      for (size_t i = 0; i < U; ++i) out.in_flight[i] = after[i] + after[i + 1] / dp + s_rs * recent[i];
      return out;
  }
  return out;
}

std::vector<double> activations_at_backward(const UnitPlacement& pl, int r, double n) {
  // what the other live pairs keep, the saved bytes (and kept inputs) of us[i]'s stage up to
  // us[i], us[i]'s output and its gradient (as measured: a sample shard inside a tp region), its
  // backward's transient, the model input (unit 0's input, counted once)
  const std::vector<size_t>& us = pl.rank_units[r];
  const std::vector<double> others = others_alive(pl, r, n);
  std::vector<double> at(us.size());
  const double input = pl.base->input_elements * n * pl.elem_bytes / kMiB;
  double saved = 0;
  for (size_t i = 0; i < us.size(); ++i) {
    if (i > 0 && pl.stage_of[us[i]] != pl.stage_of[us[i - 1]]) saved = 0;  // another stage's pair
    const UnitSample s = pl.sample(us[i], n);
    saved += UnitPlacement::keeps(us[i], s);
    at[i] = others[us[i]] + saved + 2 * s.out_mb + s.work_mb + input;
  }
  return at;
}

double backward_peak(const UnitPlacement& pl, const StrategyMemory& sm, int r, double n) {
  const std::vector<double> act = activations_at_backward(pl, r, n);
  double peak = 0;
  for (size_t i = 0; i < act.size(); ++i) peak = std::max(peak, sm.in_flight[i] + act[i]);
  return sm.state + peak;
}

}  // namespace sm
