// zero.h — ZeRO optimizer sharding over dp (--optimizer-sharding; docs/architecture.md §7):
//   stage 1 (zero):  every rank keeps full gradients; after the last micro-step's backward
//                    each unit's padded flat gradient is reduce-scattered (average) as soon
//                    as the unit finishes, so rank r receives the mean of its chunk.
//   stage 2 (zero2): gradients are kept only as shards: a unit's full gradient buffer exists
//                    only from its backward until its reduce-scatter completes (at the end of
//                    every micro-step); micro-steps accumulate into the shard.
// Both: the optimizer steps shard Params (flat_shard.h) over this rank's chunk, so its state
// is 1/dp of the single-rank state; after the step every unit's flat values are all-gathered
// from the updated shards, leaving every rank with bitwise identical full parameters.
// Invariant: each unit's flat value buffer is padded to a multiple of dp (zeros beyond the
// params, never touched by layers); layouts in flat_shard.h.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/comm/comm.h"
#include "spikemesh/parallel/comm_collectives.h"
#include "spikemesh/parallel/flat_shard.h"
#include "spikemesh/parallel/strategy.h"

namespace sm {

class ZeroSharding final : public ParallelStrategy {
 public:
  // stage 1 or 2. Collective over `dp` (checks identical initial replicas).
  ZeroSharding(Stage& stage, Comm& dp, int zero_stage);
  std::string name() const override { return zero_stage_ == 1 ? "zero" : "zero2"; }
  std::vector<Param*> optimizer_params() override { return shards_.params(); }
  Collectives* shard_group() override { return &group_; }
  std::vector<ParamPlacement> placements(bool) override { return shards_.placements(); }
  bool holds_replicated(bool saving) const override { return !saving || dp_.rank() == 0; }
  void after_load() override { after_optimizer_step(); }

  void begin_step() override;
  void before_backward(size_t unit) override;
  void after_backward(size_t unit) override;
  void end_backward() override;
  void after_optimizer_step() override;
  StrategyStats stats() const override { return stats_; }

 private:
  struct UnitState {
    bool has_params = false;
    UnitShardLayout layout;
    Tensor shard_value;  // [chunk] master copy of this rank's chunk
    Tensor shard_grad;   // [chunk]
    Tensor recv;         // [chunk] stage 2: this micro-step's reduced chunk
    Tensor full_grad;    // [padded] stage 2: alive from backward to the reduce-scatter's end
    std::unique_ptr<CommHandle> handle;
  };
  Model& model_;
  Stage& stage_;
  Comm& dp_;
  CommCollectives group_;
  int zero_stage_;
  std::vector<UnitState> units_;
  ShardParams shards_;
  StrategyStats stats_;
};

}  // namespace sm
