// cost_model.cpp — the layout cost model (cost_model.h): enumeration of candidates and the
// prediction of one candidate's step time and peak memory.
#include "spikemesh/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/parallel/pipeline/pp_simulator.h"

namespace sm {

namespace {
constexpr double kMiB = 1048576.0;
constexpr double kBucketMb = 25.0;  // LayoutOptions' default --bucket-mb

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// What the strategy (strategy.h, data_parallel.h, zero.h, fsdp.h) of one rank holding units
// with `unit_mb` parameter MiB each (in order) over a dp group of `dp` holds: `state` always
// (parameters, gradients, optimizer state, dp's packed buckets), and in_flight[i] more while unit
// i runs its backward, the units after it done: what their reductions hold until the end of
// backward (ZeRO-2 and FSDP: the full gradients) and the measured scratch of those in flight.
struct StrategyMemory {
  double state = 0;
  std::vector<double> in_flight;
};

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
    case GradientReduction::AllReduce: {
      // Buckets of kBucketMb filled in backward order (data_parallel.cpp); one of several
      // segments packs into a buffer it keeps; a bucket is launched when its first unit is done.
      out.state = (2 + k) * P;
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
      std::vector<double> flying;  // the buckets launched, most recent last; the last dp - 1 in flight
      for (size_t i = U; i-- > 0;) {
        double mb = 0;
        for (size_t b = flying.size() > static_cast<size_t>(window) ? flying.size() - window : 0; b < flying.size(); ++b)
          mb += flying[b];
        out.in_flight[i] = s_ar * mb;
        if (launched[i] > 0) flying.push_back(launched[i]);
      }
      return out;
    }
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

// Gradient reduction and parameter gathering over dp for units with `unit_mb` MiB each, M
// microbatches (FSDP gathers per microbatch).
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

std::string LayoutCandidate::mode() const {
  if (mesh.pp > 1) return "pp";
  const bool fsdp = reduction == GradientReduction::Fsdp;
  if (mesh.tp > 1) return fsdp ? "fsdp_tp" : "tp";
  if (fsdp) return "fsdp";
  return mesh.dp > 1 ? "dp" : "none";
}

const char* LayoutCandidate::sharding() const {
  return reduction == GradientReduction::Zero1 ? "zero" : reduction == GradientReduction::Zero2 ? "zero2" : "none";
}

std::string LayoutCandidate::label() const {
  std::ostringstream os;
  os << mode() << " " << mesh.dp << "x" << mesh.tp << "x" << mesh.pp;
  if (reduction == GradientReduction::Zero1) os << " zero";
  if (reduction == GradientReduction::Zero2) os << " zero2";
  if (mesh.pp > 1) os << " " << schedule << (virtual_stages > 1 ? " v" + std::to_string(virtual_stages) : "") << " m"
                      << microbatches;
  if (memopt_level > 0) os << " memopt" << memopt_level;
  return os.str();
}

LayoutOptions LayoutCandidate::apply_to(const LayoutOptions& base) const {
  LayoutOptions o = base;
  o.mode = mode();
  o.strategy.sharding = sharding();
  if (mesh.pp > 1) {
    o.pp_schedule = schedule;
    o.pp_virtual_stages = virtual_stages;
    o.pp_microbatches = microbatches;
  }
  o.memopt.level = memopt_level;
  return o;
}

std::vector<LayoutCandidate> enumerate_layouts(int world, int units, int64_t global_batch, const std::vector<int>& tp_sizes) {
  std::vector<LayoutCandidate> out;
  auto push = [&](LayoutCandidate c) {
    for (int level : {0, 1}) {
      c.memopt_level = level;
      out.push_back(c);
    }
  };
  for (int pp : divisors(world))
    for (int tp : divisors(world / pp)) {
      if (tp > 1 && std::find(tp_sizes.begin(), tp_sizes.end(), tp) == tp_sizes.end()) continue;
      const int dp = world / (pp * tp);
      if (global_batch % dp != 0) continue;
      const int64_t b = global_batch / dp;
      LayoutCandidate c;
      c.mesh = MeshShape{dp, tp, pp};
      if (pp == 1) {
        const std::vector<GradientReduction> rs =
            dp > 1 ? std::vector<GradientReduction>{GradientReduction::AllReduce, GradientReduction::Zero1,
                                                    GradientReduction::Zero2, GradientReduction::Fsdp}
                   : std::vector<GradientReduction>{GradientReduction::AllReduce};
        for (GradientReduction r : rs) {
          c.reduction = r;
          push(c);
        }
        continue;
      }
      if (units < pp) continue;
      for (GradientReduction r : {GradientReduction::AllReduce, GradientReduction::Zero1}) {
        if (r == GradientReduction::Zero1 && dp == 1) continue;
        c.reduction = r;
        struct Choice { const char* kind; int v; };
        for (const Choice& k : {Choice{"gpipe", 1}, Choice{"1f1b", 1}, Choice{"interleaved", 2}}) {
          if (units < pp * k.v || b > (int64_t{1} << 30)) continue;
          try {
            const int M = default_microbatches(static_cast<int>(b), pp * k.v, k.v > 1 ? pp : 1);
            check_schedule_choice(k.kind, k.v, false, M, pp * k.v);
            c.schedule = k.kind;
            c.virtual_stages = k.v;
            c.microbatches = M;
            push(c);
          } catch (const Error&) {
            // no microbatch count fits this batch and schedule: not a candidate
          }
        }
      }
    }
  return out;
}

LayoutPrediction predict_layout(const LayoutCandidate& c, const ModelProfile& profile, const MachineCosts& machine,
                                int64_t replica_batch) {
  const int dp = c.mesh.dp, tp = c.mesh.tp, P = c.mesh.pp;
  const TpProfile* base = profile.find(tp, 0);
  const TpProfile* opt = c.memopt_level > 0 ? profile.find(tp, c.memopt_level) : base;
  if (!base || !opt)
    SM_INPUT_ERROR("cost model: model '" << profile.model << "' has no measured profile for tp " << tp << " at memopt "
                                         << c.memopt_level);
  const size_t U = base->units();
  const int M = P > 1 ? c.microbatches : 1;
  const double eb = profile.elem_bytes;
  const LinkCost tp_link = machine.link(CollectiveKind::AllReduce, tp);

  // Which units run memopt: all (pp = 1), else the units of the round(0.5 x stages) logical
  // stages keeping the most activation bytes (Layout::build_memopt's rule).
  std::vector<bool> memopt_unit(U, c.memopt_level > 0 && P == 1);
  LayoutPrediction out;
  auto sample = [&](size_t u, double n) { return (memopt_unit[u] ? opt : base)->unit(u, n); };
  auto tp_ms = [&](size_t u, double n) {
    return tp > 1 ? base->tp_calls[u] * tp_link.alpha_ms + base->tp_elements[u] * n * eb / kMiB * tp_link.ms_per_mb : 0.0;
  };
  // Which logical stage each unit is in (pp = 1: all in one), the units of each rank (in
  // order) and, under pp, the schedule.
  std::vector<int> stage_of(U, 0);
  std::vector<std::vector<size_t>> rank_units(P);
  std::unique_ptr<PpSchedule> schedule;
  auto keeps = [&](size_t u, const UnitSample& s) { return s.saved_mb + (u > 0 ? s.input_kept_mb : 0.0); };
  // Per unit of rank r: the bytes the OTHER live (stage, microbatch) pairs keep while it runs
  // its backward, the most over its stage's backwards — replaying rank r's schedule, a pair
  // alive from its F to its B (0 for pp = 1).
  auto others_alive = [&](int r, double n) {
    std::vector<double> others(U, 0.0);
    if (!schedule) return others;
    std::vector<double> stage_mb(static_cast<size_t>(schedule->logical_stages()), 0.0);
    for (size_t u = 0; u < U; ++u) stage_mb[stage_of[u]] += keeps(u, sample(u, n));
    double alive = 0;
    for (const PpAction& a : schedule->per_rank[r]) {
      if (a.kind == PpActionKind::F) alive += stage_mb[a.stage];
      if (a.kind != PpActionKind::B && a.kind != PpActionKind::BW) continue;
      alive -= stage_mb[a.stage];
      for (size_t u = 0; u < U; ++u)
        if (stage_of[u] == a.stage) others[u] = std::max(others[u], alive);
    }
    return others;
  };
  // Activations of rank r holding `us` (in order) while us[i] runs its backward: what the other
  // live pairs keep, the saved bytes (and kept inputs) of us[i]'s stage up to us[i], us[i]'s
  // output and its gradient (as measured: a sample shard inside a tp region), its backward's
  // transient, the model input. Unit 0's input is the model input, counted once.
  auto activations = [&](int r, const std::vector<size_t>& us, double n) {
    const std::vector<double> others = others_alive(r, n);
    std::vector<double> at(us.size());
    const double input = base->input_elements * n * eb / kMiB;
    double saved = 0;
    for (size_t i = 0; i < us.size(); ++i) {
      if (i > 0 && stage_of[us[i]] != stage_of[us[i - 1]]) saved = 0;  // another stage's pair
      const UnitSample s = sample(us[i], n);
      saved += keeps(us[i], s);
      at[i] = others[us[i]] + saved + 2 * s.out_mb + s.work_mb + input;
    }
    return at;
  };
  // The backward phase's peak: strategy state + max over units of in-flight + activations.
  auto backward_peak = [&](const StrategyMemory& sm, int r, double n) {
    const std::vector<double> act = activations(r, rank_units[r], n);
    double peak = 0;
    for (size_t i = 0; i < act.size(); ++i) peak = std::max(peak, sm.in_flight[i] + act[i]);
    return sm.state + peak;
  };

  const double n = static_cast<double>(replica_batch) / M;
  std::vector<double> busy(P, 0.0);
  double makespan = 0;
  if (P == 1) {
    for (size_t u = 0; u < U; ++u) {
      rank_units[0].push_back(u);
      const UnitSample s = sample(u, n);
      busy[0] += s.forward_ms + s.backward_ms + tp_ms(u, n);
      out.tp_comm_ms += tp_ms(u, n);
    }
    makespan = busy[0];
  } else {
    schedule = std::make_unique<PpSchedule>(make_schedule(c.schedule, P, c.virtual_stages, M));
    const int S = schedule->logical_stages();
    std::vector<double> unit_ms(U);
    for (size_t u = 0; u < U; ++u) {
      const UnitSample s = base->unit(u, n);
      unit_ms[u] = s.forward_ms + s.backward_ms + tp_ms(u, n);
    }
    out.partition = simulated_best_partition(unit_ms, *schedule);
    for (int s = 0, u = 0; s < S; ++s)
      for (int k = 0; k < out.partition[s]; ++k) stage_of[u++] = s;
    if (c.memopt_level > 0) {  // the stages with the most saved bytes
      std::vector<double> bytes(S, 0.0);
      for (size_t u = 0; u < U; ++u) bytes[stage_of[u]] += base->unit(u, n).saved_mb;
      std::vector<int> order(S);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
      const int k = std::max(1, static_cast<int>(std::lround(0.5 * S)));
      for (size_t u = 0; u < U; ++u)
        memopt_unit[u] = std::find(order.begin(), order.begin() + k, stage_of[u]) != order.begin() + k;
    }
    PpCosts costs;
    costs.f.assign(S, 0.0), costs.b.assign(S, 0.0), costs.w.assign(S, 0.0);
    double message_mb = 0;
    for (size_t u = 0; u < U; ++u) {
      const UnitSample s = sample(u, n);
      const double t = tp_ms(u, n);
      costs.f[stage_of[u]] += s.forward_ms + t / 2;
      costs.b[stage_of[u]] += (s.backward_ms + t / 2) / 2;
      costs.w[stage_of[u]] += (s.backward_ms + t / 2) / 2;
      if (u + 1 < U && stage_of[u + 1] != stage_of[u])
        message_mb = std::max(message_mb, base->out_elements[u] * n * (base->out_binary[u] ? 1.0 / 8 : eb) / kMiB);
      rank_units[schedule->rank_of_stage(stage_of[u])].push_back(u);
      out.tp_comm_ms += t * M / P;  // spread over the ranks (reported only)
    }
    costs.comm = machine.link(CollectiveKind::SendRecv, 2).ms(message_mb);
    PpSimulation sim = simulate(*schedule, costs);
    // Oversubscribed cores: the dry runs ran with every rank busy; in a pipeline only the
    // simulated occupancy is, so each rank computes faster (never faster than alone).
    const double x = machine.oversubscription;
    const PpCosts measured = costs;
    for (int it = 0; it < 2 && x > 1; ++it) {
      double busy_sum = 0;
      for (double b : sim.busy) busy_sum += b;
      const double occupancy = busy_sum / (P * std::max(sim.makespan, 1e-12));
      const double scale = std::max(1.0, occupancy * x) / x;
      for (int st = 0; st < S; ++st)
        costs.f[st] = measured.f[st] * scale, costs.b[st] = measured.b[st] * scale, costs.w[st] = measured.w[st] * scale;
      sim = simulate(*schedule, costs);
    }
    makespan = sim.makespan;
    for (int r = 0; r < P; ++r) busy[r] = sim.busy[r];
  }

  // Per rank: the step ends when the slowest finishes its reductions and optimizer step.
  double worst_tail = 0, worst_peak = -1;
  int busiest = 0;
  for (int r = 0; r < P; ++r) {
    if (busy[r] > busy[busiest]) busiest = r;
    std::vector<double> unit_mb;
    for (size_t u : rank_units[r]) unit_mb.push_back(base->param_mb[u]);
    const double param_mb = std::accumulate(unit_mb.begin(), unit_mb.end(), 0.0);
    const double comm = dp_comm_ms(unit_mb, c.reduction, dp, M, machine);
    const bool sharded = dp > 1 && c.reduction != GradientReduction::AllReduce;
    const double elements = param_mb * kMiB / 4.0 / (sharded ? dp : 1);
    const double opt_ms = elements * machine.optimizer_ns_per_element * 1e-6;
    if (comm + opt_ms > worst_tail) {
      worst_tail = comm + opt_ms;
      out.dp_comm_ms = comm;
      out.optimizer_ms = opt_ms;
    }
    const StrategyMemory sm = strategy_memory(unit_mb, c.reduction, dp, profile.optimizer_states, machine);
    const double backward = backward_peak(sm, r, n);
    const double opt_scratch = machine.optimizer_scratch * param_mb / (sharded ? dp : 1);
    const double peak = std::max(backward, sm.state + opt_scratch);
    if (peak > worst_peak) {
      worst_peak = peak;
      out.state_mb = sm.state;
      out.activation_mb = peak - sm.state;
      // growth per replica sample: the backward peak at twice the batch, minus this one, over the batch
      out.activation_mb_per_sample =
          replica_batch > 0 && backward >= sm.state + opt_scratch
              ? (backward_peak(sm, r, 2 * n) - backward) / static_cast<double>(replica_batch)
              : 0;
    }
  }
  out.compute_ms = busy[busiest];
  out.bubble_ms = std::max(0.0, makespan - busy[busiest]);
  out.step_ms = makespan + worst_tail;
  out.peak_mb = worst_peak;
  return out;
}

}  // namespace sm
