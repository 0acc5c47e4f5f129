// memopt_search.cpp — memopt levels 2 to 4 and --memory-budget-mb by measured trial steps
// (train/memopt_search.h).
#include "spikemesh/train/memopt_search.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/layers/memopt_probe.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/layout.h"

namespace sm {
namespace {

constexpr double kMiB = 1048576.0;

// One trial step: this stage's segments as measured (maxima over the stage's dp and tp
// groups), the stage's peak and the world's.
struct Trial {
  double stage_peak = 0, world_peak = 0, ms = 0;  // bytes, bytes, ms
  std::vector<SegmentMeasure> segs;               // forward order
};

// Maximum over the ranks of one pipeline stage (its dp group, then its tp group).
void stage_max(const LayoutGroups& groups, std::vector<double>& v) {
  if (v.empty() && !groups.distributed()) return;
  if (Comm* dp = groups.dp_comm()) all_reduce_doubles(*dp, v, ReduceOp::Max);
  if (Comm* tp = groups.tp_comm()) all_reduce_doubles(*tp, v, ReduceOp::Max);
}

double world_max(const LayoutGroups& groups, double x) {
  std::vector<double> v{x};
  if (Comm* w = groups.metrics_comm()) all_reduce_doubles(*w, v, ReduceOp::Max);
  return v[0];
}

bool any_rank(const LayoutGroups& groups, bool b) { return world_max(groups, b ? 1.0 : 0.0) > 0; }

// Forward and backward of every microbatch, nothing stepped; the model's state put back.
// Collective over the layout's groups.
Trial run_trial(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& base) {
  Stage& stage = layout.stage();
  const Device dev = layout.model().device();
  std::vector<Tensor> buffers;
  for (Buffer* b : stage.buffers()) buffers.push_back(b->value.clone());
  Allocator& a = allocator_for(dev);
  synchronize(dev);
  const size_t outer = a.peak_bytes();
  a.reset_peak();
  Trial t;
  {
    MemoptProbe probe;
    Timer timer;
    Ctx ctx = base;
    layout.begin_step();
    layout.run_microbatches(micro, ctx, 1.0 / static_cast<double>(micro.size()));
    synchronize(dev);
    t.ms = timer.ms();
    t.segs = probe.measures();
  }
  t.stage_peak = static_cast<double>(a.peak_bytes());
  a.raise_peak(outer);
  const std::vector<Buffer*> bs = stage.buffers();
  for (size_t i = 0; i < bs.size(); ++i) bs[i]->value.copy_from(buffers[i]);
  stage.reset_state();
  layout.begin_step();  // gradients back to zero
  std::vector<double> v{t.stage_peak, t.ms};
  for (const SegmentMeasure& m : t.segs)
    v.insert(v.end(), {double(m.forward_peak), double(m.backward_peak), double(m.saved), double(m.kept), m.forward_ms});
  stage_max(layout.groups(), v);
  t.stage_peak = v[0], t.ms = v[1];
  for (size_t i = 0; i < t.segs.size(); ++i) {
    const double* m = &v[2 + 5 * i];
    t.segs[i].forward_peak = size_t(m[0]), t.segs[i].backward_peak = size_t(m[1]);
    t.segs[i].saved = size_t(m[2]), t.segs[i].kept = size_t(m[3]), t.segs[i].forward_ms = m[4];
  }
  t.world_peak = world_max(layout.groups(), t.stage_peak);
  return t;
}

int unit_index(Stage& stage, const Sequential* u) {
  for (size_t k = 0; k < stage.size(); ++k)
    if (&stage.unit(k) == u) return static_cast<int>(k);
  return -1;
}

std::string segment_name(Stage& stage, int k, size_t s) {
  return (stage.unit(k).name().empty() ? "unit " + std::to_string(stage.global_index(k)) : stage.unit(k).name()) +
         "[" + std::to_string(s) + "]";
}

std::vector<MemoptSegmentReport> report_of(Stage& stage, const MemoptConfig& c, const Trial& t) {
  std::vector<MemoptSegmentReport> out;
  for (const SegmentMeasure& m : t.segs) {
    const int k = unit_index(stage, m.unit);
    if (k < 0 || m.segment >= c.units[k].size()) continue;
    const MemoptSegment& s = c.units[k][m.segment];
    MemoptSegmentReport r;
    r.unit = stage.unit(k).name().empty() ? "unit " + std::to_string(stage.global_index(k)) : stage.unit(k).name();
    r.begin = s.begin, r.end = s.end, r.choice = s.describe();
    r.saved_mb = m.saved / kMiB, r.kept_mb = m.kept / kMiB;
    r.forward_peak_mb = m.forward_peak / kMiB, r.backward_peak_mb = m.backward_peak / kMiB, r.forward_ms = m.forward_ms;
    out.push_back(r);
  }
  return out;
}

class Search {
 public:
  Search(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx)
      : layout_(layout), stage_(layout.stage()), micro_(micro), ctx_(ctx), o_(layout.plan().options.memopt),
        budget_(o_.memory_budget_mb * kMiB) {}

  MemoptSearchResult run();

 private:
  bool met(const Trial& t) const { return budget_ > 0 && t.world_peak <= budget_; }
  Trial trial(const MemoptConfig& c, const std::string& what) {
    layout_.set_memopt(c);
    Trial t = run_trial(layout_, micro_, ctx_);
    ++r_.trial_steps;
    std::ostringstream os;
    os << what << ": peak " << t.world_peak / kMiB << " MB, " << t.ms << " ms";
    r_.log.push_back(os.str());
    return t;
  }
  void split_loop(SplitAxis axis, int max_trials);
  void time_chunk_loop();
  void greedy_uncheckpoint();

  Layout& layout_;
  Stage& stage_;
  const std::vector<MicroBatch>& micro_;
  const Ctx& ctx_;
  const MemoptOptions& o_;
  const double budget_;
  MemoptConfig cfg_;  // the best so far (applied between trials)
  Trial best_;
  MemoptSearchResult r_;
};

// "Repeatedly split the peak segment": the segment where this stage's peak happens gets twice
// the pieces along `axis` while the stage's measured peak drops by more than 1%. Every rank
// runs the same number of trials (a stage that is done repeats its configuration).
void Search::split_loop(SplitAxis axis, int max_trials) {
  const int64_t L = micro_.front().x.dim(axis == SplitAxis::Time ? 0 : 1);
  bool done = false;
  for (int it = 0; it < max_trials; ++it) {
    if (met(best_)) return;
    MemoptConfig next = cfg_;
    std::string what = "no change";
    if (!done && !best_.segs.empty()) {
      const SegmentMeasure* peak = &best_.segs.front();
      for (const SegmentMeasure& m : best_.segs)
        if (std::max(m.forward_peak, m.backward_peak) > std::max(peak->forward_peak, peak->backward_peak)) peak = &m;
      const int k = unit_index(stage_, peak->unit);
      MemoptSegment* s = k >= 0 && peak->segment < next.units[k].size() ? &next.units[k][peak->segment] : nullptr;
      const int pieces = s && s->pieces > 1 && s->axis == axis ? 2 * s->pieces : 2;
      if (s && s->checkpoint && splittable(stage_.unit(k), s->begin, s->end) && pieces <= L) {
        s->pieces = pieces;
        s->axis = axis;
        what = segment_name(stage_, k, peak->segment) + " " + s->describe();
      } else {
        done = true;
      }
    }
    if (!any_rank(layout_.groups(), !done)) return;
    const Trial t = trial(next, "split " + what);
    if (!done && t.stage_peak < best_.stage_peak * 0.99) {
      cfg_ = next;
      best_ = t;
    } else {
      done = true;
      layout_.set_memopt(cfg_);
    }
    best_.world_peak = world_max(layout_.groups(), best_.stage_peak);  // every rank: collective
  }
}

// Level 3's time pieces: every checkpointed segment that can run in pieces goes over time in
// chunks of Tc steps (4, then 2, then 1; those shorter than T), kept while the stage's peak
// drops by more than 1%. A fixed chunk length bounds what one piece holds whatever T is.
void Search::time_chunk_loop() {
  const int64_t T = micro_.front().x.dim(0);
  for (int64_t tc : {4, 2, 1}) {
    if (tc >= T || met(best_)) continue;
    MemoptConfig next = cfg_;
    const int pieces = static_cast<int>((T + tc - 1) / tc);
    int changed = 0;
    for (size_t k = 0; k < next.units.size(); ++k)
      for (MemoptSegment& g : next.units[k])
        if (g.checkpoint && splittable(stage_.unit(k), g.begin, g.end)) {
          g.pieces = pieces;
          g.axis = SplitAxis::Time;
          ++changed;
        }
    if (!any_rank(layout_.groups(), changed > 0)) return;
    const Trial t = trial(next, "every splittable segment in time pieces of " + std::to_string(tc) + " steps (t/" +
                                    std::to_string(pieces) + ")");
    const bool better = changed > 0 && t.stage_peak < best_.stage_peak * 0.99;
    if (better) {
      cfg_ = next;
      best_ = t;
    } else {
      layout_.set_memopt(cfg_);
    }
    best_.world_peak = world_max(layout_.groups(), best_.stage_peak);  // every rank: collective
    if (!any_rank(layout_.groups(), better)) return;
  }
}

// Level 4: from the measured configuration, un-checkpoint whole (unsplit) segments, slowest
// forward first, while the predicted peak stays at or under the limit (the measured peak, or
// the budget); then one step verifies it.
void Search::greedy_uncheckpoint() {
  const double inflight = layout_.plan().pipelined() ? static_cast<double>(micro_.size()) : 1.0;
  const double limit = budget_ > 0 ? budget_ : best_.stage_peak;
  std::vector<double> base(best_.segs.size()), add(best_.segs.size(), 0.0);
  for (size_t i = 0; i < base.size(); ++i)
    base[i] = static_cast<double>(std::max(best_.segs[i].forward_peak, best_.segs[i].backward_peak));
  std::vector<size_t> order;
  for (size_t i = 0; i < best_.segs.size(); ++i) {
    const int k = unit_index(stage_, best_.segs[i].unit);
    if (k < 0 || best_.segs[i].segment >= cfg_.units[k].size()) continue;
    const MemoptSegment& s = cfg_.units[k][best_.segs[i].segment];
    if (s.checkpoint && s.pieces == 1) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return best_.segs[a].forward_ms > best_.segs[b].forward_ms; });
  MemoptConfig next = cfg_;
  double predicted = 0;
  for (double b : base) predicted = std::max(predicted, b);
  int changed = 0;
  for (size_t j : order) {
    const SegmentMeasure& m = best_.segs[j];
    const double delta = inflight * (static_cast<double>(m.saved) - static_cast<double>(m.kept));
    double peak = 0;
    for (size_t i = 0; i < base.size(); ++i)
      peak = std::max(peak, base[i] + add[i] + (best_.segs[i].order > m.order ? delta : 0.0));
    if (peak > limit) continue;
    for (size_t i = 0; i < base.size(); ++i)
      if (best_.segs[i].order > m.order) add[i] += delta;
    predicted = peak;
    next.units[unit_index(stage_, m.unit)][m.segment].checkpoint = false;
    ++changed;
  }
  r_.predicted_peak_mb = world_max(layout_.groups(), predicted) / kMiB;
  if (!any_rank(layout_.groups(), changed > 0)) return;
  const Trial t = trial(next, "level 4: " + std::to_string(changed) + " segments un-checkpointed on this stage");
  if (t.stage_peak <= limit * 1.03) {  // the prediction held (3%: allocator rounding, timing of frees)
    cfg_ = next;
    best_ = t;
  } else {
    layout_.set_memopt(cfg_);
    r_.log.push_back("level 4: the measured peak rose above the prediction; kept the measured configuration");
  }
  best_.world_peak = world_max(layout_.groups(), best_.stage_peak);  // every rank: collective
}

MemoptSearchResult Search::run() {
  Timer timer;
  r_.searched = true;
  cfg_ = layout_.memopt();
  // One unmeasured step first: the first step of a run creates the kernels' primitives and
  // the allocator's blocks, which would make the first segments look slow.
  run_trial(layout_, micro_, ctx_);
  ++r_.trial_steps;
  if (o_.level == 0) {  // a budget from level 0: level 0 first, then level 1
    best_ = trial(cfg_, "level 0");
    if (!met(best_)) {
      cfg_ = checkpoint_all(stage_, o_.compress_x, layout_.memopt_units());
      best_ = trial(cfg_, "level 1");
    }
  } else {
    best_ = trial(cfg_, "level 1");
  }
  if (o_.level == 4) {  // the peak segment split over samples (two trials at most), then greedy
    split_loop(SplitAxis::Batch, 2);
    greedy_uncheckpoint();
  }
  if (o_.level == 2 || o_.level == 3 || (budget_ > 0 && !met(best_))) split_loop(SplitAxis::Batch, 4);
  if (o_.level == 3 || (budget_ > 0 && !met(best_))) time_chunk_loop();
  layout_.set_memopt(cfg_);
  r_.peak_mb = best_.world_peak / kMiB;
  r_.segments = report_of(stage_, cfg_, best_);
  r_.optimize_ms = world_max(layout_.groups(), timer.ms());
  if (budget_ > 0 && !met(best_))
    SM_INPUT_ERROR("--memory-budget-mb " << o_.memory_budget_mb << ": no memopt configuration reached it; the smallest "
                                         << "peak measured was " << r_.peak_mb << " MB per rank (" << r_.trial_steps
                                         << " trial steps)");
  return r_;
}

}  // namespace

MemoptSearchResult measure_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx) {
  MemoptSearchResult r;
  if (micro.empty()) return r;
  Timer timer;
  const Trial t = run_trial(layout, micro, ctx);
  r.trial_steps = 1;
  r.peak_mb = t.world_peak / kMiB;
  r.segments = report_of(layout.stage(), layout.memopt(), t);
  r.optimize_ms = timer.ms();
  return r;
}

MemoptSearchResult optimize_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx) {
  const MemoptOptions& o = layout.plan().options.memopt;
  const bool search = o.memory_budget_mb > 0 || o.level >= 2;
  if (!search || micro.empty()) return {};
  return Search(layout, micro, ctx).run();
}

}  // namespace sm
