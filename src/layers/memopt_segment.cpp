// memopt_segment.cpp — checkpointed segments of a Sequential (layers/memopt_segment.h): what a
// checkpointed forward keeps, its recompute in backward, and the passes of a segment split
// into pieces along time or samples.
#include "spikemesh/layers/memopt_segment.h"

#include <sstream>

#include <algorithm>

#include "spikemesh/core/allocator.h"
#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/error.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/memopt_probe.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/sequential.h"
#include "spikemesh/layers/slot_store.h"
#ifdef SPIKEMESH_HAVE_CUDA
#include "layer_util_cuda.h"
#endif

namespace sm {

std::string MemoptSegment::describe() const {
  if (!checkpoint) return "none";
  std::ostringstream os;
  os << "ckpt" << (compress ? "+bits" : "");
  if (pieces > 1) os << (axis == SplitAxis::Time ? " t/" : " n/") << pieces << (forward_in_pieces ? "" : " bwd");
  return os.str();
}

std::vector<std::pair<size_t, size_t>> natural_segments(Sequential& seq) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  for (size_t i = 0; i < seq.size(); ++i) {
    Layer& l = seq.at(i);
    const bool cut = l.emits_spikes() || !l.children().empty();
    const bool next_joins = i + 1 < seq.size() && seq.at(i + 1).preserves_spikes() && seq.at(i + 1).children().empty();
    if (cut && !next_joins) {
      out.emplace_back(begin, i + 1);
      begin = i + 1;
    }
  }
  if (begin < seq.size()) out.emplace_back(begin, seq.size());
  return out;
}

namespace {
// A child that may run in sample pieces: a leaf, or a Sequential / Residual of such children.
bool sample_splittable(Layer& l) {
  if (l.children().empty()) return true;
  if (!dynamic_cast<Sequential*>(&l)) return false;  // other composites (graphs) run whole
  for (Layer* c : l.children())
    if (!sample_splittable(*c)) return false;
  return true;
}
}  // namespace

bool splittable(Sequential& seq, size_t begin, size_t end, SplitAxis axis) {
  for (size_t i = begin; i < end; ++i) {
    Layer& l = seq.at(i);
    if (axis == SplitAxis::Time ? !l.children().empty() : !sample_splittable(l)) return false;
  }
  return true;
}

namespace {

// The probe's record of a segment's input and output sizes.
void note_sizes(ProbeRegion& region, const Tensor& x, const Tensor& y) {
  if (SegmentMeasure* m = region.measure()) {
    m->in_bytes = std::max(m->in_bytes, x.defined() ? x.nbytes() : size_t{0});
    m->out_bytes = std::max(m->out_bytes, y.defined() ? y.nbytes() : size_t{0});
  }
}

}  // namespace

int pieces_along(int64_t L, int pieces) { return static_cast<int>(std::min<int64_t>(pieces, std::max<int64_t>(L, 1))); }

std::pair<int64_t, int64_t> piece_range(int64_t L, int P, int i) { return {i * L / P, (i + 1) * L / P}; }

Tensor piece_of(const Tensor& full, SplitAxis axis, int64_t b, int64_t e) {
  if (axis == SplitAxis::Time) return full.slice0(b, e);
  Shape ps = full.shape();
  const int64_t T = ps[0], N = ps[1];
  ps[1] = e - b;
  Tensor out = Tensor::empty(ps, full.dtype(), full.device());  // [T, e-b, ...]
  const int64_t per = N > 0 ? full.numel() / (T * N) : 0;
  const Tensor rows = full.view({T * N, per}), orows = out.view({T * (e - b), per});
  for (int64_t t = 0; t < T; ++t) orows.slice0(t * (e - b), (t + 1) * (e - b)).copy_from(rows.slice0(t * N + b, t * N + e));
  out.set_binary(full.is_binary());
  return out;
}

void put_piece(Tensor& full, const Tensor& piece, SplitAxis axis, int64_t b, int64_t e, int64_t L) {
  if (!full.defined()) {
    Shape s = piece.shape();
    s[axis == SplitAxis::Time ? 0 : 1] = L;
    full = Tensor::empty(s, piece.dtype(), piece.device());  // [T, N, ...]
  }
  if (axis == SplitAxis::Time) {
    full.slice0(b, e).copy_from(piece);
    return;
  }
  const int64_t T = full.dim(0), N = full.dim(1), n = e - b;
  const int64_t per = N > 0 ? full.numel() / (T * N) : 0;
  const Tensor rows = full.view({T * N, per}), prows = piece.view({T * n, per});
  for (int64_t t = 0; t < T; ++t) rows.slice0(t * N + b, t * N + e).copy_from(prows.slice0(t * n, (t + 1) * n));
}

// ---- what a checkpointed segment keeps of its input ------------------------------------------

Sequential::KeptInput Sequential::KeptInput::keep(const Tensor& x, bool compress) {
  KeptInput k;
  k.shape = x.shape();
  k.dtype = x.dtype();
  k.binary = x.is_binary();
  if (!compress || !x.is_binary()) {
    k.kept = x;  // by reference (layers never write their inputs)
    return k;
  }
#ifdef SPIKEMESH_HAVE_CUDA
  if (x.device().is_cuda()) {
    k.device_bits = std::make_shared<cuda_layer::DeviceSaved>(cuda_layer::DeviceSaved::save(x));
    return k;
  }
#endif
  k.host_bits = SavedActivation::save(x);
  return k;
}

Tensor Sequential::KeptInput::restore() const {
#ifdef SPIKEMESH_HAVE_CUDA
  if (device_bits) return static_cast<const cuda_layer::DeviceSaved*>(device_bits.get())->restore();
#endif
  Tensor x = host_bits.defined() ? host_bits.restore() : kept;
  SM_CHECK(x.defined(), "memopt: a checkpointed segment has no kept input (backward before forward?)");
  x.set_binary(binary);
  return x;
}

Tensor Sequential::KeptInput::restore_piece(SplitAxis axis, int64_t b, int64_t e) const {
  if (!host_bits.defined()) return piece_of(restore(), axis, b, e);  // by reference, or device bits
  const int64_t T = shape[0], N = shape[1], per = N > 0 ? shape_numel(shape) / (T * N) : 0;
  Shape ps = shape;
  if (axis == SplitAxis::Time) {
    ps[0] = e - b;
    Tensor x = host_bits.restore_range(b * N * per, (e - b) * N * per).view(ps);
    return x.set_binary(binary);
  }
  ps[1] = e - b;
  Tensor x = Tensor::empty(ps, dtype);  // [T, e-b, ...]
  const Tensor rows = x.view({T * (e - b) * per});
  for (int64_t t = 0; t < T; ++t)
    rows.slice0(t * (e - b) * per, (t + 1) * (e - b) * per).copy_from(host_bits.restore_range((t * N + b) * per, (e - b) * per));
  return x.set_binary(binary);
}

// ---- forward and backward of one segment ------------------------------------------------------

size_t Sequential::KeptInput::bytes() const {
  if (host_bits.defined()) return host_bits.bytes();
  if (device_bits) return static_cast<size_t>((shape_numel(shape) + 7) / 8);
  return kept.defined() ? kept.nbytes() : 0;
}

Tensor Sequential::segment_forward(const MemoptSegment& seg, size_t index, const Tensor& x, Ctx& ctx) {
  Tensor h = x;  // [T, N, ...]
  ProbeRegion region(this, index, true, x.device());  // memopt's search (no probe: nothing)
  if (!seg.checkpoint || !ctx.training) {
    h = forward_children(seg.begin, seg.end, h, ctx);
    note_sizes(region, x, h);
    return h;
  }
  KeptSegment& kept = memopt_state().kept(ctx.slot, segments_.size())[index];
  kept = KeptSegment();
  kept.input = KeptInput::keep(x, seg.compress);
  Ctx c = ctx;
  c.checkpointed = true;
  size_t dropped = 0;  // bytes the layers saved and the checkpoint released
  if (seg.pieces > 1 && seg.forward_in_pieces) {
    h = split_forward(seg, kept, x, c, &dropped);
  } else {
    SlotCapture capture;
    h = forward_children(seg.begin, seg.end, h, c);
    const size_t before = region.current_bytes();
    capture.release_all();  // what the layers saved: recomputed in backward
    dropped = before - std::min(before, region.current_bytes());
  }
  if (SegmentMeasure* m = region.measure()) {
    m->saved = std::max(m->saved, dropped);
    m->kept = std::max(m->kept, kept.input.bytes());
  }
  note_sizes(region, x, h);
  return h;  // [T, N, ...segment output]
}

Tensor Sequential::segment_backward(const MemoptSegment& seg, size_t index, const Tensor& dy, Ctx& ctx) {
  ProbeRegion region(this, index, false, dy.device());  // dy: [T, N, ...segment output]
  if (seg.checkpoint) {
    KeptSegment& kept = memopt_state().kept(ctx.slot, segments_.size())[index];
    if (seg.pieces > 1) {
      Tensor dx = split_backward(seg, kept, dy, ctx);
      kept = KeptSegment();
      return dx;
    }
    for (size_t i = seg.begin; i < seg.end; ++i) layers_[i]->reset_state();
    Ctx c = ctx;
    c.recompute = true;
    // The recompute only refills what the layers keep for backward; its output is dropped at once.
    forward_children(seg.begin, seg.end, kept.input.restore(), c);
    kept = KeptSegment();
  }
  return backward_children(seg.begin, seg.end, dy, ctx);  // [T, N, ...segment input]
}

// ---- a segment in pieces ------------------------------------------------------------------------

namespace {

template <class L>
void collect_leaves(Layer& l, std::vector<L*>& out) {
  if (auto* leaf = dynamic_cast<L*>(&l)) out.push_back(leaf);
  for (Layer* c : l.children()) collect_leaves(*c, out);
}

// Every layer of type L in children [begin, end), nested ones included, in forward order.
template <class L>
std::vector<L*> leaves_of(std::vector<LayerPtr>& layers, size_t begin, size_t end) {
  std::vector<L*> out;
  for (size_t i = begin; i < end; ++i) collect_leaves(*layers[i], out);
  return out;
}
template <class L>
std::vector<L*> leaves_of(std::vector<LayerPtr>& layers, const MemoptSegment& seg) {
  return leaves_of<L>(layers, seg.begin, seg.end);
}

}  // namespace

// Before piece p of a pass: neurons at rest (samples; the first time piece) or where the
// piece started in the real forward (later time pieces, kept then).
void Sequential::start_piece(const MemoptSegment& seg, const KeptSegment& kept, int p, Ctx& c, int64_t b) {
  const std::vector<Neuron*> neurons = leaves_of<Neuron>(layers_, seg);
  for (size_t j = 0; j < neurons.size(); ++j) {
    if (seg.axis == SplitAxis::Batch || p == 0 || kept.membranes.empty()) neurons[j]->set_membrane(Tensor());
    else neurons[j]->set_membrane(kept.membranes[p][j]);
  }
  if (seg.axis == SplitAxis::Batch) c.sample_offset += b;
}

Tensor Sequential::split_forward(const MemoptSegment& seg, KeptSegment& kept, const Tensor& x, const Ctx& ctx,
                                 size_t* dropped) {
  const int64_t L = seg.axis == SplitAxis::Time ? x.dim(0) : x.dim(1);
  const int P = pieces_along(L, seg.pieces);
  const std::vector<BatchNorm*> bns = leaves_of<BatchNorm>(layers_, seg);
  const std::vector<Neuron*> neurons = leaves_of<Neuron>(layers_, seg);
  Ctx c = ctx;
  c.bn_split = true;
  // One pass per batch norm: the pieces up to it add its input's moments (earlier ones
  // normalise with the statistics just finished); neurons carry their membranes over time pieces.
  for (BatchNorm* bn : bns) {
    Ctx cm = c;
    cm.recompute = true;
    cm.bn_moments_for = bn;
    for (Neuron* n : neurons) n->set_membrane(Tensor());
    for (int p = 0; p < P; ++p) {
      const auto [b, e] = piece_range(L, P, p);
      Ctx cp = cm;
      if (seg.axis == SplitAxis::Batch) {
        for (Neuron* n : neurons) n->set_membrane(Tensor());
        cp.sample_offset += b;
      }
      SlotCapture capture;
      Tensor h = piece_of(x, seg.axis, b, e);
      h = forward_children(seg.begin, seg.end, h, cp);  // undefined once the batch norm took its moments
      capture.release_all();
    }
    bn->finish_split_moments(cm);  // running statistics moved once (collective over ctx.bn_sync)
  }
  // The real pass: every piece once, its output written into the whole.
  Tensor y;
  bool binary = true;
  kept.membranes.assign(P, {});
  for (Neuron* n : neurons) n->set_membrane(Tensor());
  for (int p = 0; p < P; ++p) {
    const auto [b, e] = piece_range(L, P, p);
    Ctx cp = c;
    cp.accumulate_stats = p > 0;
    if (seg.axis == SplitAxis::Time) {
      for (Neuron* n : neurons) kept.membranes[p].push_back(n->membrane());
    } else {
      for (Neuron* n : neurons) n->set_membrane(Tensor());
      cp.sample_offset += b;
    }
    SlotCapture capture;
    Tensor h = piece_of(x, seg.axis, b, e);
    h = forward_children(seg.begin, seg.end, h, cp);
    const size_t before = allocator_for(x.device()).current_bytes();
    capture.release_all();
    *dropped += before - std::min(before, allocator_for(x.device()).current_bytes());
    put_piece(y, h, seg.axis, b, e, L);  // [T, N, ...segment output]
    binary = binary && h.is_binary();
  }
  y.set_binary(binary);
  return y;
}

// One backward pass over the pieces (last time piece first): recompute each, then backward
// until `stop_at` adds its sums (nullptr: to the input; the dx pieces are written into dx).
void Sequential::split_pass(const MemoptSegment& seg, const KeptSegment& kept, const Tensor& dy, const Ctx& c,
                            Tensor* dx) {
  const int64_t L = seg.axis == SplitAxis::Time ? dy.dim(0) : dy.dim(1);
  const int P = pieces_along(L, seg.pieces);
  for (Neuron* n : leaves_of<Neuron>(layers_, seg)) n->clear_time_grad();
  for (int q = 0; q < P; ++q) {
    const int p = seg.axis == SplitAxis::Time ? P - 1 - q : q;
    const auto [b, e] = piece_range(L, P, p);
    Ctx cp = c;
    start_piece(seg, kept, p, cp, b);
    SlotCapture capture;  // drops what B kept for a W that is not coming (the sums passes)
    forward_children(seg.begin, seg.end, kept.input.restore_piece(seg.axis, b, e), cp);  // refills; output dropped
    // A sample piece of dy is a copy of our own (written over in place); a time piece a view.
    cp.dy_owned = seg.axis == SplitAxis::Batch;
    Tensor g = backward_children(seg.begin, seg.end, piece_of(dy, seg.axis, b, e), cp);
    capture.release_all();
    SM_CHECK(!dx || g.defined() || cp.input_grad_unused, "memopt: a piece of '" << name_ << "' made no input gradient");
    // (undefined in a real pass: the model's input, ctx.input_grad_unused)
    if (dx && g.defined()) put_piece(*dx, g, seg.axis, b, e, L);  // [T, N, ...segment input]
  }
}

Tensor backward_in_pieces(const std::vector<BatchNorm*>& bns, const Ctx& c,
                          const std::function<void(const Ctx&, Tensor*)>& pass) {
  // One pass per batch norm, last first: the pieces add its Σdy, Σdy·(x-μ) (the later ones
  // already use their whole sums); B only, so no parameter gradient moves.
  for (size_t k = bns.size(); k-- > 0;) {
    Ctx cs = c;
    cs.split_wgrad = true;
    cs.bn_grad_sums_for = bns[k];
    pass(cs, nullptr);
    bns[k]->finish_split_grad_sums(cs);  // collective over ctx.bn_sync when synced
  }
  // The real pass: input and parameter gradients, W at once (a split B/W has nothing left for W).
  Ctx cf = c;
  cf.split_wgrad = false;
  Tensor dx;
  pass(cf, &dx);
  for (BatchNorm* bn : bns) bn->drop_split_state(c.slot);
  return dx;
}

Tensor Sequential::split_backward(const MemoptSegment& seg, KeptSegment& kept, const Tensor& dy, const Ctx& ctx) {
  Ctx c = ctx;
  c.recompute = true;
  c.bn_split = true;
  c.time_grad_carry = seg.axis == SplitAxis::Time;
  Tensor dx = backward_in_pieces(leaves_of<BatchNorm>(layers_, seg), c,
                                 [&](const Ctx& cp, Tensor* out) { split_pass(seg, kept, dy, cp, out); });
  for (Neuron* n : leaves_of<Neuron>(layers_, seg)) n->clear_time_grad();
  return dx;  // [T, N, ...segment input]
}

// ---- a link of a piece chain -------------------------------------------------------------------

Sequential::KeptSegment& Sequential::chain_input(int slot) {
  SM_CHECK(!segments_.empty() && segments_.front().checkpoint, "memopt chain: unit '" << name_ << "' keeps no input");
  return memopt_state().kept(slot, segments_.size())[0];
}

size_t Sequential::chain_keep_input(int slot, const Tensor& x) {
  KeptSegment& kept = chain_input(slot);
  kept = KeptSegment();
  kept.input = KeptInput::keep(x, segments_.front().compress);
  return kept.input.bytes();
}

Tensor Sequential::chain_input_piece(int slot, int64_t b, int64_t e) {
  return chain_input(slot).input.restore_piece(SplitAxis::Batch, b, e);
}

Tensor Sequential::chain_piece_forward(const Tensor& x, Ctx& ctx) {
  for (Neuron* n : leaves_of<Neuron>(layers_, 0, layers_.size())) n->set_membrane(Tensor());
  return forward_children(0, layers_.size(), x, ctx);  // [T, piece, ...unit output]
}

void Sequential::chain_release(int slot) {
  for (KeptSegment& k : memopt_state().kept(slot, segments_.size())) k = KeptSegment();
}

std::vector<BatchNorm*> Sequential::batch_norms() { return leaves_of<BatchNorm>(layers_, 0, layers_.size()); }

void Sequential::backward_weight_cpu(Ctx& ctx) {
  if (segments_.empty()) return Layer::backward_weight_cpu(ctx);
  for (size_t s = segments_.size(); s-- > 0;) {
    const MemoptSegment& seg = segments_[s];
    if (seg.checkpoint && seg.pieces > 1) continue;  // its B accumulated the weight gradients
    for (size_t i = seg.end; i-- > seg.begin;) layers_[i]->backward_weight(ctx);
  }
}

std::vector<Sequential::KeptSegment>& Sequential::MemoptState::kept(int slot, size_t segments) {
  if (slot >= static_cast<int>(by_slot.size())) by_slot.resize(slot + 1);
  std::vector<KeptSegment>& v = by_slot[slot];
  if (v.size() != segments) v.resize(segments);
  return v;
}

Sequential::MemoptState& Sequential::memopt_state() {
  if (!memopt_state_) memopt_state_ = std::make_shared<MemoptState>();
  return *memopt_state_;
}

void Sequential::set_memopt(std::vector<MemoptSegment> segments) {
  size_t next = 0;
  for (const MemoptSegment& s : segments) {
    SM_CHECK(s.begin == next && s.end > s.begin && s.end <= layers_.size(),
             "memopt segments of '" << name_ << "' must cover its " << layers_.size() << " children in order");
    SM_CHECK(s.pieces >= 1 && (s.pieces == 1 || (s.checkpoint && splittable(*this, s.begin, s.end, s.axis))),
             "memopt segment [" << s.begin << ", " << s.end << ") of '" << name_
                                << "': pieces need a checkpointed segment of leaf layers");
    SM_CHECK(s.forward_in_pieces || s.axis == SplitAxis::Batch,
             "memopt segment [" << s.begin << ", " << s.end << ") of '" << name_
                                << "': pieces in backward only are sample pieces");
    next = s.end;
  }
  SM_CHECK(segments.empty() || next == layers_.size(),
           "memopt segments of '" << name_ << "' must cover its " << layers_.size() << " children");
  segments_ = std::move(segments);
  memopt_state_.reset();
}

}  // namespace sm
