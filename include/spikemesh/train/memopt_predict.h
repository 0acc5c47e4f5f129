// memopt_predict.h — the peak and the extra time of a memopt configuration, predicted from one
// measured step (docs/architecture.md §4a): what the search of train/memopt_search.h chooses
// from before it tries anything.
//
// A measured step gives, per segment of the stage, the bytes alive when its forward and its
// backward began, the peaks during them, the sizes of its input and output, what its checkpoint
// dropped (saved) and kept, and its forward time. From these:
//  pieces        a segment's transient above its base is fixed + per_piece / pieces: from one
//                step, the tensor that stays whole (its output in forward, its input gradient
//                in backward) and its kernels' largest workspace are fixed and the rest scales; from a step in pieces and the
//                level-1 step, the line through both (workspaces that do not shrink);
//  checkpoint    a segment kept whole (un-checkpointed) keeps its saved bytes instead of its
//                kept bytes from its forward to its backward: every segment after it in forward
//                order sees them in both its forward and its backward (× the microbatches in
//                flight under a pipeline); one checkpointed again gives them back; a segment
//                in P time pieces keeps its neurons' membranes at P - 1 piece starts, about
//                (P - 1) / T of its saved bytes, as long (its own backward included);
//                a segment whose backward alone runs in pieces keeps its forward transient;
//  time          un-checkpointing saves the segment's recompute (its forward); splitting costs
//                about 3.5 of the segment's forwards per batch norm (measured: a partial forward
//                per batch norm in forward, a recompute and partial backward per batch norm in
//                backward, and what running in pieces adds), pieces in backward only about 1.4.
//  chains        (models/piece_chain.h) a chain's links see in forward (in pieces) the base of
//                its first's forward, the chain's output whole and one piece of their input and
//                transient; in backward the base of its top's
//                backward, the chain's input gradient whole, and one piece of dy's rows, of
//                their own transient (their input gradient included) and of what the links
//                below them recomputed; time: per batch norm, a recompute of the chain and a
//                backward from its top down to that batch norm (≈ 2 forwards per segment above
//                it, 0.4 of its own), and in forward per batch norm a moments pass through the
//                links up to it. A link measured inside a chain is predicted from level 1.
// `saved` and `kept` of a segment come from the step where it was checkpointed (level 1), so
// one level-1 measurement predicts every configuration.
// Invariant: a prediction never changes the layout; it is a pure function of its inputs.
#pragma once
#include <cstddef>
#include <vector>

#include "spikemesh/layers/memopt_probe.h"
#include "spikemesh/models/memopt_plan.h"

namespace sm {

class Stage;

// One measured step: this stage's segments (maxima over the stage's dp and tp groups), the
// stage's peak and the world's, and its wall time.
struct MemoptTrial {
  double stage_peak = 0, world_peak = 0, ms = 0;  // bytes, bytes, ms
  std::vector<SegmentMeasure> segs;               // forward order
};

// A region's transient bytes above its base in P pieces: fixed + per_piece / P.
struct PieceModel {
  double fixed = 0, per_piece = 0;
};

// The local index of `unit` in `stage` (-1: not one of its units).
int unit_index(Stage& stage, const Sequential* unit);

// Where a segment is: unit k of the stage, segment s of that unit.
struct SegmentRef {
  int unit = -1;
  size_t segment = 0;
};

// The measurements a prediction starts from.
class MemoptPredictor {
 public:
  // `measured`: a step under `config`; `level1`: a step where every segment memopt may touch
  // was checkpointed (saved/kept; may be `measured` itself). `inflight`: microbatches whose
  // activations are alive at once (pipelines), else 1.
  MemoptPredictor(Stage& stage, const MemoptTrial& measured, const MemoptConfig& config, const MemoptTrial& level1,
                  double inflight, double steps);
  // Predicted stage peak in bytes of `c` (the same segments as `config`).
  double peak(const MemoptConfig& c) const;
  // Per measured segment (forward order), its predicted peak under `c` (bytes).
  std::vector<double> segment_peaks(const MemoptConfig& c) const;
  // Predicted extra milliseconds of `c` over `config`, and its step time.
  double extra_ms(const MemoptConfig& c) const;
  double step_ms(const MemoptConfig& c) const { return m_.ms + extra_ms(c); }
  const SegmentMeasure& measure(size_t i) const { return m_.segs[i]; }
  // What keeping segment i (forward order) whole adds to every later segment (bytes).
  double keep_whole_bytes(size_t i) const;
  double forward_ms(size_t i) const { return m_.segs[i].forward_ms; }
  size_t size() const { return m_.segs.size(); }
  SegmentRef ref(size_t i) const { return refs_[i]; }

 private:
  const MemoptSegment* in(const MemoptConfig& c, size_t i) const;
  std::vector<size_t> members(const PieceChain& ch) const;  // its measured segments, forward order
  // The forward / backward peaks of a chain's segments (into `forward` / `backward`, by
  // measured index), its extra ms.
  void chain_forward_peaks(const PieceChain& ch, std::vector<double>& forward) const;
  void chain_backward_peaks(const PieceChain& ch, std::vector<double>& backward) const;
  double chain_ms(const PieceChain& ch) const;
  MemoptTrial m_;  // the measured step (a chain's links and what it did not measure: level 1's)
  const MemoptConfig& config_;
  std::vector<SegmentRef> refs_;      // per measured segment
  std::vector<double> saved_, kept_;  // per measured segment, from the level-1 step
  std::vector<int> batch_norms_;      // per measured segment
  std::vector<PieceModel> forward_, backward_;  // per measured segment
  double inflight_ = 1;
  double steps_ = 1;  // T of the measured batch
};

}  // namespace sm
