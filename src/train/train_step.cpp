// train_step.cpp — one optimizer step over microbatches and one evaluation batch through
// the layout's single forward/backward path (train_step.h).
#include "spikemesh/train/train_step.h"

#include "spikemesh/core/device.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/models/model.h"
#include "spikemesh/optim/grad_clip.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

namespace {
// Unscales the gradients of `params` and agrees over `group` (when the holders are disjoint
// shards) whether all are finite; updates the scaler. Collective over `group` when non-null.
bool unscale_and_agree(LossScaler& scaler, const std::vector<Param*>& params, Collectives* group) {
  std::vector<Tensor*> grads;
  for (Param* p : params) grads.push_back(&p->grad);
  bool finite = scaler.unscale_and_check(grads);
  if (group) {  // shards differ: skip on every rank when any rank saw a non-finite value
    Tensor bad = Tensor::full({1}, finite ? 0.0 : 1.0, DType::F64);  // [1], host
    group->all_reduce_sum(bad);
    finite = bad.data<double>()[0] == 0.0;
  }
  scaler.update(finite);
  return finite;
}
}  // namespace

StepResult train_step(Layout& layout, Optimizer& opt, const std::vector<MicroBatch>& micro, Ctx& ctx,
                      const StepOptions& o) {
  SM_CHECK(!micro.empty(), "a training step needs at least one micro-batch");
  const bool scaling = o.scaler != nullptr && o.scaler->enabled();
  const size_t M = micro.size();
  const double loss_grad_scale = (scaling ? o.scaler->scale() : 1.0) / static_cast<double>(M);
  StepResult r;
  Timer t;
  layout.begin_step();
  r.reset_ms = t.ms();
  double loss_sum = 0;
  for (const MicroResult& mr : layout.run_microbatches(micro, ctx, loss_grad_scale)) {  // pp: the schedule
    r.reset_ms += mr.reset_ms;
    r.forward_ms += mr.forward_ms;
    r.backward_ms += mr.backward_ms;
    loss_sum += mr.loss.loss;
    r.correct += mr.loss.correct;
    r.count += mr.loss.count;
  }
  optimizer_phase(layout, opt, o, r);
  r.loss = loss_sum / static_cast<double>(M);
  return r;
}

void optimizer_phase(Layout& layout, Optimizer& opt, const StepOptions& o, StepResult& r) {
  Timer t;
  const bool scaling = o.scaler != nullptr && o.scaler->enabled();
  const std::vector<Param*> params = layout.optimizer_params();
  Collectives* norm_group = layout.norm_group();  // the holders' shards (dp) and tp
  const bool finite = scaling ? unscale_and_agree(*o.scaler, params, norm_group) : true;
  if (finite) {
    if (o.clip_norm > 0) {
      const std::vector<Param*> counted = layout.norm_params();
      r.grad_norm = clip_grad_norm(params, o.clip_norm, norm_group, &counted);
    }
    opt.step();
  }
  layout.after_optimizer_step();
  synchronize(layout.model().device());
  r.optimizer_ms = t.ms();
}

StepResult eval_step(Layout& layout, const Tensor& x, const Tensor& y, Ctx& ctx) {
  const MicroResult mr = layout.evaluate(x, y, ctx);
  StepResult r;
  r.forward_ms = mr.forward_ms;
  r.loss = mr.loss.loss;
  r.correct = mr.loss.correct;
  r.count = mr.loss.count;
  r.class_correct = mr.loss.class_correct;
  r.class_count = mr.loss.class_count;
  r.time_mean = mr.loss.time_mean;
  return r;
}

}  // namespace sm
