// memopt_segment.h — memopt's unit of work inside a Sequential (a model unit): a contiguous
// range of its children, and what memopt does with it (docs/architecture.md §4a).
//
//  checkpoint   forward keeps only the segment's input (as bits when it is a spike tensor and
//               `compress`; anything else by reference) and drops everything its layers saved;
//               backward recomputes the forward from that input (ctx.recompute: batch norm
//               repeats the kept batch statistics and leaves its running statistics alone,
//               neurons restart at rest and leave their firing statistics alone, dropout draws
//               the same masks) and then runs the layers' backward as usual.
//  time_chunks  (checkpointed segments) the recompute and backward run over T in that many
//               chunks, last chunk first: neuron membranes are carried forward from the kept
//               chunk-start states and their gradients carried backward, batch norm uses the
//               kept statistics and two passes (the first only sums what its backward needs),
//               so only one chunk's activations are alive at a time. Exactly the same spikes
//               and, up to summation order, the same gradients as one pass over T.
//  batch_pieces (checkpointed segments) the same over the samples of the microbatch.
//
// Segments come from natural_segments(): a cut after every child whose output is a spike
// tensor (so checkpointed inputs compress to bits) or that is a composite (a residual block),
// trailing spike-preserving children (pooling, flatten) staying with the segment before them.
// Invariant: the segments of a Sequential cover its children in order, without gaps.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace sm {

class Sequential;

struct MemoptSegment {
  size_t begin = 0, end = 0;  // children [begin, end)
  bool checkpoint = false;
  bool compress = true;       // keep a binary input as bits
  int time_chunks = 1;        // >= 1; > 1 only when checkpointed
  int batch_pieces = 1;       // >= 1; > 1 only when checkpointed
  // "none", "ckpt", "ckpt+bits", "ckpt t/4", "ckpt n/2", ... (plan output)
  std::string describe() const;
};

// The segments memopt may checkpoint in `seq` (see the header).
std::vector<std::pair<size_t, size_t>> natural_segments(Sequential& seq);

}  // namespace sm
