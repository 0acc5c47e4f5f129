// memopt_plan.cpp — memopt's options and configurations (models/memopt_plan.h).
#include "spikemesh/models/memopt_plan.h"

#include <algorithm>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/models/stage.h"

namespace sm {

void validate_memopt_options(const MemoptOptions& o) {
  if (o.level < 0 || o.level > 4) SM_INPUT_ERROR("--memopt-level must be 0..4, got " << o.level);
  if (!(o.pp_stage_budget_ratio > 0.0 && o.pp_stage_budget_ratio <= 1.0))
    SM_INPUT_ERROR("--pp-memopt-stage-budget-ratio must be in (0, 1], got " << o.pp_stage_budget_ratio);
  if (!(o.memory_budget_mb >= 0.0)) SM_INPUT_ERROR("--memory-budget-mb must be >= 0 (0: no budget), got " << o.memory_budget_mb);
  if (!(o.max_slowdown >= 1.0)) SM_INPUT_ERROR("--memopt-max-slowdown must be >= 1, got " << o.max_slowdown);
}

MemoptConfig checkpoint_all(Stage& stage, bool compress, const std::vector<bool>& include) {
  MemoptConfig c;
  c.units.resize(stage.size());
  for (size_t k = 0; k < stage.size(); ++k) {
    if (!include.empty() && !include[k]) continue;
    for (const auto& [b, e] : natural_segments(stage.unit(k))) {
      MemoptSegment s;
      s.begin = b;
      s.end = e;
      s.checkpoint = true;
      s.compress = compress;
      c.units[k].push_back(s);
    }
  }
  return c;
}

MemoptConfig split_all(Stage& stage, MemoptConfig c, int pieces, SplitAxis axis, bool forward_in_pieces) {
  for (size_t k = 0; k < stage.size() && k < c.units.size(); ++k)
    for (MemoptSegment& s : c.units[k])
      if (s.checkpoint && splittable(stage.unit(k), s.begin, s.end, axis)) {
        s.pieces = pieces;
        s.axis = axis;
        s.forward_in_pieces = forward_in_pieces;
      }
  return c;
}

bool MemoptConfig::has_pieces() const {
  for (const auto& u : units)
    for (const MemoptSegment& s : u)
      if (s.checkpoint && s.pieces > 1) return true;
  return !chains.empty();
}

const PieceChain* MemoptConfig::chain_of(size_t k) const { return chain_containing(chains, k); }

MemoptConfig chain_all(Stage& stage, MemoptConfig c, int pieces, bool forward_in_pieces) {
  const auto linkable = [&](size_t k) {
    if (c.units[k].empty() || !splittable(stage.unit(k), 0, stage.unit(k).size(), SplitAxis::Batch)) return false;
    for (const MemoptSegment& s : c.units[k])
      if (!chain_link(s)) return false;
    return true;
  };
  c.chains.clear();
  for (size_t ch = 0; ch < stage.chunks(); ++ch) {
    const auto [b, e] = stage.chunk_local(ch);
    for (size_t k = b; k < e;) {
      size_t end = k;
      while (end < e && linkable(end)) ++end;
      if (end >= k + 2) c.chains.push_back(PieceChain{k, end, pieces, forward_in_pieces});
      k = std::max(end, k + 1);
    }
  }
  return c;
}

void apply_memopt(Stage& stage, const MemoptConfig& c) {
  SM_CHECK(c.units.size() == stage.size(), "memopt configuration for " << c.units.size() << " units on a stage of "
                                                                       << stage.size());
  stage.set_memopt_chains({});
  for (size_t k = 0; k < stage.size(); ++k) stage.unit(k).set_memopt(c.units[k]);
  stage.set_memopt_chains(c.chains);
}

std::string describe_memopt(Stage& stage, const MemoptConfig& c) {
  std::ostringstream os;
  for (size_t k = 0; k < stage.size() && k < c.units.size(); ++k) {
    const auto& segs = c.units[k];
    const std::string name = stage.unit(k).name().empty() ? "(unit " + std::to_string(stage.global_index(k)) + ")"
                                                          : stage.unit(k).name();
    os << "    " << name << ":";
    if (segs.empty()) {
      os << " none\n";
      continue;
    }
    if (segs.size() == 1) {
      os << " " << segs[0].describe();
    } else {
      for (const MemoptSegment& s : segs) os << " [" << s.begin << "," << s.end << ") " << s.describe() << ";";
    }
    if (const PieceChain* ch = c.chain_of(k)) os << ", " << ch->describe(stage);
    os << "\n";
  }
  return os.str();
}

}  // namespace sm
