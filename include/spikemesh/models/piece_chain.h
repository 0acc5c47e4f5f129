// piece_chain.h — a memopt piece chain (docs/architecture.md §4a): consecutive units of one
// chunk of a stage whose backward runs over sample pieces TOGETHER, so the gradient between
// them is never whole — each piece's rows flow from the chain's last unit down to its first.
//
// Forward (`forward_in_pieces`, the default): the chain's input runs per sample piece through
// every unit of the chain, each piece's output rows written into the chain's whole output, so
// no activation between the units is whole either; batch norm's batch statistics come first,
// from one pass over the pieces per batch norm of the chain (each stopping at its batch norm,
// ctx.bn_moments_for), and are kept for the recomputes; only the chain's input is kept (as bits
// when binary). Without it, the units run as their segments say — every segment checkpointed
// (each keeps its input), whole or in sample pieces of its own — and only the backward is the
// chain's. Backward, when the loop reaches the chain's last
// unit: per piece of samples, the first unit's kept input rows are recomputed through every
// unit of the chain (ctx.recompute: the forward's batch statistics, neurons from rest), then
// the piece's rows of dy run back through the units to the chain's input; batch norm needs the
// whole batch's Σdy, Σdy·(x-μ), so a pass over the pieces first adds them for each batch norm
// of the chain, last first (each pass stops at its batch norm), then the real pass writes the
// pieces of the input gradient and accumulates the weight gradients at once (W of the chain's
// units has nothing left to do). The other units' kept inputs are dropped at the end.
// Peak: the chain's dy and input gradient whole, one piece of everything in between — instead
// of each boundary gradient whole. Cost: per batch norm a recompute of the chain and a partial
// backward from its top. The same spikes, statistics and (up to summation order) gradients as
// level 1.
// Invariants: a chain lies within one chunk, has at least two units, and every segment of its
// units is a chain link (below) and may run in sample pieces (layers/memopt_segment.h).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "spikemesh/layers/memopt_segment.h"

namespace sm {

class Stage;
class UnitHooks;
class Tensor;
struct Ctx;

struct PieceChain {
  size_t begin = 0, end = 0;  // local units [begin, end) of the stage
  int pieces = 2;             // sample pieces (at most the microbatch's samples are used)
  bool forward_in_pieces = true;  // false: the units' own forward, the chain's backward
  // "chain n/4 [features.1..features.3]"; "chain n/4 bwd [...]" (backward only)
  std::string describe(Stage& stage) const;
  bool operator==(const PieceChain& o) const {
    return begin == o.begin && end == o.end && pieces == o.pieces && forward_in_pieces == o.forward_in_pieces;
  }
};

// The chain of `chains` that unit k belongs to (nullptr: none).
const PieceChain* chain_containing(const std::vector<PieceChain>& chains, size_t k);

// A segment a chain may hold: checkpointed, in one piece or in sample pieces in forward.
bool chain_link(const MemoptSegment& s);

// Whether `ch` satisfies the invariants above on `stage` as its units are configured now
// (message: why not; empty when it does).
std::string piece_chain_problem(Stage& stage, const PieceChain& ch);

// The chain's forward in pieces (training, `forward_in_pieces`): x [T, N, ...input of unit
// begin] -> [T, N, ...output of unit end-1]. Fires the hooks' before_forward for every unit of
// the chain before and after_forward after. Collective like the units' own forward.
Tensor piece_chain_forward(Stage& stage, const PieceChain& ch, const Tensor& x, Ctx& ctx, UnitHooks* hooks);

// The chain's backward: dy [T, N, ...output of unit end-1] -> [T, N, ...input of unit begin].
// Fires the hooks' before_backward for every unit of the chain (last first) before, and their
// after_backward after (unless ctx.split_wgrad: then the stage's W loop does). Collective like
// the units' own backward (tp reductions, synced batch norm over ctx.bn_sync).
Tensor piece_chain_backward(Stage& stage, const PieceChain& ch, const Tensor& dy, Ctx& ctx, UnitHooks* hooks);

}  // namespace sm
