// layout_candidates.cpp — the layouts the planner may choose (cost_model.h): a candidate's mode,
// sharding, label and flags, and the enumeration of every layout of a job. Invariant: every
// candidate enumerated may run (its mesh covers the world, dp divides the batch, pp at most the
// units, a microbatch count its schedule accepts); the label names a candidate uniquely.
#include "spikemesh/planner/cost_model.h"

#include <algorithm>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {

namespace {
std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}
}  // namespace

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

}  // namespace sm
