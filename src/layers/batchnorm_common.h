// batchnorm_common.h — what BatchNorm's CPU hooks (batchnorm.cpp, the reference) and CUDA hooks
// (batchnorm_cuda.cpp) share: the kernels' view of the input, the fields every slot keeps and
// the checks at the start of forward and B. The devices keep a slot's statistics in different
// forms (host vectors; device rows of doubles, with a read-back decision and graph-capture
// guards), so each device has its own hooks, split into the same named phases (forward:
// add_piece_moments, batch_statistics, forward_fused, normalize_and_save); the CPU's are the
// reference.
// Invariant: a slot's act is defined from forward until B (it is released by a split B; W then
// needs only the per-channel parameter gradients each device keeps in its own form).
#pragma once
#include "spikemesh/kernels/cpu/batchnorm.h"
#include "spikemesh/layers/batchnorm.h"

namespace sm::bn_detail {

// [T, N, C, ...spatial] as the kernels see it: outer = T·N, channels = C, inner = spatial.
cpu::BnShape bn_shape(const Tensor& x);

// The fields both devices keep per slot.
struct SavedBase {
  Tensor act;                 // [T, N, C, ...] output y (saved_output) or input x; released by a split B
  bool saved_output = false;  // act is y: x - μ = (y - y_offset[c]) / y_scale[c]
  double count = 0.0;         // elements per channel (whole group when synced)
  bool batch_stats = true;    // training mode (batch statistics) in forward
  bool synced = false;        // forward all-reduced its statistics
  double time_repeat = 1.0;   // ctx.time_repeat of the forward: the input stood for this many steps
};

// Forward: x is [T, N, C, ...] fitting the layer (Input errors) in an activation dtype of its device.
void check_input(const BatchNorm& bn, const Tensor& x);
// Starts a slot's SavedBase for a forward under ctx.
void begin_saved(SavedBase& sv, const Ctx& ctx);
// B: the slot still holds its tensor, dy matches it, and the synced-BN setting is the forward's.
void check_backward(const SavedBase& sv, const Tensor& dy, const Ctx& ctx);

}  // namespace sm::bn_detail
