// train_step.h — one optimizer step and one evaluation batch, driven through a Layout
// (parallel/layout.h): the ONE path of every layout, shared by the trainer and the bench.
// Timed per phase (host clock; on a GPU the layout waits for the device after backward and
// the step waits after the update, so the times are the device's).
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/parallel/layout.h"

namespace sm {

class Optimizer;
class LossScaler;

struct StepResult {
  double loss = 0.0;  // mean of the microbatch losses (this rank)
  int64_t correct = 0, count = 0;
  double reset_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double grad_norm = 0.0;  // before clipping; 0 when clipping is off
  std::vector<int64_t> class_correct, class_count;  // eval_step with the loss's per-class counts on
  std::vector<double> time_mean;                    // eval_step: [n, K] output mean over T (LossResult's)
};

struct StepOptions {
  double clip_norm = 0.0;        // 0: off
  LossScaler* scaler = nullptr;  // fp16: dynamic loss scaling (null or disabled: none)
};

// One optimizer step over M >= 1 microbatches (gradient accumulation): layout.begin_step()
// (zero gradients); every microbatch's forward, loss and backward (layout.run_microbatches:
// one after another, or the pipeline schedule) with the loss
// gradient scaled by 1/M (times the loss scale when scaling); then unscale and check (a
// non-finite gradient on any rank of the layout's shard group skips clipping and the update
// on every rank), clipping by the global norm over the shard group, the optimizer step on
// layout.optimizer_params(), layout.after_optimizer_step(). Collective over the layout's dp
// group (and ctx's BN group). `opt` must step layout.optimizer_params().
StepResult train_step(Layout& layout, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                      const StepOptions& opts = {});

// The part of train_step after the gradients: unscale and check (fp16), clipping, the
// optimizer step, layout.after_optimizer_step(), a device synchronisation; sets
// r.grad_norm and r.optimizer_ms. Shared with the CUDA-graph step (train/graph_step_cuda.h).
void optimizer_phase(Layout& layout, Optimizer& opt, const StepOptions& opts, StepResult& r);

// Eval-mode forward of this rank's part of a batch (x may hold no samples: count 0);
// stage stats() then hold its firing rates. Collective over the layout's dp group.
StepResult eval_step(Layout& layout, const Tensor& x, const Tensor& y, Ctx& ctx);

}  // namespace sm
