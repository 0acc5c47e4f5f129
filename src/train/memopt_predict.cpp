// memopt_predict.cpp — peaks and extra time of memopt configurations from one measured step
// (train/memopt_predict.h).
#include "spikemesh/train/memopt_predict.h"

#include <algorithm>

#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/sequential.h"
#include "spikemesh/models/stage.h"

namespace sm {

int unit_index(Stage& stage, const Sequential* u) {
  for (size_t k = 0; k < stage.size(); ++k)
    if (&stage.unit(k) == u) return static_cast<int>(k);
  return -1;
}

namespace {

int count_batch_norms(Layer& l) {
  int n = dynamic_cast<BatchNorm*>(&l) ? 1 : 0;
  for (Layer* c : l.children()) n += count_batch_norms(*c);
  return n;
}

const SegmentMeasure* find(const MemoptTrial& t, const Sequential* unit, size_t segment) {
  for (const SegmentMeasure& m : t.segs)
    if (m.unit == unit && m.segment == segment) return &m;
  return nullptr;
}

int pieces_of(const MemoptSegment* s) { return s && s->checkpoint ? std::max(1, s->pieces) : 1; }
// The pieces of its forward: one when only its backward runs in pieces.
int forward_pieces_of(const MemoptSegment* s) { return s && !s->forward_in_pieces ? 1 : pieces_of(s); }

// What running in pieces costs, in forwards of the segment per batch norm (measured on the CPU):
// in forward and backward, a partial forward per batch norm in forward, a recompute and partial
// backward per batch norm in backward and what running in pieces adds; in backward only, the
// latter two.
constexpr double kSplitForwards = 3.5;
constexpr double kBackwardSplitForwards = 1.4;
// `chain`: the piece chain it is a link of, whose costs chain_ms counts (its own pieces, in
// forward, count only when the chain's forward is the units' own).
double split_forwards(const MemoptSegment* s, const PieceChain* chain) {
  if (pieces_of(s) == 1 || (chain && chain->forward_in_pieces)) return 0.0;
  if (chain) return kSplitForwards - kBackwardSplitForwards;  // pieces in forward
  return s->forward_in_pieces ? kSplitForwards : kBackwardSplitForwards;
}

double transient(size_t peak, size_t base) {
  return std::max(0.0, static_cast<double>(peak) - static_cast<double>(base));
}

// A region's transient (peak - base) in P pieces as fixed + per_piece / P. From one run in
// `pieces` pieces: the tensor that stays whole (its output in forward, input gradient in
// backward) and the largest kernel workspace are the fixed part, the rest scales. From that run and a level-1 run (one piece,
// transient `one`): the line through both points.
PieceModel piece_model(double measured, size_t whole, double pieces, const double* one) {
  PieceModel m;
  if (one && pieces > 1) {
    m.per_piece = std::max(0.0, (*one - measured) * pieces / (pieces - 1));
    m.fixed = std::max(0.0, *one - m.per_piece);
    return m;
  }
  m.fixed = std::min(measured, static_cast<double>(whole));
  m.per_piece = (measured - m.fixed) * std::max(1.0, pieces);
  return m;
}

// The measured step's segments, with the links of a chain of `config` (measured as one region)
// and any segment it did not measure taken from the level-1 step (`from_level1` marks them).
MemoptTrial merged(Stage& stage, const MemoptTrial& measured, const MemoptConfig& config, const MemoptTrial& level1,
                   std::vector<bool>& from_level1) {
  from_level1.assign(measured.segs.size(), false);
  if (&measured == &level1 || config.chains.empty()) return measured;
  MemoptTrial t = measured;
  t.segs.clear();
  from_level1.clear();
  for (const SegmentMeasure& l : level1.segs) {
    const int k = unit_index(stage, l.unit);
    const SegmentMeasure* m = find(measured, l.unit, l.segment);
    const bool use_l1 = !m || (k >= 0 && config.chain_of(static_cast<size_t>(k)));
    t.segs.push_back(use_l1 ? l : *m);
    t.segs.back().order = l.order;
    from_level1.push_back(use_l1);
  }
  return t;
}

}  // namespace

MemoptPredictor::MemoptPredictor(Stage& stage, const MemoptTrial& measured, const MemoptConfig& config,
                                 const MemoptTrial& level1, double inflight, double steps)
    : config_(config), inflight_(inflight), steps_(std::max(1.0, steps)) {
  std::vector<bool> from_level1;
  m_ = merged(stage, measured, config, level1, from_level1);
  for (size_t j = 0; j < m_.segs.size(); ++j) {
    const SegmentMeasure& m = m_.segs[j];
    SegmentRef r{unit_index(stage, m.unit), m.segment};
    refs_.push_back(r);
    const SegmentMeasure* l1 = find(level1, m.unit, m.segment);
    saved_.push_back(l1 ? static_cast<double>(l1->saved) : 0.0);
    kept_.push_back(l1 ? static_cast<double>(l1->kept) : 0.0);
    int bns = 0;
    const MemoptSegment* s = r.unit >= 0 && r.segment < config.units[r.unit].size() ? &config.units[r.unit][r.segment]
                                                                                    : nullptr;
    if (s)
      for (size_t i = s->begin; i < s->end; ++i) bns += count_batch_norms(stage.unit(r.unit).at(i));
    batch_norms_.push_back(bns);
    // A level-1 measure is of one piece whatever `config` says.
    const double f0 = from_level1[j] ? 1.0 : forward_pieces_of(s), p0 = from_level1[j] ? 1.0 : pieces_of(s);
    const double f1 = l1 ? transient(l1->forward_peak, l1->forward_base) : 0.0;
    const double b1 = l1 ? transient(l1->backward_peak, l1->backward_base) : 0.0;
    const bool two = l1 && &level1 != &measured;
    forward_.push_back(piece_model(transient(m.forward_peak, m.forward_base), m.out_bytes + m.forward_workspace, f0,
                                   two && f0 > 1 ? &f1 : nullptr));
    backward_.push_back(piece_model(transient(m.backward_peak, m.backward_base), m.in_bytes + m.backward_workspace, p0,
                                    two && p0 > 1 ? &b1 : nullptr));
  }
}

std::vector<size_t> MemoptPredictor::members(const PieceChain& ch) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < refs_.size(); ++i)
    if (refs_[i].unit >= static_cast<int>(ch.begin) && refs_[i].unit < static_cast<int>(ch.end)) out.push_back(i);
  std::sort(out.begin(), out.end(), [&](size_t a, size_t b) { return m_.segs[a].order < m_.segs[b].order; });
  return out;
}

void MemoptPredictor::chain_forward_peaks(const PieceChain& ch, std::vector<double>& forward) const {
  const std::vector<size_t> links = members(ch);
  if (links.empty() || !ch.forward_in_pieces) return;
  const size_t first = links.front(), last = links.back();
  const double P = ch.pieces;
  // The chain's input (in the base of its first forward) and output whole; one piece of every
  // link's input and transient (its output included).
  const double base = static_cast<double>(m_.segs[first].forward_base) + m_.segs[last].out_bytes;
  for (size_t i : links) {
    const double whole = forward_[i].fixed + forward_[i].per_piece, ws = m_.segs[i].forward_workspace;
    const double own = std::max(0.0, whole - ws) + (i == first ? 0.0 : m_.segs[i].in_bytes);
    forward[i] = base + ws + own / P;
  }
}

void MemoptPredictor::chain_backward_peaks(const PieceChain& ch, std::vector<double>& backward) const {
  const std::vector<size_t> links = members(ch);
  if (links.empty()) return;
  const size_t first = links.front(), top = links.back();
  const double P = ch.pieces;
  // The chain's dy (in the base of its top's backward) and input gradient whole; one piece of
  // dy's rows, of every link's transient and of what the links below it recomputed.
  const double base = static_cast<double>(m_.segs[top].backward_base) + m_.segs[first].in_bytes +
                      static_cast<double>(m_.segs[top].out_bytes) / P;
  double below = 0;
  for (size_t i : links) {
    const double whole = backward_[i].fixed + backward_[i].per_piece, ws = m_.segs[i].backward_workspace;
    const double own = std::max(0.0, whole - ws - (i == first ? m_.segs[first].in_bytes : 0.0));
    backward[i] = base + ws + (own + below) / P;
    below += saved_[i];
  }
}

double MemoptPredictor::chain_ms(const PieceChain& ch) const {
  const std::vector<size_t> links = members(ch);
  double all = 0, ms = 0;
  for (size_t i : links) all += m_.segs[i].forward_ms;
  double above = all, below = 0;
  for (size_t i : links) {  // per batch norm: the chain recomputed, its backward down to it
    const double own = m_.segs[i].forward_ms;
    above -= own;
    ms += batch_norms_[i] * (all + 2.0 * above + (kBackwardSplitForwards - 1.0) * own);
    // in forward, a moments pass through the links up to it
    if (ch.forward_in_pieces) ms += batch_norms_[i] * (below + (kSplitForwards - kBackwardSplitForwards) * own);
    below += own;
  }
  return ms;
}

const MemoptSegment* MemoptPredictor::in(const MemoptConfig& c, size_t i) const {
  const SegmentRef& r = refs_[i];
  if (r.unit < 0 || r.unit >= static_cast<int>(c.units.size()) || r.segment >= c.units[r.unit].size()) return nullptr;
  return &c.units[r.unit][r.segment];
}

double MemoptPredictor::keep_whole_bytes(size_t i) const {
  return inflight_ * std::max(0.0, saved_[i] - kept_[i]);
}

std::vector<double> MemoptPredictor::segment_peaks(const MemoptConfig& c) const {
  const size_t n = m_.segs.size();
  std::vector<double> peak(n, 0.0), shift(n, 0.0), forward(n, -1.0), backward(n, -1.0);  // -1: not chained
  for (const PieceChain& ch : c.chains) chain_forward_peaks(ch, forward), chain_backward_peaks(ch, backward);
  for (size_t i = 0; i < n; ++i) {
    const SegmentMeasure& m = m_.segs[i];
    const auto membrane_bytes = [&](const MemoptSegment* g) {
      return g && g->checkpoint && g->pieces > 1 && g->axis == SplitAxis::Time
                 ? inflight_ * (g->pieces - 1) * saved_[i] / steps_
                 : 0.0;
    };
    const MemoptSegment* was = in(config_, i);
    const MemoptSegment* now = in(c, i);
    const double f1 = forward_pieces_of(now), p1 = pieces_of(now);
    peak[i] = std::max(forward[i] >= 0 ? forward[i]
                                       : static_cast<double>(m.forward_base) + forward_[i].fixed +
                                             forward_[i].per_piece / f1,
                       backward[i] >= 0 ? backward[i]
                                        : static_cast<double>(m.backward_base) + backward_[i].fixed +
                                              backward_[i].per_piece / p1);
    // Kept whole now but checkpointed when measured (or the reverse): later segments see it;
    // so they see the membranes kept at time-piece starts (and so does its own backward).
    const bool ck0 = was && was->checkpoint, ck1 = now && now->checkpoint;
    const double later = (ck0 != ck1 ? (ck0 ? 1.0 : -1.0) * keep_whole_bytes(i) : 0.0) +
                         membrane_bytes(now) - membrane_bytes(was);
    peak[i] += std::max(0.0, membrane_bytes(now) - membrane_bytes(was));
    if (later != 0.0)
      for (size_t j = 0; j < n; ++j)
        if (m_.segs[j].order > m.order) shift[j] += later;
  }
  for (size_t i = 0; i < n; ++i) peak[i] = std::max(0.0, peak[i] + shift[i]);
  return peak;
}

double MemoptPredictor::peak(const MemoptConfig& c) const {
  double p = 0;
  for (double v : segment_peaks(c)) p = std::max(p, v);
  return p;
}

double MemoptPredictor::extra_ms(const MemoptConfig& c) const {
  double ms = 0;
  for (size_t i = 0; i < m_.segs.size(); ++i) {
    const MemoptSegment* was = in(config_, i);
    const MemoptSegment* now = in(c, i);
    const bool ck0 = was && was->checkpoint, ck1 = now && now->checkpoint;
    const double fwd = m_.segs[i].forward_ms;
    if (ck1 && !ck0) ms += fwd;  // a recompute more
    if (ck0 && !ck1) ms -= fwd;
    const size_t k = static_cast<size_t>(std::max(refs_[i].unit, 0));
    ms += batch_norms_[i] * (split_forwards(now, c.chain_of(k)) - split_forwards(was, config_.chain_of(k))) * fwd;
  }
  for (const PieceChain& ch : c.chains) ms += chain_ms(ch);
  for (const PieceChain& ch : config_.chains) ms -= chain_ms(ch);
  return ms;
}

}  // namespace sm
