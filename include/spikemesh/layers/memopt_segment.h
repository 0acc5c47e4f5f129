// memopt_segment.h — memopt's unit of work inside a Sequential (a model unit): a contiguous
// range of its children, and what memopt does with it (docs/architecture.md §4a).
//
//  checkpoint   forward keeps only the segment's input (as bits when it is a spike tensor and
//               `compress`; anything else by reference) and drops everything its layers saved;
//               backward recomputes the forward from that input (ctx.recompute: batch norm
//               repeats the kept batch statistics and leaves its running statistics alone,
//               neurons restart at rest and leave their firing statistics alone, dropout draws
//               the same masks) and then runs the layers' backward as usual.
//  pieces       (checkpointed segments only) the segment runs as `pieces` pieces along `axis` —
//               the time steps (level 3; segments of leaf layers) or the samples (levels 2, 4;
//               leaves and Sequential / Residual blocks of them: samples are independent in
//               every layer, attention included, but batch norm) — so
//               that only one piece's activations are alive at a time, in forward and backward:
//               batch norm needs the whole segment's statistics and gradient sums, so it runs
//               extra passes over the pieces (forward: one per batch norm to add its moments,
//               then the real pass; backward: one per batch norm, last first, to add its
//               Σdy, Σdy·(x-μ), then the real pass); neurons carry their membrane across time
//               pieces (kept at each piece start) and their membrane gradient back across them
//               (last piece first); dropout draws each sample's mask by its global index. The
//               same spikes, statistics and (up to summation order) gradients as one pass; the
//               weight gradients of a split segment are accumulated in B (W has nothing left).
//  forward_in_pieces (sample pieces only) false: the forward runs whole, as a checkpointed segment
//               does (batch norm keeps the statistics it computed once), and only the backward
//               runs in pieces (its sums passes and the real pass) — a backward peak cut for
//               one recompute and one partial backward per batch norm, not a forward pass more.
// Segments come from natural_segments(): a cut after every child whose output is a spike
// tensor (so checkpointed inputs compress to bits) or that is a composite (a residual block),
// trailing spike-preserving children (pooling, flatten) staying with the segment before them.
// Invariant: the segments of a Sequential cover its children in order, without gaps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sm {

class BatchNorm;
class Sequential;
class Tensor;
struct Ctx;

enum class SplitAxis { Time, Batch };  // dim 0 (T) or dim 1 (N) of [T, N, ...]

struct MemoptSegment {
  size_t begin = 0, end = 0;  // children [begin, end)
  bool checkpoint = false;
  bool compress = true;       // keep a binary input as bits
  int pieces = 1;             // >= 1; > 1 only when checkpointed and splittable() along `axis`
  SplitAxis axis = SplitAxis::Time;
  bool forward_in_pieces = true;  // false: pieces in backward only (axis Batch)
  // "none", "ckpt", "ckpt+bits", "ckpt+bits t/4" (4 time pieces), "ckpt+bits n/2" (2 sample
  // pieces), "ckpt+bits n/2 bwd" (2 sample pieces in backward only)
  std::string describe() const;
};

// The segments memopt may checkpoint in `seq` (see the header).
std::vector<std::pair<size_t, size_t>> natural_segments(Sequential& seq);
// Whether children [begin, end) of `seq` may run in pieces along `axis`: time, all leaves;
// samples, leaves and Sequential / Residual composites of them (batch norms nested in a block
// get their moments and sums passes like direct children).
bool splittable(Sequential& seq, size_t begin, size_t end, SplitAxis axis);

// The pieces a dim of length L runs in: `pieces`, at most L (at least 1).
int pieces_along(int64_t L, int pieces);
// Piece i of P along a dim of length L: [i·L/P, (i+1)·L/P).
std::pair<int64_t, int64_t> piece_range(int64_t L, int P, int i);
// Rows [b, e) of `full` [T, N, ...] along the axis: a view (time) or a copy (samples).
Tensor piece_of(const Tensor& full, SplitAxis axis, int64_t b, int64_t e);
// Writes `piece` into rows [b, e) of `full` along the axis; an undefined `full` is first made
// as the piece's shape with L rows along the axis (the first piece of a pass).
void put_piece(Tensor& full, const Tensor& piece, SplitAxis axis, int64_t b, int64_t e, int64_t L);
// The backward of work in pieces (a segment's, a piece chain's): one pass per batch norm of
// `bns` (forward order), last first, in which the pieces only add its Σdy, Σdy·(x-μ) (B only,
// ctx.bn_grad_sums_for), then the real pass, which writes the input gradient; then the batch
// norms' split state is dropped. `pass(ctx, dx)` runs every piece once (dx nullptr: a sums
// pass). Collective over ctx.bn_sync for synced batch norms.
Tensor backward_in_pieces(const std::vector<BatchNorm*>& bns, const Ctx& c,
                          const std::function<void(const Ctx&, Tensor*)>& pass);

}  // namespace sm
