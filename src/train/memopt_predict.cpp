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
// `chained`: a link of a piece chain, whose backward the chain's cost counts.
double split_forwards(const MemoptSegment* s, bool chained) {
  if (pieces_of(s) == 1) return 0.0;
  if (chained) return kSplitForwards - kBackwardSplitForwards;  // pieces in forward
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

}  // namespace

MemoptPredictor::MemoptPredictor(Stage& stage, const MemoptTrial& measured, const MemoptConfig& config,
                                 const MemoptTrial& level1, double inflight, double steps)
    : m_(measured), config_(config), inflight_(inflight), steps_(std::max(1.0, steps)) {
  for (const SegmentMeasure& m : m_.segs) {
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
    const double f0 = forward_pieces_of(s), p0 = pieces_of(s);
    const double f1 = l1 ? transient(l1->forward_peak, l1->forward_base) : 0.0;
    const double b1 = l1 ? transient(l1->backward_peak, l1->backward_base) : 0.0;
    const bool two = l1 && &level1 != &measured;
    forward_.push_back(piece_model(transient(m.forward_peak, m.forward_base), m.out_bytes + m.forward_workspace, f0,
                                   two && f0 > 1 ? &f1 : nullptr));
    // A unit of a chain when measured: its own backward was not (the chain's was): level 1's.
    const bool chained = r.unit >= 0 && config.chain_of(static_cast<size_t>(r.unit)) && l1;
    const SegmentMeasure& b = chained ? *l1 : m;
    backward_.push_back(piece_model(transient(b.backward_peak, b.backward_base), b.in_bytes + b.backward_workspace,
                                    chained ? 1.0 : p0, two && p0 > 1 && !chained ? &b1 : nullptr));
    backward_workspace_.push_back(static_cast<double>(b.backward_workspace));
  }
}

std::vector<size_t> MemoptPredictor::members(const PieceChain& ch) const {
  std::vector<size_t> out;
  for (size_t i = 0; i < refs_.size(); ++i)
    if (refs_[i].unit >= static_cast<int>(ch.begin) && refs_[i].unit < static_cast<int>(ch.end)) out.push_back(i);
  std::sort(out.begin(), out.end(), [&](size_t a, size_t b) { return m_.segs[a].order < m_.segs[b].order; });
  return out;
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
    const double whole = backward_[i].fixed + backward_[i].per_piece, ws = backward_workspace_[i];
    const double own = std::max(0.0, whole - ws - (i == first ? m_.segs[first].in_bytes : 0.0));
    backward[i] = base + ws + (own + below) / P;
    below += saved_[i];
  }
}

double MemoptPredictor::chain_ms(const PieceChain& ch) const {
  const std::vector<size_t> links = members(ch);
  double all = 0, ms = 0;
  for (size_t i : links) all += m_.segs[i].forward_ms;
  double above = all;
  for (size_t i : links) {  // per batch norm: the chain recomputed, its backward down to it
    above -= m_.segs[i].forward_ms;
    ms += batch_norms_[i] * (all + 2.0 * above + (kBackwardSplitForwards - 1.0) * m_.segs[i].forward_ms);
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
  std::vector<double> peak(n, 0.0), shift(n, 0.0), backward(n, -1.0);  // -1: not in a chain
  for (const PieceChain& ch : c.chains) chain_backward_peaks(ch, backward);
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
    peak[i] = std::max(static_cast<double>(m.forward_base) + forward_[i].fixed + forward_[i].per_piece / f1,
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
