// spike_conv_choice.cpp — the --conv-algo mode and the crossover rule (spike_conv_choice.h).
#include "spikemesh/kernels/spike_conv_choice.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "spikemesh/core/error.h"

namespace sm {
namespace {
// SPIKEMESH_CONV_ALGO's mode, read once when the library loads (so test binaries, which have
// no main() of ours, follow it too); a bad value counts as auto here — the program refuses it
// at start-up (apply_spike_conv_algo_env).
SpikeConvAlgo algo_of_environment() {
  const char* e = std::getenv("SPIKEMESH_CONV_ALGO");
  const std::string v = e ? e : "";
  return v == "dense" ? SpikeConvAlgo::Dense : v == "sparse" ? SpikeConvAlgo::Sparse : SpikeConvAlgo::Auto;
}
std::atomic<SpikeConvAlgo> g_algo{algo_of_environment()};
}  // namespace

SpikeConvAlgo spike_conv_algo_from_name(const std::string& value, const std::string& flag) {
  if (value == "dense") return SpikeConvAlgo::Dense;
  if (value == "sparse") return SpikeConvAlgo::Sparse;
  if (value == "auto") return SpikeConvAlgo::Auto;
  // "--conv-algo fast: ..." for a flag, "SPIKEMESH_CONV_ALGO=fast: ..." for the environment
  const bool assignment = !flag.empty() && flag.back() == '=';
  SM_INPUT_ERROR(flag << (assignment ? "" : " ") << value << ": unknown convolution algorithm (valid: dense, sparse, auto)");
}

const char* spike_conv_algo_name(SpikeConvAlgo a) {
  switch (a) {
    case SpikeConvAlgo::Dense: return "dense";
    case SpikeConvAlgo::Sparse: return "sparse";
    default: return "auto";
  }
}

void set_spike_conv_algo(SpikeConvAlgo a) { g_algo.store(a); }
SpikeConvAlgo spike_conv_algo() { return g_algo.load(std::memory_order_relaxed); }

void apply_spike_conv_algo_env() {
  if (const char* e = std::getenv("SPIKEMESH_CONV_ALGO"))
    set_spike_conv_algo(spike_conv_algo_from_name(e, "SPIKEMESH_CONV_ALGO="));
}

// Fitted to `spikemesh bench --kernel spike-conv` on a 2-core Xeon with AVX-512 (README,
// "Convolutions of spikes"), the lower end of each measured range so that auto does not pick
// the slower kernel where the two are close:
//  * 3×3 forward: ~27% on large planes, less where few output pixels (batch·Ho·Wo) share the
//    per-call cost of re-laying the weight (512→512 on 6×6 at batch 40: 7%);
//  * 3×3 weight gradient: 15% for short reductions (Cin·K² < 1024), 25% for longer ones;
//  * 1×1 (Conv1d over tokens): 10% both ways (one tap: the lists cost as much as the sums).
double spike_conv_crossover(ConvPass pass, const cpu::Conv2dGeometry& g) {
  if (g.kernel == 1) return 0.10;
  const double pixels = static_cast<double>(g.batch * g.out_height() * g.out_width());
  if (pass == ConvPass::Forward) return std::max(0.0, 0.27 - 300.0 / pixels);
  return g.in_channels * g.kernel * g.kernel >= 1024 ? 0.25 : 0.15;
}

// Winograd pays where there are many 4×4 output tiles per weight: planes of at least 16×16,
// weights of at most 256×256×3×3 (its transformed weights, 4× the weight, and per-thread
// weight-gradient accumulators live in the scratchpad: the 512-channel layers would add
// ~75 MB to the peak for the little their 12×12 and 6×6 planes gain).
bool use_winograd(const cpu::Conv2dGeometry& g) {
  return spike_conv_algo() == SpikeConvAlgo::Auto && g.in_channels >= 16 && g.out_channels >= 16 &&
         g.in_channels * g.out_channels <= 256 * 256 && g.height >= 16 && g.width >= 16 &&
         cpu::conv2d_winograd_available(g);
}

bool use_spike_kernel(ConvPass pass, const cpu::Conv2dGeometry& g, double density) {
  switch (spike_conv_algo()) {
    case SpikeConvAlgo::Dense: return false;
    case SpikeConvAlgo::Sparse: return true;
    default: return density < spike_conv_crossover(pass, g);
  }
}

}  // namespace sm
