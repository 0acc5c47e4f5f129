// fused_epilogue.h — the fused batch-norm epilogues of Sequential children (CPU): a BatchNorm
// directly followed by a Neuron or by a max-pooling Pool2d runs as BatchNorm::forward_into,
// the next layer normalising the convolution output as it reads it, so the normalised tensor
// is never written (one pass less over it in forward, and no full-size temporary: the block
// still holds one full-size tensor). The next layer's backward also makes batch norm's two
// backward sums (the neuron in its BPTT pass, max pooling from its pooled gradient), so batch
// norm's backward reads its inputs once instead of twice. Forward outputs equal the unfused
// forward's bitwise (the same fma, the same pooling winners); gradients differ by rounding,
// since batch norm works from its saved input x instead of its output (docs/semantics.md §9's
// tolerances). No tensor-parallel sample sharding on either layer, and no recompute inside a
// memopt time chunk's backward (its membrane-gradient carry runs unfused); every other memopt
// forward qualifies — a checkpointed forward and its recompute, and the passes of a segment in
// pieces: batch norm takes, keeps or adds its statistics before the fused pass (returning none
// in a moments pass), the neuron's recompute leaves its firing statistics alone and a later
// piece adds to them, and the sums the neuron makes for batch norm's backward are the piece's,
// which batch norm adds up or replaces by the whole segment's exactly as its own. On a GPU the batch norm → neuron pair fuses the same
// way (the neuron kernels read x through batch norm's per-channel apply, bitwise the unfused
// forward; batch norm keeps its input, so its forward reads no decision back from the
// device); its backward is batch norm's unfused one from the saved input.
// On by default: the same step time, and without the full-size temporaries Spikformer-Ti's
// peak RSS falls by 15 % (docs/cpu-kernels.md, figures in docs/results.md). SPIKEMESH_FUSE=0 (read when
// the library loads; the program checks the value at start-up) or set_fused_epilogues(false)
// turns it off.
#pragma once
#include <string>

#include "spikemesh/layers/layer.h"

namespace sm {

bool fused_epilogues();
void set_fused_epilogues(bool on);
// SPIKEMESH_FUSE applied (InputError naming it when it is not 0 or 1).
void apply_fused_epilogues_env();

// Whether a forward under ctx may run fused (not the recompute of a memopt time chunk's
// backward; BatchNorm::forward_into checks it too).
bool fusable_forward(const Ctx& ctx);

// What decides whether a batch norm and the layer after it run fused (a pure function of
// these facts; try_fused_forward gathers them):
//  CPU: a neuron or max pooling ([T, N, C, H, W] input) after it, f32 or f64;
//  GPU: a neuron after it, f32, bf16 or f16, an input that is not a spike tensor (the neuron
//       keeps it by reference), and no layer profile (its rows time each layer on the host);
//  both: SPIKEMESH_FUSE on, a fusable forward, no tensor-parallel sample sharding on either.
struct FuseQuery {
  bool enabled = true;        // fused_epilogues()
  bool fusable = true;        // fusable_forward(ctx)
  bool unsharded = true;      // neither layer sequence-parallel sharded
  bool on_gpu = false;        // the input is a CUDA tensor
  bool next_is_neuron = false;
  bool next_is_max_pool = false;
  bool input_is_spikes = false;
  bool profiling = false;     // layer_profile_enabled()
  DType dtype = DType::F32;
  int ndim = 0;
};
bool fused_epilogue_applies(const FuseQuery& q);

// When (a, b) qualify for x under ctx: runs them fused into y (profiled as one row,
// "<a type>+<b type>", on the CPU) and returns true; otherwise false, nothing run.
bool try_fused_forward(Layer& a, Layer& b, const Tensor& x, Ctx& ctx, Tensor& y);

}  // namespace sm
