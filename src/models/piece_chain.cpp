// piece_chain.cpp — the backward of a memopt piece chain: consecutive units run over sample
// pieces together (models/piece_chain.h).
#include "spikemesh/models/piece_chain.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "spikemesh/core/allocator.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/memopt_probe.h"
#include "spikemesh/layers/slot_store.h"
#include "spikemesh/models/stage.h"

namespace sm {

std::string PieceChain::describe(Stage& stage) const {
  std::ostringstream os;
  const auto name = [&](size_t k) {
    return stage.unit(k).name().empty() ? "unit " + std::to_string(stage.global_index(k)) : stage.unit(k).name();
  };
  os << "chain n/" << pieces << (forward_in_pieces ? "" : " bwd") << " [" << name(begin) << ".." << name(end - 1) << "]";
  return os.str();
}

const PieceChain* chain_containing(const std::vector<PieceChain>& chains, size_t k) {
  for (const PieceChain& ch : chains)
    if (ch.begin <= k && k < ch.end) return &ch;
  return nullptr;
}

bool chain_link(const MemoptSegment& s) {
  return s.checkpoint && (s.pieces == 1 || (s.axis == SplitAxis::Batch && s.forward_in_pieces));
}

std::string piece_chain_problem(Stage& stage, const PieceChain& ch) {
  if (ch.end > stage.size() || ch.begin + 2 > ch.end) return "a chain needs two or more units of the stage";
  if (ch.pieces < 2) return "a chain runs in two or more pieces";
  bool one_chunk = false;
  for (size_t c = 0; c < stage.chunks(); ++c) {
    const auto [b, e] = stage.chunk_local(c);
    one_chunk = one_chunk || (b <= ch.begin && ch.end <= e);
  }
  if (!one_chunk) return "its units are not in one chunk of the stage";
  for (size_t k = ch.begin; k < ch.end; ++k) {
    Unit& u = stage.unit(k);
    if (u.memopt().empty()) return "unit " + std::to_string(k) + " is not checkpointed";
    for (const MemoptSegment& s : u.memopt())
      if (!chain_link(s)) return "unit " + std::to_string(k) + " has a segment not checkpointed, or in pieces in backward";
    if (!splittable(u, 0, u.size(), SplitAxis::Batch)) return "unit " + std::to_string(k) + " cannot run in sample pieces";
  }
  return "";
}

namespace {

// One pass over the pieces: each recomputed from the chain's input through every unit, then its
// rows of dy back until a batch norm's sums pass stops it (nullptr: to the input; the pieces of
// the input gradient are written into *dx).
void chain_pass(Stage& stage, const PieceChain& ch, const Tensor& dy, const Ctx& c, Tensor* dx) {
  const int64_t N = dy.dim(1);
  const int P = pieces_along(N, ch.pieces);
  for (int p = 0; p < P; ++p) {
    const auto [b, e] = piece_range(N, P, p);
    Ctx cp = c;
    cp.sample_offset += b;  // dropout masks by global sample index
    SlotCapture capture;    // what the layers kept for this piece (and B's kept dy in a sums pass)
    Tensor h = stage.unit(ch.begin).chain_input_piece(c.slot, b, e);  // [T, e-b, ...chain input]
    for (size_t k = ch.begin; k < ch.end; ++k) h = stage.unit(k).chain_piece_forward(h, cp);
    h = Tensor();
    cp.dy_owned = true;  // a copy of dy's rows: ours
    Tensor g = piece_of(dy, SplitAxis::Batch, b, e);  // [T, e-b, ...chain output]
    for (size_t k = ch.end; k-- > ch.begin && g.defined();) {
      cp.input_grad_unused = c.input_grad_unused && k == ch.begin;  // the model's input: no gradient
      g = stage.unit(k).chain_backward(g, cp);
    }
    capture.release_all();
    SM_CHECK(!dx || g.defined() || c.input_grad_unused, "memopt chain: a piece made no input gradient");
    if (dx && g.defined()) put_piece(*dx, g, SplitAxis::Batch, b, e, N);  // [T, N, ...chain input]
  }
}

// Every batch norm of the chain, forward order.
std::vector<BatchNorm*> batch_norms_of(Stage& stage, const PieceChain& ch) {
  std::vector<BatchNorm*> bns;
  for (size_t k = ch.begin; k < ch.end; ++k)
    for (BatchNorm* bn : stage.unit(k).batch_norms()) bns.push_back(bn);
  return bns;
}

// One forward pass over the pieces of x through the chain; an undefined tensor (a moments pass's
// batch norm took its moments) stops a piece. `y`: the pieces' outputs written into it (nullptr:
// none kept); `dropped`: the bytes the layers saved and the pass released.
void forward_pass(Stage& stage, const PieceChain& ch, const Tensor& x, const Ctx& c, Tensor* y, size_t* dropped) {
  const int64_t N = x.dim(1);
  const int P = pieces_along(N, ch.pieces);
  bool binary = true;
  for (int p = 0; p < P; ++p) {
    const auto [b, e] = piece_range(N, P, p);
    Ctx cp = c;
    cp.sample_offset += b;             // dropout masks by global sample index
    cp.accumulate_stats = y && p > 0;  // firing statistics over the whole batch
    SlotCapture capture;
    Tensor h = piece_of(x, SplitAxis::Batch, b, e);  // [T, e-b, ...chain input]
    for (size_t k = ch.begin; k < ch.end && h.defined(); ++k) h = stage.unit(k).chain_piece_forward(h, cp);
    const size_t before = allocator_for(x.device()).current_bytes();
    capture.release_all();  // recomputed in backward
    if (dropped) *dropped += before - std::min(before, allocator_for(x.device()).current_bytes());
    if (!y) continue;
    put_piece(*y, h, SplitAxis::Batch, b, e, N);  // [T, N, ...chain output]
    binary = binary && h.is_binary();
  }
  if (y) y->set_binary(binary);
}

}  // namespace

Tensor piece_chain_forward(Stage& stage, const PieceChain& ch, const Tensor& x, Ctx& ctx, UnitHooks* hooks) {
  if (hooks)
    for (size_t k = ch.begin; k < ch.end; ++k) hooks->before_forward(k, ctx.training);
  Unit& first = stage.unit(ch.begin);
  ProbeRegion region(&first, 0, true, x.device());  // measured as its first segment's (after the hooks, as a unit's)
  const size_t kept = first.chain_keep_input(ctx.slot, x);
  Ctx c = ctx;
  c.checkpointed = true;
  c.bn_split = true;
  // One pass per batch norm: the pieces up to it add its input's moments (earlier ones
  // normalise with the statistics just finished).
  for (BatchNorm* bn : batch_norms_of(stage, ch)) {
    Ctx cm = c;
    cm.recompute = true;
    cm.bn_moments_for = bn;
    forward_pass(stage, ch, x, cm, nullptr, nullptr);
    bn->finish_split_moments(cm);  // running statistics moved once (collective over ctx.bn_sync)
  }
  Tensor y;
  size_t dropped = 0;
  forward_pass(stage, ch, x, c, &y, &dropped);
  if (SegmentMeasure* m = region.measure()) {
    m->saved = std::max(m->saved, dropped);
    m->kept = std::max(m->kept, kept);
    m->in_bytes = std::max(m->in_bytes, x.nbytes());
    m->out_bytes = std::max(m->out_bytes, y.nbytes());
  }
  if (hooks)
    for (size_t k = ch.begin; k < ch.end; ++k) hooks->after_forward(k, ctx.training);
  return y;  // [T, N, ...chain output]
}

Tensor piece_chain_backward(Stage& stage, const PieceChain& ch, const Tensor& dy, Ctx& ctx, UnitHooks* hooks) {
  if (hooks)
    for (size_t k = ch.end; k-- > ch.begin;) hooks->before_backward(k);
  Unit& last = stage.unit(ch.end - 1);
  ProbeRegion region(&last, last.memopt().size() - 1, false, dy.device());  // measured as its last segment's
  const std::vector<BatchNorm*> bns = batch_norms_of(stage, ch);
  Ctx c = ctx;
  c.recompute = true;
  c.bn_split = true;
  c.time_grad_carry = false;
  Tensor dx = backward_in_pieces(bns, c, [&](const Ctx& cp, Tensor* out) { chain_pass(stage, ch, dy, cp, out); });
  for (size_t k = ch.begin; k < ch.end; ++k) stage.unit(k).chain_release(ctx.slot);
  if (hooks && !ctx.split_wgrad)
    for (size_t k = ch.end; k-- > ch.begin;) hooks->after_backward(k);
  return dx;  // [T, N, ...chain input]
}

}  // namespace sm
