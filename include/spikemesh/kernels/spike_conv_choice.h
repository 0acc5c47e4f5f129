// spike_conv_choice.h — which CPU kernel runs an f32 convolution whose input is a spike
// tensor (flagged binary): the dense one (oneDNN, conv.h) or the binary-input one
// (spike_conv.h), per layer and per call, by the input's measured firing rate.
//   --conv-algo dense | sparse | auto   (train, eval, bench; SPIKEMESH_CONV_ALGO sets the
//                                        default; auto when neither is given)
//   auto: sparse when the firing rate is below the crossover of the pass and shape, a
//         deterministic function of the geometry (fitted to the measured table of
//         docs/results.md, "The crossover per shape"; docs/architecture.md §4b), so the choice never depends on timing noise and a run is
//         reproducible bit for bit.
// The input gradient is dense in every mode; fp64 is always dense (the exact reference).
#pragma once
#include <string>

#include "spikemesh/kernels/cpu/conv.h"

namespace sm {

enum class SpikeConvAlgo { Dense, Sparse, Auto };
enum class ConvPass { Forward, Weights };

// "dense" | "sparse" | "auto"; InputError naming `flag` and the valid names otherwise.
SpikeConvAlgo spike_conv_algo_from_name(const std::string& value, const std::string& flag);
const char* spike_conv_algo_name(SpikeConvAlgo a);
// The process-wide mode (default: SPIKEMESH_CONV_ALGO, else auto). Set before training.
void set_spike_conv_algo(SpikeConvAlgo a);
SpikeConvAlgo spike_conv_algo();
// SPIKEMESH_CONV_ALGO checked (InputError on a bad value) and applied.
void apply_spike_conv_algo_env();

// The firing rate below which the binary-input kernel is faster than oneDNN's direct kernel
// for pass and g (fitted to `spikemesh bench --kernel spike-conv`).
double spike_conv_crossover_vs_direct(ConvPass pass, const cpu::Conv2dGeometry& g);
// The firing rate below which auto runs the binary-input kernel for pass and g: the above,
// for the weight gradient scaled down where the dense pass runs oneDNN's Winograd
// (winograd_kernel below); never for the forward, whose output feeds a threshold and keeps
// direct-level rounding.
double spike_conv_crossover(ConvPass pass, const cpu::Conv2dGeometry& g);
// Whether the binary-input kernel runs pass over an input of firing rate `density`.
bool use_spike_kernel(ConvPass pass, const cpu::Conv2dGeometry& g, double density);
// Which Winograd kernel an f32 conv2d pass that runs dense takes (the input gradient always;
// the forward and weight gradient when the input is not spikes or fires above the crossover),
// in --conv-algo auto only, 3×3 stride 1:
//   OneDnn  oneDNN's F(4×4, 3×3) — at least 16 channels each side, weights up to 512×512,
//           planes of at least 12×12 (6×6 for the forward and input gradient), on a CPU where
//           oneDNN has one (AVX-512);
//   Own     the own F(4×4, 3×3) (cpu/winograd.h), all three passes, where oneDNN has none: at
//           least 64 channels both sides, weights up to 512×512, planes of at least 12×12.
//           Its forward rounds like oneDNN's (~1e-6 relative); the own F(2×2, 3×3) forward,
//           although it rounds less, flipped a spike of the PyTorch parity test's VGG on the
//           same layers (tests/parity; loss 1.6e-2 off at the first step, F(4×4, 3×3) and
//           direct 5.9e-9) and is not taken: which rounding lands a pre-activation on the
//           other side of a threshold is chance, and that test is the arbiter;
//   None    direct.
// SPIKEMESH_WINOGRAD=auto (the default, as above) | own (the own F(4×4, 3×3) wherever either
// shape rule holds of 12×12 and more, also on AVX-512: for measurement) | off (direct
// everywhere).
enum class WinogradKernel { None, OneDnn, Own };
enum class WinogradPass { Forward, Data, Weights };
enum class WinogradChoice { Auto, Own, Off };
WinogradKernel winograd_kernel(const cpu::Conv2dGeometry& g, WinogradPass pass);
void set_winograd_choice(WinogradChoice c);
WinogradChoice winograd_choice();
// SPIKEMESH_WINOGRAD checked (InputError naming it on a bad value) and applied.
void apply_winograd_env();

}  // namespace sm
