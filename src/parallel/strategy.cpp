// strategy.cpp — the one-rank strategy and the choice of a dp-family strategy for the flags.
#include "spikemesh/parallel/strategy.h"

#include "spikemesh/parallel/data_parallel.h"
#include "spikemesh/parallel/fsdp.h"
#include "spikemesh/parallel/zero.h"

namespace sm {

namespace {
// One rank: the stage's own Params, nothing to reduce, every tensor held whole.
class SingleRank final : public ParallelStrategy {
 public:
  explicit SingleRank(Stage& stage) : stage_(stage) {}
  std::string name() const override { return "none"; }
  std::vector<Param*> optimizer_params() override { return stage_.params(); }
  std::vector<ParamPlacement> placements(bool) override {
    std::vector<ParamPlacement> out;
    for (Param* p : stage_.params())
      out.push_back(ParamPlacement{p, flat_range_pieces_of(*p, 0, shape_numel(p->local_shape), 0)});
    return out;
  }
  bool holds_replicated(bool) const override { return true; }
  void begin_step() override { stage_.zero_grad(); }
  void end_backward() override {}

 private:
  Stage& stage_;
};
}  // namespace

std::unique_ptr<ParallelStrategy> make_single_rank_strategy(Stage& stage) { return std::make_unique<SingleRank>(stage); }

std::unique_ptr<ParallelStrategy> make_strategy(Stage& stage, Comm& dp, const std::string& mode,
                                                const StrategyOptions& o) {
  if (mode == "fsdp") return std::make_unique<Fsdp>(stage, dp, o.reshard_after_forward, o.param_dtype, o.reduce_dtype);
  if (o.sharding == "zero") return std::make_unique<ZeroSharding>(stage, dp, 1);
  if (o.sharding == "zero2") return std::make_unique<ZeroSharding>(stage, dp, 2);
  return std::make_unique<DataParallel>(stage, dp, o.bucket_mb);
}

}  // namespace sm
