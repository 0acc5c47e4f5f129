// tp_partial_sums.h — sums over tp the gradients each tp rank holds only a part of (whole
// parameters of channel-local layers such as PLIF's w, and of the sample-sharded regions'
// layers: their batch norms' γ/β; parallel/tp_plan.h), unit by unit, as a UnitHooks decorator
// in front of the data-parallel strategy: when a unit's gradients are complete (after_backward
// of the step's last microbatch), its partial parameters are all-reduced over tp BEFORE the
// strategy sees them, so ZeRO-2/FSDP reduce-scatters and dp buckets take the tp sums.
// Invariant: collective over tp, every tp rank calls it for the same units in the same order.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/layers/sequence_parallel.h"
#include "spikemesh/models/stage.h"

namespace sm {

class Collectives;
struct Param;

// One parameter whose gradient may be partial over tp: always (region null: a channel-local
// layer's whole parameter), or only while its sample-sharded region really shards (a region
// that ran whole, say because the samples did not divide by tp, left whole gradients).
struct TpPartialParam {
  Param* param = nullptr;
  std::shared_ptr<SpRegion> region;
};

class TpPartialSums : public UnitHooks {
 public:
  // by_unit[k]: the stage-local unit k's parameters whose gradients may be partial over tp.
  TpPartialSums(UnitHooks* inner, Collectives& tp, std::vector<std::vector<TpPartialParam>> by_unit);
  // Whether the coming backward is the step's last microbatch (earlier ones only accumulate).
  void set_last_micro(bool last) { last_ = last; }
  bool empty() const;

  void before_forward(size_t unit, bool training) override { inner_->before_forward(unit, training); }
  void after_forward(size_t unit, bool training) override { inner_->after_forward(unit, training); }
  void before_backward(size_t unit) override { inner_->before_backward(unit); }
  void after_backward(size_t unit) override;  // collective over tp on the last microbatch

 private:
  UnitHooks* inner_;
  Collectives& tp_;
  std::vector<std::vector<TpPartialParam>> by_unit_;
  bool last_ = true;
};

}  // namespace sm
