// pp_runtime.cpp — the pipeline runtime (pp_runtime.h): one loop over this rank's actions,
// each run by its kind's handler (run_forward, run_backward_input, ...) over the step's
// StepState. Invariants: handlers run in schedule order; each slot of StepState is filled by
// one action and released by its consumer; every send completes before train() returns.
#include "spikemesh/parallel/pipeline/pp_runtime.h"

#include <chrono>
#include <memory>

#include "spikemesh/comm/comm.h"
#include "spikemesh/core/device.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/layout.h"

namespace sm {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

PipelineRuntime::PipelineRuntime(Stage& stage, Comm& pp, const PpSchedule& schedule,
                                 const std::vector<int>& units_per_stage, const std::vector<Shape>& unit_out_shapes,
                                 Loss* loss, PpTransport transport)
    : stage_(stage), pp_(pp), schedule_(schedule), units_per_stage_(units_per_stage), loss_(loss) {
  const int S = schedule.logical_stages();
  SM_CHECK(static_cast<int>(units_per_stage.size()) == S,
           "pipeline partition has " << units_per_stage.size() << " stages for a schedule of " << S);
  SM_CHECK(pp.size() == schedule.ranks, "pipeline comm of " << pp.size() << " ranks for a schedule of " << schedule.ranks);
  SM_CHECK(static_cast<int>(stage.chunks()) == schedule.virtual_stages,
           "pipeline rank holds " << stage.chunks() << " chunks, the schedule " << schedule.virtual_stages);
  Model& model = stage.model();
  const std::vector<Shape>& outs = unit_out_shapes;
  SM_CHECK(outs.size() == model.units.size(), "pipeline: " << outs.size() << " unit shapes for " << model.units.size());
  size_t u = 0;
  for (int s = 0; s < S; ++s) {
    u += static_cast<size_t>(units_per_stage[s]);
    boundary_shape_.push_back(outs[u - 1]);
    spikes_.push_back(model.units[u - 1]->emits_spikes());
  }
  check_pp_message_tags(schedule);
  transfer_ = std::make_unique<PpTransfer>(pp_, schedule_, transport);
}

PipelineRuntime::~PipelineRuntime() = default;

void check_pp_message_tags(const PpSchedule& schedule) {
  const int S = schedule.logical_stages();
  const int64_t tags = 2LL * S * schedule.microbatches + S;  // forward, backward, evaluation
  if (tags > 32767)
    SM_INPUT_ERROR("pipeline: " << S << " logical stages x " << schedule.microbatches
                                << " microbatches need more message tags than MPI guarantees (32767); use fewer "
                                   "--pp-microbatches or --pp-virtual-stages");
}

// One train() call's working state. Slots are indexed [s·M + m] by logical stage and
// microbatch; a slot holds a tensor only between the action that fills it and the one that
// consumes it (then it is released), so every slot is empty again when the step ends.
struct PipelineRuntime::StepState {
  // Gradient hooks see a unit's after_backward only with its stage's last backward.
  struct FinalPassHooks : UnitHooks {
    UnitHooks* inner = nullptr;
    bool final_pass = false;
    void after_backward(size_t k) override {
      if (inner && final_pass) inner->after_backward(k);
    }
  };

  StepState(const std::vector<MicroBatch>& mb, Ctx& c, double scale, UnitHooks* grad_hooks, int stages,
            int microbatches, Device d, const std::vector<Shape>& boundary_shape)
      : micro(mb), ctx(c), loss_grad_scale(scale), S(stages), M(microbatches), dev(d), act(mb[0].x.dtype()),
        boundary(boundary_shape), out(S * M), in(S * M), gin(S * M), gout(S * M), posted(2 * S * M),
        backward_done(S, 0) {
    hooks.inner = grad_hooks;
    res.losses.assign(M, LossResult{});
  }

  size_t idx(int s, int m) const { return static_cast<size_t>(s) * M + m; }
  int fwd_tag(int s_low, int m) const { return s_low * M + m; }
  int bwd_tag(int s_low, int m) const { return S * M + s_low * M + m; }
  Shape shape_of(int s, int m) const {  // the activation leaving stage s for microbatch m
    Shape sh{static_cast<int64_t>(micro[m].x.dim(0)), micro[m].y.numel()};
    sh.insert(sh.end(), boundary[s].begin(), boundary[s].end());
    return sh;
  }

  const std::vector<MicroBatch>& micro;
  Ctx& ctx;
  const double loss_grad_scale;
  const int S, M;
  const Device dev;  // where the stage's layers run
  const DType act;   // the activations' dtype
  const std::vector<Shape>& boundary;
  std::vector<Tensor> out;   // F's output of (s, m), until SEND_F or the next local F
  std::vector<Tensor> in;    // RECV_F's activation for (s, m), until F
  std::vector<Tensor> gin;   // RECV_B's output gradient for (s, m), until B/BW
  std::vector<Tensor> gout;  // B/BW's input gradient of (s, m), until SEND_B or the local B/BW
  std::vector<PostedRecv> posted;  // [0, S·M): RECV_F by (s, m); then RECV_B
  std::vector<PendingSend> sends;  // in flight until they test complete (or the step ends)
  std::vector<int> backward_done;  // per logical stage: weight-gradient passes run (W or BW)
  FinalPassHooks hooks;
  PpStepOutcome res;
  double action_start = 0;  // now_s() when the current action started
};

PpStepOutcome PipelineRuntime::train(const std::vector<MicroBatch>& micro, Ctx& ctx, double loss_grad_scale,
                                     UnitHooks* grad_hooks) {
  const int S = schedule_.logical_stages(), M = schedule_.microbatches;
  SM_CHECK(static_cast<int>(micro.size()) == M, "pipeline step with " << micro.size() << " microbatches for a schedule of " << M);
  const std::vector<PpAction>& actions = schedule_.per_rank[pp_.rank()];
  const Device dev = stage_.model().device();
  transfer_->prepare(dev);  // collective over pp the first time: picks the path (pp_transfer.h)
  StepState st(micro, ctx, loss_grad_scale, grad_hooks, S, M, dev, boundary_shape_);
  timeline_.clear();
  post_receives_ahead(actions, 0, st);
  for (size_t i = 0; i < actions.size(); ++i) {
    const PpAction& a = actions[i];
    if (is_compute(a.kind)) post_receives_ahead(actions, i + 1, st);
    PpRecordedAction rec{a, now_s(), 0};
    st.action_start = rec.start;
    ctx.slot = a.microbatch;
    ctx.sample_offset = micro[a.microbatch].sample_offset;
    run_action(a, st);
    rec.end = now_s();
    timeline_.push_back(rec);
    for (PendingSend& p : st.sends)  // let MPI progress the sends in flight; a finished one frees its buffer
      if (p.handle && p.handle->test()) p = PendingSend{};
  }
  for (PendingSend& p : st.sends)
    if (p.handle) p.handle->wait();
  ctx.slot = 0;
  return std::move(st.res);
}

void PipelineRuntime::run_action(const PpAction& a, StepState& st) {
  switch (a.kind) {
    case PpActionKind::F: return run_forward(a, st);
    case PpActionKind::B:
    case PpActionKind::BW: return run_backward_input(a, st);
    case PpActionKind::W: return run_backward_weight(a, st);
    case PpActionKind::SEND_F: return run_send_forward(a, st);
    case PpActionKind::SEND_B: return run_send_backward(a, st);
    case PpActionKind::RECV_F:
    case PpActionKind::RECV_B: return run_receive(a, st);
  }
}

// Posts the receives from action `from` up to the next compute action (they overlap the
// compute action that precedes them).
void PipelineRuntime::post_receives_ahead(const std::vector<PpAction>& actions, size_t from, StepState& st) {
  for (size_t j = from; j < actions.size(); ++j) {
    const PpActionKind k = actions[j].kind;
    if (k == PpActionKind::RECV_F || k == PpActionKind::RECV_B) post_receive(actions[j], st);
    if (is_compute(k)) break;
  }
}

// Posts a's receive once (point-to-point from the neighbouring pp rank, pp_transfer.h).
void PipelineRuntime::post_receive(const PpAction& a, StepState& st) {
  const bool fwd = a.kind == PpActionKind::RECV_F;
  PostedRecv& r = st.posted[(fwd ? 0 : st.S * st.M) + st.idx(a.stage, a.microbatch)];
  if (r.handle) return;  // already posted
  const int peer = fwd ? schedule_.rank_of_stage(a.stage - 1) : schedule_.rank_of_stage(a.stage + 1);
  const int src_stage = fwd ? a.stage - 1 : a.stage;  // the boundary's lower stage
  const int tag = fwd ? st.fwd_tag(src_stage, a.microbatch) : st.bwd_tag(src_stage, a.microbatch);
  r = transfer_->post(st.shape_of(src_stage, a.microbatch), st.act, fwd && spikes_[src_stage], peer, tag, fwd);
}

// Starts an asynchronous point-to-point send to pp rank `peer` (pp_transfer.h) and counts it.
void PipelineRuntime::send_message(const Tensor& t, int peer, int tag, bool as_bits, bool activation, StepState& st) {
  PendingSend p = transfer_->send(t, peer, tag, activation, as_bits, &traffic_);
  if (as_bits) {
    traffic_.spike_elements += static_cast<uint64_t>(t.numel());
    traffic_.spike_bytes += p.keep.nbytes();
  }
  if (activation) {
    traffic_.activation_elements += static_cast<uint64_t>(t.numel());
    traffic_.activation_bytes += p.keep.nbytes();
  } else {
    traffic_.gradient_bytes += p.keep.nbytes();
  }
  st.sends.push_back(std::move(p));
}

void PipelineRuntime::run_forward(const PpAction& a, StepState& st) {
  const int s = a.stage, m = a.microbatch;
  Tensor& in = st.in[st.idx(s, m)];
  Tensor x = s == 0 ? st.micro[m].x : in.defined() ? in : st.out[st.idx(s - 1, m)];
  SM_CHECK(x.defined(), "pipeline: F" << s << "," << m << " has no input");
  in = Tensor();
  if (s > 0) st.out[st.idx(s - 1, m)] = Tensor();
  const size_t c = static_cast<size_t>(s / schedule_.ranks);
  const double t0 = now_s();
  stage_.reset_state(c);  // neuron state at rest for every microbatch on every stage
  const double t1 = now_s();
  st.ctx.split_wgrad = false;
  st.ctx.model_input_grad_unused = s == 0;  // as its backward says
  Tensor y = stage_.forward_chunk(c, x, st.ctx);  // [T, n, ...stage output]
  st.ctx.model_input_grad_unused = false;
  if (s == st.S - 1) {
    st.res.losses[m] = loss_->forward(y, st.micro[m].y, m, st.micro[m].target);
  } else {
    SM_CHECK(y.shape() == st.shape_of(s, m), "pipeline: stage " << s << " produced " << shape_str(y.shape())
                                                                 << ", expected " << shape_str(st.shape_of(s, m)));
    st.out[st.idx(s, m)] = y;
  }
  synchronize(st.dev);
  st.res.reset_ms += 1000.0 * (t1 - t0);
  st.res.forward_ms += 1000.0 * (now_s() - t1);
}

// B (input gradient, weight half kept for W) and BW (both halves).
void PipelineRuntime::run_backward_input(const PpAction& a, StepState& st) {
  const int s = a.stage, m = a.microbatch;
  Tensor dy;
  if (s == st.S - 1) {
    dy = loss_->backward(st.loss_grad_scale, m);  // [T, n, K]
  } else {
    Tensor& gin = st.gin[st.idx(s, m)];
    dy = gin.defined() ? gin : st.gout[st.idx(s + 1, m)];
    gin = Tensor();
    st.gout[st.idx(s + 1, m)] = Tensor();
  }
  SM_CHECK(dy.defined(), "pipeline: " << to_text(a) << " has no output gradient");
  st.ctx.split_wgrad = a.kind == PpActionKind::B;
  if (a.kind == PpActionKind::BW) st.hooks.final_pass = ++st.backward_done[s] == st.M;
  st.ctx.input_grad_unused = s == 0;  // the model's input: nothing reads its gradient
  Tensor dx = stage_.backward_input_chunk(static_cast<size_t>(s / schedule_.ranks), dy, st.ctx, &st.hooks);
  st.ctx.input_grad_unused = false;
  if (s > 0) st.gout[st.idx(s, m)] = dx;  // [T, n, ...stage input]
  st.ctx.split_wgrad = false;
  synchronize(st.dev);
  st.res.backward_ms += 1000.0 * (now_s() - st.action_start);
}

void PipelineRuntime::run_backward_weight(const PpAction& a, StepState& st) {
  st.ctx.split_wgrad = true;
  st.hooks.final_pass = ++st.backward_done[a.stage] == st.M;
  stage_.backward_weight_chunk(static_cast<size_t>(a.stage / schedule_.ranks), st.ctx, &st.hooks);
  st.ctx.split_wgrad = false;
  synchronize(st.dev);
  st.res.backward_ms += 1000.0 * (now_s() - st.action_start);
}

void PipelineRuntime::run_send_forward(const PpAction& a, StepState& st) {
  const int s = a.stage, m = a.microbatch;
  Tensor& y = st.out[st.idx(s, m)];
  SM_CHECK(y.defined(), "pipeline: " << to_text(a) << " before its forward");
  send_message(y, schedule_.rank_of_stage(s + 1), st.fwd_tag(s, m), spikes_[s], true, st);
  y = Tensor();
}

void PipelineRuntime::run_send_backward(const PpAction& a, StepState& st) {
  const int s = a.stage, m = a.microbatch;
  Tensor& g = st.gout[st.idx(s, m)];
  SM_CHECK(g.defined(), "pipeline: " << to_text(a) << " before its backward");
  send_message(g, schedule_.rank_of_stage(s - 1), st.bwd_tag(s - 1, m), false, false, st);
  g = Tensor();
}

// RECV_F fills `in`, RECV_B fills `gin` (the receive was posted ahead; posted here otherwise).
void PipelineRuntime::run_receive(const PpAction& a, StepState& st) {
  const bool fwd = a.kind == PpActionKind::RECV_F;
  const double t0 = now_s();
  post_receive(a, st);
  PostedRecv& r = st.posted[(fwd ? 0 : st.S * st.M) + st.idx(a.stage, a.microbatch)];
  Tensor t = transfer_->take(r, st.shape_of(fwd ? a.stage - 1 : a.stage, a.microbatch), st.act, &traffic_);
  (fwd ? st.in : st.gin)[st.idx(a.stage, a.microbatch)] = std::move(t);
  st.res.wait_ms += 1000.0 * (now_s() - t0);
}

LossResult PipelineRuntime::evaluate(const Tensor& x, const Tensor& y, Ctx& ctx) {
  const int P = schedule_.ranks, S = schedule_.logical_stages(), M = schedule_.microbatches;
  const int me = pp_.rank();
  const Device dev = stage_.model().device();
  const DType act = x.dtype();
  transfer_->prepare(dev);  // collective over pp the first time
  LossResult r;
  Tensor h;  // the activation handed between consecutive stages on this rank
  std::vector<PendingSend> sends;
  ctx.slot = 0;
  for (int s = 0; s < S; ++s) {
    if (schedule_.rank_of_stage(s) != me) continue;
    Tensor in = x;
    if (s > 0) {
      const int prev = schedule_.rank_of_stage(s - 1);
      if (prev == me) {
        in = h;
      } else {
        Shape sh{x.dim(0), y.numel()};  // [T, n, ...boundary]
        sh.insert(sh.end(), boundary_shape_[s - 1].begin(), boundary_shape_[s - 1].end());
        PostedRecv rv = transfer_->post(sh, act, spikes_[s - 1], prev, 2 * S * M + s - 1, true);  // spikes as bits
        in = transfer_->take(rv, sh, act, nullptr);
      }
    }
    stage_.reset_state(static_cast<size_t>(s / P));
    h = stage_.forward_chunk(static_cast<size_t>(s / P), in, ctx);
    if (s == S - 1) {
      r = loss_->forward(h, y, 0);
    } else if (schedule_.rank_of_stage(s + 1) != me) {
      sends.push_back(transfer_->send(h, schedule_.rank_of_stage(s + 1), 2 * S * M + s, true, spikes_[s], nullptr));
    }
  }
  for (PendingSend& p : sends) p.handle->wait();
  return r;
}

}  // namespace sm
