// pp_costs.h — measured per-unit costs for the cost-balanced pipeline partition (spec §4):
// a dry-run forward + backward of every unit of a finalised model on the real shapes
// ([T, samples, ...unit input]), synthetic inputs, one warm-up and the best of two timed
// repetitions. The model's state is left as it was: BN running statistics restored,
// gradients zeroed, neurons reset. Units whose layers reduce over tp (ctx.tp) communicate,
// so every rank of a tp group must call it together (collective over ctx.tp when set).
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/layers/ctx.h"

namespace sm {

class Model;

// Milliseconds per unit (forward + full backward of one microbatch of `samples` samples).
std::vector<double> measure_unit_costs(Model& model, int64_t samples, Ctx ctx);

}  // namespace sm
