// spike_conv_choice.cpp — the --conv-algo mode, the crossover rule and the Winograd choice
// (spike_conv_choice.h).
#include "spikemesh/kernels/spike_conv_choice.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/cpu/winograd.h"

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

// Fitted to `spikemesh bench --kernel spike-conv` on a 2-core Xeon with AVX-512 (docs/results.md,
// "CPU convolution kernels"), the lower end of each measured range so that auto does not pick
// the slower kernel where the two are close:
//  * 3×3 forward: ~27% on large planes (measured 32–41%), less where few output pixels
//    (batch·Ho·Wo) share the per-call cost of re-laying the weight (512→512 on 6×6 at batch
//    40: measured 21%, the rule 20.75%);
//  * 3×3 weight gradient: 15% for short reductions (Cin·K² < 1024), 25% for longer ones;
//  * 1×1 (Conv1d over tokens): 15% forward (measured 16–33%), 10% weight gradient (one tap:
//    the lists cost as much as the sums).
double spike_conv_crossover_vs_direct(ConvPass pass, const cpu::Conv2dGeometry& g) {
  if (g.kernel == 1) return pass == ConvPass::Forward ? 0.15 : 0.10;
  const double pixels = static_cast<double>(g.batch * g.out_height() * g.out_width());
  if (pass == ConvPass::Forward) return std::max(0.0, 0.27 - 90.0 / pixels);
  return g.in_channels * g.kernel * g.kernel >= 1024 ? 0.25 : 0.15;
}

// SPIKEMESH_WINOGRAD's choice of Winograd kernels, read once when the library loads; a bad
// value counts as auto here — the program refuses it at start-up (apply_winograd_env).
WinogradChoice winograd_choice_of(const char* value) {
  const std::string v = value ? value : "";
  return v == "own" ? WinogradChoice::Own : v == "off" ? WinogradChoice::Off : WinogradChoice::Auto;
}
std::atomic<WinogradChoice> g_winograd{winograd_choice_of(std::getenv("SPIKEMESH_WINOGRAD"))};

void set_winograd_choice(WinogradChoice c) { g_winograd.store(c); }
WinogradChoice winograd_choice() { return g_winograd.load(std::memory_order_relaxed); }

void apply_winograd_env() {
  const char* e = std::getenv("SPIKEMESH_WINOGRAD");
  if (!e) return;
  const std::string v = e;
  if (v != "auto" && v != "own" && v != "off")
    SM_INPUT_ERROR("SPIKEMESH_WINOGRAD=" << v << ": unknown Winograd choice (valid: auto, own, off)");
  set_winograd_choice(winograd_choice_of(e));
}

// oneDNN's Winograd F(4×4, 3×3) pays on planes of at least 12×12 (`spikemesh bench --kernel
// winograd`, batch·T 40: 0.5–0.6 of direct's time for all three passes) and, since its calls run
// in one chunk of samples (the weights transformed once per call), on 6×6 too for the forward
// and input-gradient passes (0.80–0.89 and 0.87–0.93 of direct's time at 512→512); weights up
// to 512×512×3×3 (its transformed weights, 4× the weight, live in the scratchpad; the calls run
// over chunks of samples with ~64 MB of transformed tiles each, cpu/onednn_conv.cpp). Its
// weight gradient on 6×6 (0.75–0.78 of direct) is not taken: its scratchpad, which holds
// transformed weight gradients per thread, raised the VGG's peak RSS 562 → 680 MB with no
// measurable change of step time (paired runs, docs/results.md).
// The own F(4×4, 3×3) pays on CPUs without AVX-512 from 64 channels both sides on planes of at
// least 12×12 (`spikemesh bench --kernel winograd` under ONEDNN_MAX_CPU_ISA=AVX2, batch·T 40,
// 2 threads: 0.49–0.70 of oneDNN direct's time for the input gradient and 0.44–0.77 for the
// weight gradient on the VGG's 64→128 48×48 … 512→512 12×12 layers, 0.60–0.67 for the
// forward of its average-pooled 128→256 24×24 and 256→512 12×12 layers; 1.1–1.7× slower on
// 6×6, and slower below 64 channels, where the transforms, whose cost grows with Cin + Cout,
// outweigh the 36 GEMMs, whose cost grows with Cin·Cout; docs/results.md, "CPU convolution
// kernels"), weights up to 512×512×3×3 (transformed weights 36·Cin·Cout floats per call). Its
// forward rounds like oneDNN's F(4×4, 3×3) on AVX-512 (the kernel auto runs there): a forward
// of spikes below the crossover keeps the binary-input kernel either way (spike_conv_crossover
// says why). "Where oneDNN has none" is a property of
// the CPU, probed once on a shape its Winograd takes everywhere it exists (64→64, 24×24,
// padding 1): a geometry oneDNN's Winograd refuses on an AVX-512 CPU runs direct, not ours.
namespace {
bool onednn_has_winograd() {
  static const bool has = [] {
    cpu::Conv2dGeometry probe;
    probe.batch = 8, probe.in_channels = probe.out_channels = 64, probe.height = probe.width = 24;
    probe.kernel = 3, probe.padding = 1;
    return cpu::conv2d_winograd_available(probe);
  }();
  return has;
}
}  // namespace

WinogradKernel winograd_kernel(const cpu::Conv2dGeometry& g, WinogradPass pass) {
  const WinogradChoice choice = winograd_choice();
  if (spike_conv_algo() != SpikeConvAlgo::Auto || choice == WinogradChoice::Off || !cpu::winograd_f2_applies(g))
    return WinogradKernel::None;
  auto planes_of_at_least = [&](int64_t side) { return g.height >= side && g.width >= side; };
  const bool onednn_channels =
      g.in_channels >= 16 && g.out_channels >= 16 && g.in_channels * g.out_channels <= 512 * 512;
  const bool onednn_shape = onednn_channels && planes_of_at_least(pass == WinogradPass::Weights ? 12 : 6);
  const bool own_shape = std::min(g.in_channels, g.out_channels) >= 64 &&
                         g.in_channels * g.out_channels <= 512 * 512 && planes_of_at_least(12);
  if (choice == WinogradChoice::Own)  // the own kernels on oneDNN's shapes of 12×12 and more, or their own
    return (onednn_channels && planes_of_at_least(12)) || own_shape ? WinogradKernel::Own : WinogradKernel::None;
  if (onednn_has_winograd()) return onednn_shape && cpu::conv2d_winograd_available(g) ? WinogradKernel::OneDnn
                                                                                      : WinogradKernel::None;
  return own_shape ? WinogradKernel::Own : WinogradKernel::None;
}

// Where the weight gradient would run oneDNN's Winograd instead of direct, the binary-input
// kernel must beat that: its crossover scales by Winograd's time over direct's (`spikemesh
// bench --kernel winograd`, 2-core Xeon, batch·T 40: 0.41–0.44 on planes of 24×24 and more,
// 0.52–0.54 on 12×12), the upper end of each range (× 0.5, × 0.75) so that the sparse kernel
// keeps the layers where the two are close (512→512 on 12×12 at 15 %: sparse 63 ms, Winograd
// 78 ms). The forward pass is not scaled: Winograd would often be faster there too (64→128 on
// 48×48 at 15 %: 32 vs 49 ms), but its rounding (~1e-6 relative, F(4×4, 3×3)'s transforms)
// is ten times the binary-input kernel's, and a forward that feeds a threshold turns that into
// flipped spikes: the PyTorch parity test's VGG (tests/parity) then leaves PyTorch's fp32
// trajectory (loss 4.5 % off) where the binary-input kernel stays within 1e-8.
double spike_conv_crossover(ConvPass pass, const cpu::Conv2dGeometry& g) {
  const double direct = spike_conv_crossover_vs_direct(pass, g);
  if (pass != ConvPass::Weights || winograd_kernel(g, WinogradPass::Weights) != WinogradKernel::OneDnn)
    return direct;  // 3×3 only
  return direct * (std::min(g.height, g.width) >= 24 ? 0.5 : 0.75);
}

bool use_spike_kernel(ConvPass pass, const cpu::Conv2dGeometry& g, double density) {
  switch (spike_conv_algo()) {
    case SpikeConvAlgo::Dense: return false;
    case SpikeConvAlgo::Sparse: return true;
    default: return density < spike_conv_crossover(pass, g);
  }
}

}  // namespace sm
