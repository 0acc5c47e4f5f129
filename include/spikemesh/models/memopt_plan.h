// memopt_plan.h — memopt's flags and what it decided for the units of a stage
// (docs/architecture.md §4a; docs/semantics.md §5). The mechanism — checkpointed segments of
// a unit, whole or in pieces — is layers/memopt_segment.h; the measured choices of levels 2-4
// and --memory-budget-mb are train/memopt_search.h. This file holds the pure parts: options,
// their validation, the level-1 configuration, splitting, applying a configuration to a stage
// and describing it.
//
// Levels: 0 none; 1 every natural segment of every unit checkpointed (inputs as bits with
// --memopt-compress-x, the default); 2, 3 level 1 with the peak segment split over samples,
// then time; 4 level 1, a split of the peak segment, then greedy un-checkpointing.
// Pipelines: memopt applies to the round(ratio x stages) logical stages with the largest
// activation memory (--pp-memopt-stage-budget-ratio, default 0.5); the others run level 0.
// Invariant: a MemoptConfig has one entry per local unit of the stage it was made for, each
// empty (none) or covering that unit's children.
#pragma once
#include <string>
#include <vector>

#include "spikemesh/layers/memopt_segment.h"
#include "spikemesh/models/piece_chain.h"

namespace sm {

class Stage;

struct MemoptOptions {
  int level = 0;                       // --memopt-level 0..4
  bool compress_x = true;              // --memopt-compress-x: keep binary checkpointed inputs as bits
  double memory_budget_mb = 0.0;       // --memory-budget-mb: stop at the first configuration under it (0: none)
  double max_slowdown = 1.2;           // --memopt-max-slowdown: level 4's step time bound, x level 0's
  double pp_stage_budget_ratio = 0.5;  // --pp-memopt-stage-budget-ratio in (0, 1]
  bool enabled() const { return level > 0 || memory_budget_mb > 0; }
};

// Input errors naming the flag: level outside 0..4 or not built (2, 3), ratio outside (0, 1],
// negative budget.
void validate_memopt_options(const MemoptOptions& o);

// Per local unit of a stage: its segments (empty: memopt off for that unit).
struct MemoptConfig {
  std::vector<std::vector<MemoptSegment>> units;
  std::vector<PieceChain> chains;  // units whose backward runs in sample pieces together
  // Whether any segment or chain runs in pieces.
  bool has_pieces() const;
  // The chain unit k belongs to (nullptr: none).
  const PieceChain* chain_of(size_t k) const;
};

// Every natural segment of every unit of `stage` (or of the units flagged in `include`, one
// flag per local unit) checkpointed; the other units off.
MemoptConfig checkpoint_all(Stage& stage, bool compress, const std::vector<bool>& include = {});
// `c` with every checkpointed segment that can run in pieces (all leaves) split into `pieces`
// along `axis` (pieces 1: unsplit); `forward_in_pieces` false: sample pieces in backward only.
MemoptConfig split_all(Stage& stage, MemoptConfig c, int pieces, SplitAxis axis, bool forward_in_pieces = true);
// `c` with every maximal run of two or more consecutive units of one chunk whose segments are
// all chain links and that can form a
// piece chain (models/piece_chain.h) chained in `pieces` sample pieces (tests, experiments).
MemoptConfig chain_all(Stage& stage, MemoptConfig c, int pieces, bool forward_in_pieces = true);
// Sets every unit's segments (and clears units without), then the stage's chains.
void apply_memopt(Stage& stage, const MemoptConfig& c);
// One line per unit: "  features.1: ckpt+bits" or, for several segments, each "[b,e) choice";
// a chain's units add ", chain n/4 [first..last]".
std::string describe_memopt(Stage& stage, const MemoptConfig& c);

}  // namespace sm
