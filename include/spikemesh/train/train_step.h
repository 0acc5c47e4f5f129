// train_step.h — one optimizer step on one batch, shared by the trainer and the benchmark:
// reset neuron state, zero grads, forward, loss, backward, optional clipping, update.
// Times each phase (host clock; the CUDA back end adds events).
#pragma once
#include <cstdint>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"

namespace sm {

class Model;
class Optimizer;

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

}  // namespace sm
