// bench_profile.h — `spikemesh bench --profile` (bench_profile.cpp).
//   CPU: every leaf layer timed with the host clock over the timed steps, per layer type
//        (layers/layer_profile.h), plus the convolutions of spike inputs (kernel per pass).
//   GPU: ONE more step after the timed ones, run eagerly (never a CUDA-graph replay), with a
//        CUDA-event pair around every leaf layer's pass on the compute stream
//        (layers/gpu_layer_profile.h): the per-layer, per-pass table and the per-type
//        aggregate of layers/step_profile.h, printed and put in the bench record.
// Invariant: the GPU step runs after every figure of the record was taken, so profiling
// changes neither the timed steps nor their peak memory or allocator counters.
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/layers/step_profile.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/train/train_step.h"

namespace sm {

class Optimizer;

// Rows printed by the GPU table (the record holds every row).
constexpr size_t kProfileTableRows = 40;

// The CPU tables of the timed steps (ms per step; step_ms: their median).
void print_cpu_layer_profile(int64_t steps, double step_ms);

// One eager training step on the layout's CUDA device with every leaf pass timed by CUDA
// events (collective over the layout's groups, like any step).
StepProfile profile_gpu_step(Layout& layout, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                             const StepOptions& opts);

}  // namespace sm
