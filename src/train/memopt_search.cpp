// memopt_search.cpp — memopt levels 2 to 4 and --memory-budget-mb: one measured step, a
// predicted configuration, at most two trial steps (train/memopt_search.h).
#include "spikemesh/train/memopt_search.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/layers/memopt_probe.h"
#include "spikemesh/layers/sequential.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/layout.h"

namespace sm {
namespace {

constexpr double kMiB = 1048576.0;
constexpr int kFields = 11;  // per segment in the reduction below
constexpr double kPlanMargin = 0.95;  // a budget is planned for with this much of it

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

// A step's numbers made the stage's (maxima over its dp and tp groups) and its world peak.
// `shift`: bytes every later step carries that this one did not hold throughout (optimizer
// state made by a first step), added to every absolute figure. Collective over the groups.
void reduce_trial(const LayoutGroups& groups, MemoptTrial& t, double shift) {
  std::vector<double> v{t.stage_peak + shift, t.ms};
  for (const SegmentMeasure& m : t.segs)
    v.insert(v.end(), {double(m.forward_peak) + shift, double(m.backward_peak) + shift, double(m.saved),
                       double(m.kept), m.forward_ms, double(m.forward_base) + shift,
                       double(m.backward_base) + shift, double(m.in_bytes), double(m.out_bytes),
                       double(m.forward_workspace), double(m.backward_workspace)});
  stage_max(groups, v);
  t.stage_peak = v[0], t.ms = v[1];
  for (size_t i = 0; i < t.segs.size(); ++i) {
    const double* m = &v[2 + kFields * i];
    SegmentMeasure& s = t.segs[i];
    s.forward_peak = size_t(m[0]), s.backward_peak = size_t(m[1]), s.saved = size_t(m[2]), s.kept = size_t(m[3]);
    s.forward_ms = m[4], s.forward_base = size_t(m[5]), s.backward_base = size_t(m[6]);
    s.in_bytes = size_t(m[7]), s.out_bytes = size_t(m[8]);
    s.forward_workspace = size_t(m[9]), s.backward_workspace = size_t(m[10]);
  }
  t.world_peak = world_max(groups, t.stage_peak);
}

// Forward and backward of every microbatch, nothing stepped; the model's state put back.
// Collective over the layout's groups.
MemoptTrial run_trial(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& base) {
  Stage& stage = layout.stage();
  const Device dev = layout.model().device();
  std::vector<Tensor> buffers;
  for (Buffer* b : stage.buffers()) buffers.push_back(b->value.clone());
  Allocator& a = allocator_for(dev);
  synchronize(dev);
  const size_t outer = a.peak_bytes();
  a.reset_peak();
  MemoptTrial t;
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
  reduce_trial(layout.groups(), t, 0.0);
  return t;
}

std::string unit_name(Stage& stage, int k) {
  return stage.unit(k).name().empty() ? "unit " + std::to_string(stage.global_index(k)) : stage.unit(k).name();
}

// Per unit and segment of `c` in stage order, what `t` measured of it (a piece chain's forward
// is measured as its first segment's, its backward as its last's; its other links show zeros).
std::vector<MemoptSegmentReport> report_of(Stage& stage, const MemoptConfig& c, const MemoptTrial& t) {
  std::vector<MemoptSegmentReport> out;
  for (size_t k = 0; k < c.units.size(); ++k)
    for (size_t i = 0; i < c.units[k].size(); ++i) {
      const MemoptSegment& s = c.units[k][i];
      MemoptSegmentReport r;
      r.unit = unit_name(stage, static_cast<int>(k));
      r.begin = s.begin, r.end = s.end, r.choice = s.describe();
      if (const PieceChain* ch = c.chain_of(k)) r.choice += ", " + ch->describe(stage);
      for (const SegmentMeasure& m : t.segs)
        if (m.unit == &stage.unit(k) && m.segment == i) {
          r.saved_mb = m.saved / kMiB, r.kept_mb = m.kept / kMiB, r.forward_ms = m.forward_ms;
          r.forward_peak_mb = m.forward_peak / kMiB, r.backward_peak_mb = m.backward_peak / kMiB;
        }
      out.push_back(r);
    }
  return out;
}

// The measured segments `pick(its choice in c, in from)` selects, by recompute time saved per
// byte kept whole: the most first (`most_first`) or the least.
template <class Pick>
std::vector<size_t> by_time_per_byte(const MemoptPredictor& p, bool most_first, Pick pick, const MemoptConfig& c,
                                     const MemoptConfig& from) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.size(); ++i) {
    const SegmentRef r = p.ref(i);
    if (r.unit >= 0 && pick(c.units[r.unit][r.segment], from.units[r.unit][r.segment])) order.push_back(i);
  }
  const auto gain = [&](size_t i) { return p.forward_ms(i) / std::max(p.keep_whole_bytes(i), 1.0); };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return most_first ? gain(a) > gain(b) : gain(a) < gain(b); });
  return order;
}

// Counts the segments whose choice differs between two configurations.
int changes(const MemoptConfig& a, const MemoptConfig& b) {
  int n = 0;
  for (size_t k = 0; k < a.units.size() && k < b.units.size(); ++k) {
    for (size_t s = 0; s < a.units[k].size() && s < b.units[k].size(); ++s)
      n += a.units[k][s].describe() != b.units[k][s].describe() ? 1 : 0;
    const PieceChain *ca = a.chain_of(k), *cb = b.chain_of(k);
    n += (ca == nullptr) != (cb == nullptr) || (ca && !(*ca == *cb)) ? 1 : 0;
  }
  return n;
}

}  // namespace

// ---- the caller's own step, observed ---------------------------------------------------------

MemoptStepObserver::MemoptStepObserver(Layout& layout) : layout_(layout) {
  const Device dev = layout.model().device();
  synchronize(dev);
  Allocator& a = allocator_for(dev);
  before_ = a.current_bytes();
  outer_peak_ = a.peak_bytes();
  a.reset_peak();
  probe_ = std::make_unique<MemoptProbe>();
  timer_.reset();
}

MemoptStepObserver::~MemoptStepObserver() {
  if (probe_) allocator_for(layout_.model().device()).raise_peak(outer_peak_);
}

MemoptTrial MemoptStepObserver::finish() {
  const Device dev = layout_.model().device();
  synchronize(dev);
  Allocator& a = allocator_for(dev);
  MemoptTrial t;
  t.ms = timer_.ms();
  t.segs = probe_->measures();
  probe_.reset();
  t.stage_peak = static_cast<double>(a.peak_bytes());
  a.raise_peak(outer_peak_);
  const size_t after = a.current_bytes();
  reduce_trial(layout_.groups(), t, after > before_ ? static_cast<double>(after - before_) : 0.0);
  return t;
}

// ---- the search ---------------------------------------------------------------------------------

namespace {

class Search {
 public:
  Search(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx)
      : layout_(layout), stage_(layout.stage()), micro_(micro), ctx_(ctx), o_(layout.plan().options.memopt),
        budget_(o_.memory_budget_mb * kMiB),
        inflight_(layout.plan().pipelined() ? static_cast<double>(micro.size()) : 1.0),
        steps_(micro.empty() ? 1.0 : static_cast<double>(micro.front().x.dim(0))) {}

  MemoptSearchResult run(const MemoptTrial* observed);

 private:
  // The budget is each stage's own (pp: every stage meets it for its ranks); all_met() agrees
  // on it over the world, for decisions that change the number of collective steps.
  bool met(const MemoptTrial& t) const { return budget_ > 0 && t.stage_peak <= budget_; }
  bool all_met(const MemoptTrial& t) const { return budget_ > 0 && !any_rank(layout_.groups(), !met(t)); }
  MemoptTrial trial(const MemoptConfig& c, const std::string& what, double predicted);
  bool can_split(const MemoptConfig& c, size_t unit, size_t seg, SplitAxis axis) const;
  std::vector<MemoptConfig> sample_splits(const MemoptConfig& c, size_t unit, size_t seg,
                                          bool backward_only = true) const;
  MemoptConfig add_sample_pieces(const MemoptPredictor& p, MemoptConfig c, double stop_at) const;
  MemoptConfig add_time_pieces(const MemoptPredictor& p, MemoptConfig c) const;
  bool add_chain(MemoptConfig& c, const PieceChain& ch) const;
  MemoptConfig add_chains(const MemoptPredictor& p, MemoptConfig c, double stop_at) const;
  MemoptConfig keep_whole(const MemoptPredictor& p, MemoptConfig c, double limit) const;
  MemoptConfig checkpoint_again(const MemoptPredictor& p, const MemoptConfig& from, MemoptConfig c,
                                double limit) const;
  MemoptConfig lowest_peak_within(const MemoptPredictor& p, const MemoptConfig& from, double cap_ms,
                                  bool backward_only) const;
  MemoptConfig choose(const MemoptPredictor& p, const MemoptConfig& from, double* limit) const;
  // Every piece that lowers the prediction: sample pieces, chains, then time chunks.
  MemoptConfig smallest_peak(const MemoptPredictor& p, const MemoptConfig& from) const {
    return add_time_pieces(p, add_chains(p, add_sample_pieces(p, from, 0), 0));
  }

  Layout& layout_;
  Stage& stage_;
  const std::vector<MicroBatch>& micro_;
  const Ctx& ctx_;
  const MemoptOptions& o_;
  const double budget_, inflight_, steps_;
  MemoptSearchResult r_;
};

MemoptTrial Search::trial(const MemoptConfig& c, const std::string& what, double predicted) {
  layout_.set_memopt(c);
  MemoptTrial t = run_trial(layout_, micro_, ctx_);
  ++r_.trial_steps;
  std::ostringstream os;
  os.precision(4);
  os << what << ": peak " << t.world_peak / kMiB << " MB";
  const double world_predicted = world_max(layout_.groups(), predicted);  // every rank: collective
  if (world_predicted > 0) os << " (predicted " << world_predicted / kMiB << ")";
  os << ", " << t.ms << " ms";
  r_.log.push_back(os.str());
  return t;
}

bool Search::can_split(const MemoptConfig& c, size_t unit, size_t seg, SplitAxis axis) const {
  const MemoptSegment& s = c.units[unit][seg];
  if (c.chain_of(unit) || !s.checkpoint || !splittable(stage_.unit(unit), s.begin, s.end, axis)) return false;
  const int64_t L = micro_.front().x.dim(axis == SplitAxis::Time ? 0 : 1);
  const int pieces = s.pieces > 1 && s.axis == axis ? 2 * s.pieces : 2;
  return (s.pieces == 1 || s.axis == axis) && pieces <= L;
}

// The next sample splits of a checkpointed segment, the cheaper first: twice the pieces in
// backward only (while its forward is whole), its forward joining the pieces its backward has,
// twice the pieces in forward and backward (`backward_only` false: only the last).
std::vector<MemoptConfig> Search::sample_splits(const MemoptConfig& c, size_t unit, size_t seg,
                                                bool backward_only) const {
  std::vector<MemoptConfig> out;
  const MemoptSegment& s = c.units[unit][seg];
  if (const PieceChain* ch = c.chain_of(unit)) {  // its backward runs in the chain's pieces
    if (ch->forward_in_pieces) return out;         // and its forward too
    const int64_t N = micro_.front().x.dim(1);     // more pieces in its own forward
    const int pieces = s.pieces > 1 ? 2 * s.pieces : 2;
    if (s.checkpoint && pieces <= N && splittable(stage_.unit(unit), s.begin, s.end, SplitAxis::Batch)) {
      out.push_back(c);
      MemoptSegment& n = out.back().units[unit][seg];
      n.pieces = pieces, n.axis = SplitAxis::Batch, n.forward_in_pieces = true;
    }
    return out;
  }
  const bool split = s.pieces > 1 && s.axis == SplitAxis::Batch;
  const bool more = can_split(c, unit, seg, SplitAxis::Batch);
  const auto with = [&](int pieces, bool forward_in_pieces) {
    out.push_back(c);
    MemoptSegment& n = out.back().units[unit][seg];
    n.pieces = pieces;
    n.axis = SplitAxis::Batch;
    n.forward_in_pieces = forward_in_pieces;
  };
  if (backward_only && more && !(split && s.forward_in_pieces)) with(split ? 2 * s.pieces : 2, false);
  if (backward_only && split && !s.forward_in_pieces) with(s.pieces, true);
  if (more) with(split ? 2 * s.pieces : 2, true);
  return out;
}

// The segment with the highest predicted peak is split further over its samples (backward only
// when that predicts as low) while its own prediction drops by more than 1% and the stage's
// does not rise; `stop_at` > 0 (a budget) stops at the first configuration predicted under it.
MemoptConfig Search::add_sample_pieces(const MemoptPredictor& p, MemoptConfig c, double stop_at) const {
  for (int guard = 0; guard < 256; ++guard) {
    const std::vector<double> peaks = p.segment_peaks(c);
    if (peaks.empty() || (stop_at > 0 && p.peak(c) <= stop_at)) break;
    const size_t top = static_cast<size_t>(std::max_element(peaks.begin(), peaks.end()) - peaks.begin());
    const SegmentRef r = p.ref(top);
    if (r.unit < 0 || !c.units[r.unit][r.segment].checkpoint) break;
    const MemoptConfig* best = nullptr;
    double best_top = peaks[top] * 0.99;
    std::vector<MemoptConfig> nexts = sample_splits(c, r.unit, r.segment);
    for (const MemoptConfig& next : nexts) {  // the cheaper first: a tie keeps it
      const double t = p.segment_peaks(next)[top];
      if (t < best_top * (best ? 0.995 : 1.0) && p.peak(next) <= p.peak(c)) best = &next, best_top = t;
    }
    if (!best) break;
    c = *best;
  }
  return c;
}

// Every other checkpointed segment that can run in pieces goes over time in chunks of 4, 2 or
// 1 steps: the chunk with the lowest predicted peak, if it is lower by more than 1%.
MemoptConfig Search::add_time_pieces(const MemoptPredictor& p, MemoptConfig c) const {
  const int64_t T = micro_.front().x.dim(0);
  MemoptConfig best = c;
  double best_peak = p.peak(c);
  for (int64_t tc : {4, 2, 1}) {
    if (tc >= T) continue;
    MemoptConfig next = c;
    for (size_t k = 0; k < next.units.size(); ++k)
      for (size_t s = 0; s < next.units[k].size(); ++s) {
        MemoptSegment& g = next.units[k][s];
        if (!next.chain_of(k) && g.pieces == 1 && g.checkpoint && splittable(stage_.unit(k), g.begin, g.end, SplitAxis::Time)) {
          g.pieces = static_cast<int>((T + tc - 1) / tc);
          g.axis = SplitAxis::Time;
        }
      }
    const double peak = p.peak(next);
    if (peak < best_peak * 0.99) best = next, best_peak = peak;
  }
  return best;
}

// Chains `ch` in `c` when its units may form one (every segment checkpointed; sample pieces in
// forward kept, other pieces given up for the chain's) and it overlaps no chain of `c`.
bool Search::add_chain(MemoptConfig& c, const PieceChain& ch) const {
  for (size_t k = ch.begin; k < ch.end; ++k) {
    if (c.units[k].empty() || c.chain_of(k) || !splittable(stage_.unit(k), 0, stage_.unit(k).size(), SplitAxis::Batch))
      return false;
    for (const MemoptSegment& s : c.units[k])
      if (!s.checkpoint) return false;
  }
  for (size_t k = ch.begin; k < ch.end; ++k)  // pieces of their own in forward stay unless the chain's replace them
    for (MemoptSegment& s : c.units[k])
      if (!chain_link(s) || ch.forward_in_pieces) s.pieces = 1, s.forward_in_pieces = true;
  c.chains.push_back(ch);
  return true;
}

// Piece chains of 2 to 4 units in 2, 4 or 8 pieces, in both passes or in backward only, each
// followed by the sample pieces that
// then lower the prediction: the one with the lowest predicted peak while it is lower by more
// than 1%; `stop_at` > 0 (a budget) stops once the prediction is under it.
MemoptConfig Search::add_chains(const MemoptPredictor& p, MemoptConfig c, double stop_at) const {
  const int64_t N = micro_.front().x.dim(1);
  for (int round = 0; round < 8 && !(stop_at > 0 && p.peak(c) <= stop_at); ++round) {
    MemoptConfig best;
    double best_peak = p.peak(c) * 0.99;
    for (size_t h = 0; h < stage_.chunks(); ++h) {
      const auto [b, e] = stage_.chunk_local(h);
      for (size_t k = b; k + 1 < e; ++k)
        for (size_t len = 2; len <= 4 && k + len <= e; ++len)
          for (int pieces : {2, 4, 8})
            for (bool forward : {false, true}) {  // the cheaper first: a tie keeps it
              MemoptConfig next = c;
              if (pieces > N || !add_chain(next, PieceChain{k, k + len, pieces, forward})) continue;
              next = add_sample_pieces(p, next, stop_at);
              const double peak = p.peak(next);
              if (peak < best_peak) best = next, best_peak = peak;
            }
    }
    if (best.units.empty()) break;
    c = best;
  }
  return c;
}

// Checkpointed segments in one piece kept whole, the most recompute time saved per byte kept
// first, while the predicted peak stays at or under `limit`.
MemoptConfig Search::keep_whole(const MemoptPredictor& p, MemoptConfig c, double limit) const {
  const std::vector<size_t> order = by_time_per_byte(p, true, [&](const MemoptSegment& s, const MemoptSegment&) {
    return s.checkpoint && s.pieces == 1;
  }, c, c);
  for (size_t i : order) {
    if (c.chain_of(p.ref(i).unit)) continue;  // a chain's links stay checkpointed
    MemoptConfig next = c;
    next.units[p.ref(i).unit][p.ref(i).segment].checkpoint = false;
    if (p.peak(next) <= limit) c = next;
  }
  return c;
}

// A trial above its limit, corrected from its own measurement: the segments it kept whole
// checkpointed again, the least time saved per byte first, until the prediction is under the
// limit; then more pieces if that is not enough.
MemoptConfig Search::checkpoint_again(const MemoptPredictor& p, const MemoptConfig& from, MemoptConfig c,
                                      double limit) const {
  const std::vector<size_t> order = by_time_per_byte(p, false, [&](const MemoptSegment& s, const MemoptSegment& was) {
    return !s.checkpoint && was.checkpoint;
  }, c, from);
  for (size_t i : order) {
    if (p.peak(c) <= limit) break;
    c.units[p.ref(i).unit][p.ref(i).segment].checkpoint = true;
  }
  return p.peak(c) <= limit ? c : add_sample_pieces(p, c, limit);
}

// Level 4: from level 0 (every segment whole), the change that lowers the segment with the
// highest predicted peak the most per predicted millisecond — checkpointing a segment before it
// (its saved bytes leave), or that segment checkpointed and split over samples (or split into
// more pieces) — while the predicted step time stays within `cap_ms`.
MemoptConfig Search::lowest_peak_within(const MemoptPredictor& p, const MemoptConfig& from, double cap_ms,
                                        bool backward_only) const {
  MemoptConfig c = from;
  for (auto& u : c.units)
    for (MemoptSegment& s : u) s.checkpoint = false, s.pieces = 1;
  for (int guard = 0; guard < 1024; ++guard) {
    const std::vector<double> peaks = p.segment_peaks(c);
    if (peaks.empty()) break;
    const size_t top = static_cast<size_t>(std::max_element(peaks.begin(), peaks.end()) - peaks.begin());
    const double now_ms = p.extra_ms(c), overall = peaks[top];
    MemoptConfig best;
    double best_gain = 0;
    const auto consider = [&](const MemoptConfig& next) {
      const double ms = p.extra_ms(next);
      if (p.step_ms(next) > cap_ms) return;
      const std::vector<double> np = p.segment_peaks(next);
      const double drop = peaks[top] - np[top];
      if (drop <= 0.005 * peaks[top] || *std::max_element(np.begin(), np.end()) > overall) return;
      const double gain = drop / std::max(ms - now_ms, 1e-3);
      if (gain > best_gain) best_gain = gain, best = next;
    };
    const SegmentMeasure& t = p.measure(top);
    for (size_t j = 0; j < p.size(); ++j) {  // a segment before the top one checkpointed
      const SegmentRef r = p.ref(j);
      if (r.unit < 0 || c.units[r.unit][r.segment].checkpoint || p.measure(j).order >= t.order) continue;
      MemoptConfig next = c;
      next.units[r.unit][r.segment].checkpoint = true;
      consider(next);
    }
    const SegmentRef r = p.ref(top);
    if (r.unit >= 0) {  // the top one checkpointed and in (more) pieces over its samples
      MemoptConfig ck = c;
      ck.units[r.unit][r.segment].checkpoint = true;
      for (const MemoptConfig& next : sample_splits(ck, r.unit, r.segment, backward_only)) consider(next);
    }
    if (best.units.empty()) break;
    c = best;
  }
  return c;
}

// The configuration to try from a measurement of `from` (every segment checkpointed); *limit:
// the peak it must stay under (the budget, or level 4's split prediction; 0: none).
MemoptConfig Search::choose(const MemoptPredictor& p, const MemoptConfig& from, double* limit) const {
  if (o_.level == 4 && budget_ <= 0) {
    MemoptConfig level0 = from;
    for (auto& u : level0.units)
      for (MemoptSegment& s : u) s.checkpoint = false, s.pieces = 1;
    // The greedy walk is myopic (a cheap backward-only split can spend the time a checkpoint
    // would have used better): walked with and without those splits, the lower prediction.
    const double cap = o_.max_slowdown * p.step_ms(level0);
    const MemoptConfig a = lowest_peak_within(p, from, cap, true), b = lowest_peak_within(p, from, cap, false);
    const double pa = p.peak(a), pb = p.peak(b);
    const MemoptConfig c = pb < pa * 0.999 || (pb <= pa * 1.001 && p.extra_ms(b) < p.extra_ms(a)) ? b : a;
    *limit = p.peak(c);
    return c;
  }
  *limit = budget_ * kPlanMargin;  // predictions are within about 5% of the measurement
  MemoptConfig c = add_sample_pieces(p, from, *limit);
  if (o_.level == 2 || o_.level == 3 || (budget_ > 0 && p.peak(c) > *limit)) c = add_chains(p, c, *limit);
  if (o_.level == 3 || (budget_ > 0 && p.peak(c) > *limit)) c = add_time_pieces(p, c);
  if (budget_ > 0) c = keep_whole(p, c, *limit);
  return c;
}

MemoptSearchResult Search::run(const MemoptTrial* observed) {
  Timer timer;
  r_.searched = true;
  MemoptConfig from = layout_.memopt();
  // Decisions that change the number of collective steps depend on what every rank shares
  // (the options, world maxima), never on this stage's own segments (pp: some stages have none).
  const bool from_level0 = o_.level == 0;
  const std::string measured_level = from_level0 ? "level 0" : "level 1";
  MemoptTrial m = observed ? *observed : trial(from, "measured " + measured_level, 0);
  if (observed) {
    std::ostringstream os;
    os << "the caller's step (" << measured_level << "): peak " << m.world_peak / kMiB
       << " MB";
    r_.log.push_back(os.str());
  }
  if (from_level0 && !all_met(m)) {  // a budget from level 0: level 1 is measured first
    from = checkpoint_all(stage_, o_.compress_x, layout_.memopt_units());
    m = trial(from, "level 1", 0);
  }
  MemoptConfig cfg = from;
  MemoptTrial best = m;
  if (!(from_level0 && all_met(m))) {
    const MemoptPredictor p(stage_, m, from, m, inflight_, steps_);
    if (budget_ > 0) {  // refused before any trial when even every piece cannot reach it
      const double smallest = world_max(layout_.groups(), p.peak(smallest_peak(p, from)));
      if (smallest > budget_ * 1.05)
        SM_INPUT_ERROR("--memory-budget-mb " << o_.memory_budget_mb << ": no memopt configuration reaches it; the "
                                             << "smallest peak, predicted from the measured level-1 step ("
                                             << m.world_peak / kMiB << " MB), is " << smallest / kMiB << " MB per rank");
    }
    double limit = 0;
    MemoptConfig cand = choose(p, from, &limit);
    r_.stage_predicted_peak_mb = p.peak(cand) / kMiB;
    r_.predicted_peak_mb = world_max(layout_.groups(), p.peak(cand)) / kMiB;
    if (any_rank(layout_.groups(), changes(cand, from) > 0)) {
      const std::string what = "predicted: " + std::to_string(changes(cand, from)) + " segments changed on this stage";
      const MemoptTrial t1 = trial(cand, what, p.peak(cand));
      const bool ok1 = budget_ > 0 ? met(t1) : p.size() == 0 || t1.stage_peak <= std::max(limit, p.peak(cand)) * 1.05;
      if (any_rank(layout_.groups(), !ok1) && r_.trial_steps < 2) {
        const MemoptPredictor p1(stage_, t1, cand, m, inflight_, steps_);
        const double target = (limit > 0 ? limit : p.peak(cand)) * 0.97;
        MemoptConfig again = checkpoint_again(p1, from, cand, target);
        // A budget still predicted out of reach: the configuration with the smallest peak
        // (predicted from the level-1 step, which saw every segment checkpointed)
        const bool smallest = budget_ > 0 && p1.peak(again) > target;
        if (smallest) again = smallest_peak(p, from);
        const MemoptTrial t2 = trial(again, smallest ? "the smallest predicted peak" : "corrected from that step",
                                     smallest ? p.peak(again) : p1.peak(again));
        const bool ok2 = budget_ > 0 ? met(t2) : p.size() == 0 || t2.stage_peak <= std::max(limit, p.peak(cand)) * 1.05;
        if (ok2 || t2.stage_peak < std::min(t1.stage_peak, m.stage_peak)) cfg = again, best = t2;
        else if (ok1 || t1.stage_peak < m.stage_peak) cfg = cand, best = t1;
      } else if (ok1 || t1.stage_peak < m.stage_peak) {
        cfg = cand, best = t1;
      }
      best.world_peak = world_max(layout_.groups(), best.stage_peak);  // every rank: collective
    }
  }
  layout_.set_memopt(cfg);
  r_.peak_mb = best.world_peak / kMiB;
  r_.stage_peak_mb = best.stage_peak / kMiB;
  r_.segments = report_of(stage_, cfg, best);
  r_.optimize_ms = world_max(layout_.groups(), timer.ms());
  if (budget_ > 0 && !all_met(best)) {
    std::string tried;
    for (const std::string& l : r_.log) tried += (tried.empty() ? "" : "; ") + l;
    SM_INPUT_ERROR("--memory-budget-mb " << o_.memory_budget_mb << ": no memopt configuration reached it; the smallest "
                                         << "peak measured was " << r_.peak_mb << " MB per rank (" << tried << ")");
  }
  return r_;
}

}  // namespace

bool memopt_search_needed(const Layout& layout) {
  const MemoptOptions& o = layout.plan().options.memopt;
  return o.memory_budget_mb > 0 || o.level >= 2;
}

MemoptSearchResult measure_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx) {
  MemoptSearchResult r;
  if (micro.empty()) return r;
  Timer timer;
  const MemoptTrial t = run_trial(layout, micro, ctx);
  r.trial_steps = 1;
  r.peak_mb = t.world_peak / kMiB;
  r.stage_peak_mb = t.stage_peak / kMiB;
  r.segments = report_of(layout.stage(), layout.memopt(), t);
  r.optimize_ms = timer.ms();
  return r;
}

MemoptSearchResult optimize_memopt(Layout& layout, const std::vector<MicroBatch>& micro, const Ctx& ctx,
                                   const MemoptTrial* observed) {
  if (!memopt_search_needed(layout) || micro.empty()) return {};
  return Search(layout, micro, ctx).run(observed);
}

}  // namespace sm
