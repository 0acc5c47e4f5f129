// model_profile.cpp — the model's side of the calibration (calibration.h): the dry runs of its
// tp-local copy (one rank of a tp group, its collectives looped back) at every tp size and memopt
// level asked for, at two microbatch sizes, every rank running them at once; per unit the
// maximum over the ranks. Also the profile's cache key and the tp sizes that split a layer.
// Collective over `world` (nullptr: one process); every rank gets the same profile.
#include <cstdio>
#include <memory>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/models/memopt_plan.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/pipeline/pp_costs.h"
#include "spikemesh/parallel/tp_plan.h"
#include "spikemesh/planner/calibration.h"

namespace sm {

namespace {
constexpr double kMiB = 1048576.0;

// The layers' collectives as one rank of a tp group of `p` whose ranks all hold this rank's
// tensors, without communicating: the dry run of the tp-local model then runs its sample-sharded
// regions (layers/sequence_parallel.h) on one shard, as in the run, and the cost model adds the
// collectives' time from the measured links. Values are not those of a run (sums are not
// multiplied); shapes, allocations and compute are.
class LoopbackCollectives final : public Collectives {
 public:
  explicit LoopbackCollectives(int p) : p_(p) {}
  int size() const override { return p_; }
  int rank() const override { return 0; }
  void all_reduce_sum(Tensor&) override {}
  void all_gather(const Tensor& in, Tensor& out) override {  // in: [n], out: [p·n]
    const Tensor flat = out.view({p_, in.numel()});
    for (int r = 0; r < p_; ++r) flat.slice0(r, r + 1).copy_from(in);
  }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {  // in: [p·n], out: [n]: chunk 0
    out.copy_from(in.view({p_, out.numel()}).slice0(0, 1));
  }
  void broadcast(Tensor&, int) override {}

 private:
  int p_;
};

// The model of `r` with its tp plan for `tp` applied as tp rank 0 and finalised: what one rank
// of a tp group holds. Its dry run gets LoopbackCollectives: no communication (the cost model
// adds it from the measured links), the regions sharded as in the run. `plan` receives the tp plan.
std::unique_ptr<Model> tp_local_model(const ProfileRequest& r, int tp, TpPlan& plan) {
  std::unique_ptr<Model> m = r.build();
  plan = make_tp_plan(*m, TpOptions{tp, r.tp_keep_first, r.tp_keep_classifier});
  if (tp > 1) apply_tp_plan(plan, 0);
  m->finalize(r.dtype, r.device, 1);
  return m;
}

// The tp-local model's static profile: per unit this rank's parameter bytes and its tp
// collectives per sample (tp_plan.h's closed forms), the model input's elements per sample.
TpProfile static_profile(const Model& m, const TpPlan& plan, int tp, int T) {
  const size_t U = m.units.size();
  TpProfile t;
  for (auto& u : m.units) t.param_mb.push_back(static_cast<double>(u->flat_value().nbytes()) / kMiB);
  t.tp_calls.assign(U, 0.0);
  t.tp_elements.assign(U, 0.0);
  for (const TpLayerPlan& l : plan.layers) {
    if (tp == 1) break;
    // per sample and step, in all-reduce equivalents: a reduce-scatter or an all-gather moves
    // half an all-reduce's bytes (tp samples: the regions shard; statistics are negligible)
    const TpPlan::Traffic tr = plan.layer_traffic(l, tp, T, 1);  // tp samples, T steps, 1 B each
    t.tp_calls[l.unit] += static_cast<double>(tr.all_reduce_calls + tr.reduce_scatter_calls + tr.all_gather_calls);
    t.tp_elements[l.unit] += (static_cast<double>(tr.all_reduce_bytes) +
                              0.5 * static_cast<double>(tr.reduce_scatter_bytes + tr.all_gather_bytes)) /
                             tp;
  }
  double input = T;
  for (int64_t d : m.info.input_shape) input *= static_cast<double>(d);
  t.input_elements = input;
  return t;
}

// One dry run of `m` at n samples per microbatch, every rank at once, into t.lo (n = n_lo) or
// t.hi: per unit the maximum over the ranks; the first also gives the units' outputs (whole
// elements per sample, spikes or not). Progress line on rank 0.
void dry_run_samples(Comm* world, const ProfileRequest& r, Model& m, int tp, int level, int64_t n, int T,
                     TpProfile& t) {
  const bool talk = !world || world->rank() == 0;
  const size_t U = m.units.size();
  if (talk) {
    std::printf("calibrate: %s, tp %d, memopt %d, %lld sample%s per microbatch ...\n", r.key.c_str(), tp, level,
                static_cast<long long>(n), n == 1 ? "" : "s");
    std::fflush(stdout);
  }
  if (world) world->barrier();  // every rank runs it at once: the contention of a real step
  Ctx ctx;
  ctx.seed = 1;
  LoopbackCollectives loop(tp);
  if (tp > 1) ctx.tp = &loop;  // regions shard as in the run (level <= 1: Layout::fill_ctx)
  const UnitDryRun d = dry_run_units(m, n, ctx, true, r.activations);
  std::vector<double> v;  // max over the ranks
  for (size_t u = 0; u < U; ++u)
    v.insert(v.end(), {d.forward_ms[u], d.backward_ms[u], d.saved_mb[u], d.work_mb[u], d.input_kept_mb[u], d.out_mb[u]});
  if (world) all_reduce_doubles(*world, v, ReduceOp::Max);
  std::vector<UnitSample>& dst = n == t.n_lo ? t.lo : t.hi;
  dst.clear();
  for (size_t u = 0; u < U; ++u)
    dst.push_back(UnitSample{v[6 * u], v[6 * u + 1], v[6 * u + 2], v[6 * u + 3], v[6 * u + 4], v[6 * u + 5]});
  if (t.out_binary.empty()) {
    t.out_binary = d.out_binary;
    for (const Shape& s : d.out_shape) {  // whole: units hand on whole activations under tp (tp_plan.h)
      double e = T;
      for (int64_t x : s) e *= static_cast<double>(x);
      t.out_elements.push_back(e);
    }
  }
}
}  // namespace

std::string ProfileRequest::cache_key() const {
  std::ostringstream os;
  os << key << " | " << dtype_name(dtype) << "/" << dtype_name(activations) << " on " << device.str();
  if (tp_keep_first) os << " keep-first";
  if (tp_keep_classifier) os << " keep-classifier";
  for (const auto& [tp, s] : sizes) os << " | tp" << tp << " n" << s.first << "-" << s.second;
  os << " | memopt";
  for (int l : memopt_levels) os << " " << l;
  return os.str();
}

std::vector<int> splittable_tp_sizes(const ProfileRequest& r, int world) {
  std::vector<int> out;
  for (int tp = 2; tp <= world; ++tp) {
    if (world % tp != 0) continue;
    std::unique_ptr<Model> m = r.build();
    if (make_tp_plan(*m, TpOptions{tp, r.tp_keep_first, r.tp_keep_classifier}).sharded_layers() > 0) out.push_back(tp);
  }
  return out;
}

ModelProfile measure_model_profile(Comm* world, const ProfileRequest& r) {
  ModelProfile out;
  out.model = r.key;
  out.elem_bytes = static_cast<double>(dtype_size(r.activations));
  out.optimizer_states = r.optimizer_states;
  for (const auto& [tp, sizes] : r.sizes)
    for (int level : r.memopt_levels) {
      TpPlan plan;
      std::unique_ptr<Model> m = tp_local_model(r, tp, plan);
      out.T = m->info.T;
      TpProfile t = static_profile(*m, plan, tp, out.T);
      t.tp = tp;
      t.memopt_level = level;
      t.n_lo = sizes.first;
      t.n_hi = sizes.second;
      // memopt's level-1 configuration on a one-stage view of the model (the dry run runs it)
      Stage stage(*m, 0, m->units.size());
      if (level > 0) apply_memopt(stage, checkpoint_all(stage, true));
      for (int64_t n : {t.n_lo, t.n_hi}) {
        dry_run_samples(world, r, *m, tp, level, n, out.T, t);
        if (t.n_lo == t.n_hi) {
          t.hi = t.lo;
          break;
        }
      }
      out.entries.push_back(std::move(t));
    }
  return out;
}

}  // namespace sm
