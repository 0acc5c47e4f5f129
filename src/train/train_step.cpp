// train_step.cpp — the single-batch training and evaluation steps, and their micro-batch /
// data-parallel forms (hooks of parallel/strategy.h around every unit).
#include "spikemesh/train/train_step.h"

#include "spikemesh/core/cuda_amp.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/strategy.h"
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
  synchronize(model.device());  // CUDA: the phase time is the device's
  r.backward_ms = t.ms();
  t.reset();
  if (clip_norm > 0) r.grad_norm = clip_grad_norm(model.params(), clip_norm);
  opt.step();
  synchronize(model.device());
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

namespace {
// Forward through every unit with the strategy's hooks. x: [T, N, ...input_shape].
Tensor forward_units(Model& model, const Tensor& x, Ctx& ctx, ParallelStrategy& s) {
  const Shape& sh = x.shape();
  Shape per_sample(sh.begin() + std::min<size_t>(2, sh.size()), sh.end());
  if (sh.size() < 2 || per_sample != model.info.input_shape)
    SM_INPUT_ERROR("model '" << model.info.name << "' expects input [T, N, "
                             << shape_str(model.info.input_shape).substr(1) << ", got " << shape_str(sh));
  Tensor h = x;  // [T, N, ...]
  for (size_t k = 0; k < model.units.size(); ++k) {
    s.before_forward(k, ctx.training);
    h = model.units[k]->forward(h, ctx);
    s.after_forward(k, ctx.training);
  }
  return h;  // [T, N, num_classes]
}

void backward_units(Model& model, const Tensor& dy, Ctx& ctx, ParallelStrategy& s) {
  Tensor g = dy;  // [T, N, num_classes]
  for (size_t k = model.units.size(); k-- > 0;) {
    s.before_backward(k);
    g = model.units[k]->backward_input(g, ctx);
    s.after_backward(k);
  }
}
}  // namespace

StepResult train_step_micro(Model& model, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                            const StepOptions& o) {
  SM_CHECK(!micro.empty(), "a training step needs at least one micro-batch");
  const bool scaling = o.scaler != nullptr && o.scaler->enabled();
  if (!o.strategy && micro.size() == 1 && !scaling) {
    ctx.sample_offset = micro[0].sample_offset;
    return train_step(model, opt, micro[0].x, micro[0].y, ctx, o.clip_norm);
  }
  ParallelStrategy* s = o.strategy;
  const size_t M = micro.size();
  const double scale = 1.0 / static_cast<double>(M);
  StepResult r;
  Timer t;
  if (s)
    s->begin_step();
  else
    model.zero_grad();
  r.reset_ms += t.ms();
  double loss_sum = 0;
  for (size_t m = 0; m < M; ++m) {
    t.reset();
    model.reset_state();
    ctx.training = true;
    ctx.sample_offset = micro[m].sample_offset;
    if (s) s->begin_micro(m + 1 == M);
    r.reset_ms += t.ms();
    t.reset();
    Tensor out = s ? forward_units(model, micro[m].x, ctx, *s) : model.forward(micro[m].x, ctx);  // [T, N, K]
    LossResult lr = model.loss->forward(out, micro[m].y);
    r.forward_ms += t.ms();
    t.reset();
    Tensor dout = model.loss->backward(scale * (scaling ? o.scaler->scale() : 1.0));
    if (s) {
      backward_units(model, dout, ctx, *s);
      s->end_backward();
    } else {
      model.backward(dout, ctx);
    }
    synchronize(model.device());
    r.backward_ms += t.ms();
    loss_sum += lr.loss;
    r.correct += lr.correct;
    r.count += lr.count;
  }
  t.reset();
  std::vector<Param*> params = s ? s->optimizer_params() : model.params();
  Collectives* shard_group = s ? s->shard_group() : nullptr;
  bool finite = true;
  if (scaling) {
    std::vector<Tensor*> grads;
    for (Param* p : params) grads.push_back(&p->grad);
    finite = o.scaler->unscale_and_check(grads);
    if (shard_group) {  // shards differ: skip on every rank when any rank saw a non-finite value
      Tensor bad = Tensor::full({1}, finite ? 0.0 : 1.0, DType::F64);  // [1], host
      shard_group->all_reduce_sum(bad);                                // collective over the shard group
      finite = bad.data<double>()[0] == 0.0;
    }
    o.scaler->update(finite);
  }
  if (finite) {
    if (o.clip_norm > 0) r.grad_norm = clip_grad_norm(params, o.clip_norm, shard_group);
    opt.step();
  }
  if (s) s->after_optimizer_step();
  synchronize(model.device());
  r.optimizer_ms = t.ms();
  r.loss = loss_sum / static_cast<double>(M);
  return r;
}

StepResult eval_step_micro(Model& model, const Tensor& x, const Tensor& y, Ctx& ctx, ParallelStrategy* s) {
  if (!s) return eval_step(model, x, y, ctx);
  StepResult r;
  Timer t;
  const bool was = ctx.training;
  ctx.training = false;
  if (x.ndim() >= 2 && x.dim(1) > 0) {
    model.reset_state();
    Tensor out = forward_units(model, x, ctx, *s);
    LossResult lr = model.loss->forward(out, y);
    r.loss = lr.loss;
    r.correct = lr.correct;
    r.count = lr.count;
  } else {  // no samples here: only the strategy's collectives, in unit order
    for (size_t k = 0; k < model.units.size(); ++k) {
      s->before_forward(k, false);
      s->after_forward(k, false);
    }
  }
  ctx.training = was;
  r.forward_ms = t.ms();
  return r;
}

}  // namespace sm
