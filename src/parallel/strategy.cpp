// strategy.cpp — picks the data-parallel strategy for the train flags.
#include "spikemesh/parallel/strategy.h"

#include "spikemesh/parallel/data_parallel.h"
#include "spikemesh/parallel/fsdp.h"
#include "spikemesh/parallel/zero.h"

namespace sm {

std::unique_ptr<ParallelStrategy> make_strategy(Model& model, Comm& dp, const StrategyOptions& o) {
  if (o.mode == "fsdp") {
    if (o.sharding != "none")
      SM_INPUT_ERROR("--optimizer-sharding " << o.sharding << " applies to --distributed-mode dp; "
                                             << "fsdp always shards parameters, gradients and optimizer state");
    return std::make_unique<Fsdp>(model, dp, o.reshard_after_forward, o.param_dtype, o.reduce_dtype);
  }
  if (o.mode != "dp") SM_INPUT_ERROR("--distributed-mode " << o.mode << ": the data-parallel family is dp or fsdp");
  if (o.sharding == "none") return std::make_unique<DataParallel>(model, dp, o.bucket_mb);
  if (o.sharding == "zero") return std::make_unique<ZeroSharding>(model, dp, 1);
  if (o.sharding == "zero2") return std::make_unique<ZeroSharding>(model, dp, 2);
  SM_INPUT_ERROR("--optimizer-sharding must be none, zero or zero2, got '" << o.sharding << "'");
}

}  // namespace sm
