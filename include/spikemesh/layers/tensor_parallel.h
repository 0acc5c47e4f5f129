// tensor_parallel.h — the tensor-parallel rules of the weight layers (Conv2d, Conv1d,
// Linear; layers/weight_layer.h), in one place. A weight [Cout, Cin, ...] is TP-sharded when
// ctx.tp is set and its ShardSpec splits it over the TP group (group TP or TPxDP):
//  colwise — split on dim 0 (output channels), the bias sharded alike. Every rank sees the
//            whole input and computes its own output channels; backward all-reduces dx over
//            ctx.tp (each rank's dx sums over its output channels only).
//  rowwise — split on dim 1 (input channels), the bias replicated. The input holds this
//            rank's channel shard; forward all-reduces the partial outputs over ctx.tp and
//            then adds the bias ONCE; dy is whole on every rank, so dx needs no reduction.
//  colwise, gathered — a colwise layer without a rowwise partner (an unpaired layer: a
//            positional-encoding conv before a residual, a classifier): its output channels are
//            all-gathered over ctx.tp into the whole output (the layers after it see whole
//            activations); backward takes this rank's channel block of the whole dy and
//            all-reduces dx as colwise does. Only its weight memory is split.
// Weight gradients need no communication: each rank owns its shard's gradient, and a
// replicated (rowwise) bias gets the same full gradient from the whole dy on every rank.
// Kernels always run on this rank's local weight shape.
#pragma once
#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/param.h"

namespace sm {

enum class TpMode { None, Colwise, Rowwise };

TpMode tp_mode(const Param& weight, const Ctx& ctx);
// The weight dimension a mode splits: 0 colwise, 1 rowwise, -1 none.
int tp_split_dim(TpMode m);

// Where the output channels sit in a layer output y: [outer, channels, inner].
struct ChannelLayout {
  int64_t outer = 0, channels = 0, inner = 1;
};

// How one forward adds its bias.
struct TpForward {
  TpMode mode = TpMode::None;
  const Param* weight = nullptr;        // names the layer in --tp-debug-comm lines
  const Tensor* kernel_bias = nullptr;  // the kernel adds this one itself
  const Tensor* late_bias = nullptr;    // tp_finish_forward adds this one (after the reduction)
};
// bias: the layer's bias parameter or nullptr. kernel_adds_bias: the device's forward kernel
// can fuse a bias (it never does for rowwise: the bias must follow the reduction).
TpForward tp_forward_plan(const Param& weight, const Param* bias, const Ctx& ctx, bool kernel_adds_bias);
// After the local forward kernel: rowwise all-reduce of y over ctx.tp, then the late bias.
// (A rowwise layer starting a sample-sharded region reduce-scatters step by step instead:
// weight_layer_flow.h.)
void tp_finish_forward(const TpForward& plan, Ctx& ctx, Tensor& y, const ChannelLayout& layout);
// --tp-debug-comm: the first time `weight`'s layer communicates in `direction`, tp rank 0
// prints one line (layer, direction, op, payload bytes, group size).
void tp_debug_note(const Ctx& ctx, const Param& weight, const char* direction, size_t bytes, const char* op);
// After the local data gradient: colwise all-reduce of dx over ctx.tp, unless `defer` (the
// sharded region before it reduce-scatters the partial sums instead).
void tp_finish_backward_input(const Param& weight, Ctx& ctx, Tensor& dx, bool defer = false);

// Colwise, gathered: y_local [outer, Cout/tp, inner] all-gathered over ctx.tp (collective
// over tp) into the whole output of shape `whole` [outer, Cout, inner], rank r's block at
// channels [r·Cout/tp, (r+1)·Cout/tp).
Tensor tp_gather_channels(Ctx& ctx, const Param& weight, const Tensor& y_local, const Shape& whole,
                          const ChannelLayout& local);
// Its backward's first step: this rank's channel block [outer, Cout/tp, inner] (shape
// `local_shape`) of the whole output gradient dy [outer, Cout, inner]. No communication.
Tensor tp_channel_block(const Ctx& ctx, const Tensor& dy, const Shape& local_shape, const ChannelLayout& local);

// y[o, c, i] += bias[c], on y's device (CPU: f32/f64 with a bias of y's dtype; CUDA: f32,
// bf16 or f16 activations with the f32 master bias).
void add_channel_bias(Tensor& y, const Tensor& bias, const ChannelLayout& layout);

}  // namespace sm
