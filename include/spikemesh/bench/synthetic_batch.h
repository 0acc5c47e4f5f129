// synthetic_batch.h — the fixed synthetic batch `bench` times and `plan` measures memopt on:
// x ~ N(0, 1) [T, N, ...], y ~ U{0..K-1}, keyed by (seed, dp rank, element of the whole
// batch), cut into M microbatches of N/M samples (the same values whatever M), on `dev` in
// the activation dtype (CUDA) or `dtype` (CPU).
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/layout.h"

namespace sm {

struct SyntheticBatch {
  int64_t samples = 1;   // N: samples of this dp rank per step
  int microbatches = 1;  // M, dividing N
  int dp_rank = 0;
  uint64_t seed = 1;
};

std::vector<MicroBatch> synthetic_batch(const ModelInfo& mi, const SyntheticBatch& b, DType dtype, Device dev,
                                        DType activations);

}  // namespace sm
