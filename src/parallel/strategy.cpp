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

const char* gradient_reduction_name(GradientReduction r) {
  switch (r) {
    case GradientReduction::AllReduce: return "all-reduce";
    case GradientReduction::Zero1: return "zero";
    case GradientReduction::Zero2: return "zero2";
    case GradientReduction::Fsdp: return "fsdp";
  }
  return "?";
}

std::unique_ptr<ParallelStrategy> make_strategy(Stage& stage, Comm& dp, GradientReduction reduction,
                                                const StrategyOptions& o) {
  switch (reduction) {
    case GradientReduction::Fsdp:
      return std::make_unique<Fsdp>(stage, dp, o.reshard_after_forward, o.param_dtype, o.reduce_dtype);
    case GradientReduction::Zero1: return std::make_unique<ZeroSharding>(stage, dp, 1);
    case GradientReduction::Zero2: return std::make_unique<ZeroSharding>(stage, dp, 2);
    case GradientReduction::AllReduce: break;
  }
  return std::make_unique<DataParallel>(stage, dp, o.bucket_mb);
}

}  // namespace sm
