// train_step.h — one optimizer step on one batch, shared by the trainer and the benchmark:
// reset neuron state, zero grads, forward, loss, backward, optional clipping, update.
// Times each phase (host clock; the CUDA back end adds events).
// The micro-batch form adds gradient accumulation and the data-parallel strategy hooks
// (parallel/strategy.h) around every unit; with one micro-batch and no strategy it performs
// exactly the operations of train_step().
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"

namespace sm {

class Model;
class Optimizer;
class ParallelStrategy;
class Collectives;
class LossScaler;

struct StepResult {
  double loss = 0.0;
  int64_t correct = 0, count = 0;
  double reset_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double grad_norm = 0.0;  // before clipping; 0 when clipping is off
};

// x: [T, N, ...] in the model dtype, y: [N] i64. `ctx` carries seed, step, sample_offset.
// grad_scale multiplies the loss gradient (data parallel: local/global batch).
StepResult train_step(Model& model, Optimizer& opt, const Tensor& x, const Tensor& y, Ctx& ctx,
                      double clip_norm = 0.0, double grad_scale = 1.0);

// Forward only, in eval mode: loss/accuracy of one batch (stats() then hold its firing rates).
StepResult eval_step(Model& model, const Tensor& x, const Tensor& y, Ctx& ctx);

// One micro-batch of a step: x [T, n, ...], y [n], and the position of its first sample in the
// step's global batch (ctx.sample_offset: dropout masks do not depend on the layout).
struct MicroBatch {
  Tensor x, y;
  int64_t sample_offset = 0;
};

struct StepOptions {
  double clip_norm = 0.0;                 // 0: off
  ParallelStrategy* strategy = nullptr;   // null: one rank, no hooks
  LossScaler* scaler = nullptr;           // fp16: dynamic loss scaling (null or disabled: none)
};

// One optimizer step over M >= 1 micro-batches (gradient accumulation): gradients are zeroed
// once; each micro-batch resets the neuron state and runs forward, loss and backward with
// the loss gradient scaled by 1/M; the strategy (if any) reduces gradients (strategy.h);
// then clipping (over the strategy's shard group when sharded) and the optimizer step.
// With an enabled scaler the loss gradient is also multiplied by scaler->scale(); the
// optimizer's gradients are unscaled and checked, and a non-finite one (on any rank of the
// shard group) skips clipping and the update on every rank before scaler->update() (which
// counts the skip). On a CUDA model the host waits for the device after backward and after
// the update, so the phase times are the device's.
// Collective over the strategy's dp comm when a strategy is given (and over ctx.bn_sync's
// group when set). Result: loss = mean of the micro-batch losses, correct/count summed.
StepResult train_step_micro(Model& model, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                            const StepOptions& opts);

// Eval forward of this rank's part of a batch with the strategy's hooks; x may hold zero
// samples (the rank then only takes part in the strategy's collectives; result count 0).
StepResult eval_step_micro(Model& model, const Tensor& x, const Tensor& y, Ctx& ctx, ParallelStrategy* strategy);

}  // namespace sm
