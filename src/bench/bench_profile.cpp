// bench_profile.cpp — the tables of `bench --profile` (bench_profile.h).
#include "spikemesh/bench/bench_profile.h"

#include <cstdio>

#include "spikemesh/kernels/spike_conv_choice.h"
#include "spikemesh/layers/gpu_layer_profile.h"
#include "spikemesh/layers/layer_profile.h"
#include "spikemesh/models/model.h"

namespace sm {

// Per leaf layer (a fused pair's forward under "bn+next", its backward under each layer), in
// the forward's order: where a step goes, layer by layer.
void print_cpu_layer_rows(int64_t steps, double step_ms) {
  std::printf("  per layer (ms per step, leaf layers in forward order, CPU):\n    %-48s %-22s %9s %9s %7s\n",
              "layer", "type", "forward", "backward", "share");
  for (const LayerTiming& r : layer_profile_layers()) {
    const double f = r.forward_ms / steps, b = r.backward_ms / steps;
    std::printf("    %-48s %-22s %9.2f %9.2f %6.1f%%\n", r.layer.c_str(), r.type.c_str(), f, b,
                100.0 * (f + b) / step_ms);
  }
}

// Per-layer-type time per step of the timed steps (layer_profile.h). Matrix-product layers also
// get their achieved rate; their backward does two products of the forward's size (data and
// weights), so its rate is computed from 2× the forward FLOPs.
void print_cpu_layer_profile(int64_t steps, double step_ms) {
  std::printf("  per layer type (ms per step, leaf layers, CPU):\n"
              "    %-12s %10s %10s %7s %12s %12s\n", "type", "forward", "backward", "share", "fwd GFLOP/s",
              "bwd GFLOP/s");
  double total = 0.0;
  for (const LayerTypeTiming& r : layer_profile_report()) {
    const double f = r.forward_ms / steps, b = r.backward_ms / steps;
    total += f + b;
    char fr[32] = "", br[32] = "";
    if (r.forward_flops > 0 && f > 0) std::snprintf(fr, sizeof fr, "%.0f", r.forward_flops / steps / (f * 1e6));
    if (r.forward_flops > 0 && b > 0) std::snprintf(br, sizeof br, "%.0f", 2 * r.forward_flops / steps / (b * 1e6));
    std::printf("    %-12s %10.2f %10.2f %6.1f%% %12s %12s\n", r.type.c_str(), f, b, 100.0 * (f + b) / step_ms, fr, br);
  }
  std::printf("    %-12s %21.2f %6.1f%%  (rest: loss, optimizer, framework)\n", "all layers", total,
              100.0 * total / step_ms);
  print_cpu_layer_rows(steps, step_ms);
  const std::vector<SpikeConvRow> conv = layer_profile_spike_conv_report();
  if (conv.empty()) return;
  std::printf("  convolutions of spike inputs (--conv-algo %s; ms per step; kernel: the one that ran, sparse "
              "below the crossover):\n    %-28s %-22s %8s %9s %8s %9s %9s %8s %9s\n",
              spike_conv_algo_name(spike_conv_algo()), "layer", "shape", "density", "forward", "kernel", "crossover",
              "weights", "kernel", "crossover");
  for (const SpikeConvRow& r : conv)
    std::printf("    %-28s %-22s %7.1f%% %9.2f %8s %8.1f%% %9.2f %8s %8.1f%%\n", r.layer.c_str(), r.geometry.c_str(),
                100.0 * r.firing_rate(), r.forward_ms / steps, r.forward_kernel(), 100.0 * r.crossover_forward,
                r.weight_ms / steps, r.weights_kernel(), 100.0 * r.crossover_weights);
}

StepProfile profile_gpu_step(Layout& layout, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                             const StepOptions& opts) {
  const Device dev = layout.model().device();
  synchronize(dev);  // nothing of an earlier step inside the step's events
  gpu_profile_begin_step(dev);
  StepResult r;
  try {
    r = train_step(layout, opt, micro, ctx, opts);  // eager: the graph path is not taken
  } catch (...) {
    try {
      gpu_profile_end_step(nullptr);  // disarm; the step's own error is the one reported
    } catch (...) {
    }
    throw;
  }
  double step_ms = 0.0;
  const std::vector<PassTiming> passes = gpu_profile_end_step(&step_ms);
  StepProfile p = build_step_profile(passes, step_ms, "cuda-events, one eager step");
  p.optimizer_phase_ms = r.optimizer_ms;
  return p;
}

}  // namespace sm
