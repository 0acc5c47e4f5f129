// optimizer_kinds.h — internal: constructors of the concrete optimizers, used by the factory
// in optimizer.cpp. Each validates the hyper-parameters it reads (SM_INPUT_ERROR).
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/optim/optimizer.h"

namespace sm {

// Rows of elementwise updates below this size run on one thread (a parallel region costs more).
constexpr int64_t kOptimParallelMin = 16384;

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& cfg, std::vector<Param*> params);
// decoupled = false: Adam (L2 added to the grad); true: AdamW (p *= 1 - lr·wd).
std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& cfg, std::vector<Param*> params,
                                     bool decoupled);

}  // namespace sm
