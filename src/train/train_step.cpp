// train_step.cpp — the single-batch training and evaluation steps.
#include "spikemesh/train/train_step.h"

#include "spikemesh/core/timer.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/grad_clip.h"
#include "spikemesh/train/optimizer.h"

namespace sm {

StepResult train_step(Model& model, Optimizer& opt, const Tensor& x, const Tensor& y, Ctx& ctx, double clip_norm,
                      double grad_scale) {
  StepResult r;
  Timer t;
  model.reset_state();
  model.zero_grad();
  r.reset_ms = t.ms();
  t.reset();
  ctx.training = true;
  Tensor out = model.forward(x, ctx);  // [T, N, K]
  LossResult lr = model.loss->forward(out, y);
  r.forward_ms = t.ms();
  t.reset();
  Tensor dout = model.loss->backward(grad_scale);
  model.backward(dout, ctx);
  r.backward_ms = t.ms();
  t.reset();
  if (clip_norm > 0) r.grad_norm = clip_grad_norm(model.params(), clip_norm);
  opt.step();
  r.optimizer_ms = t.ms();
  r.loss = lr.loss;
  r.correct = lr.correct;
  r.count = lr.count;
  return r;
}

StepResult eval_step(Model& model, const Tensor& x, const Tensor& y, Ctx& ctx) {
  StepResult r;
  Timer t;
  model.reset_state();
  bool was = ctx.training;
  ctx.training = false;
  Tensor out = model.forward(x, ctx);
  ctx.training = was;
  LossResult lr = model.loss->forward(out, y);
  r.forward_ms = t.ms();
  r.loss = lr.loss;
  r.correct = lr.correct;
  r.count = lr.count;
  return r;
}

}  // namespace sm
