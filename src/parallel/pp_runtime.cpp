// pp_runtime.cpp — the pipeline runtime (pp_runtime.h): one loop over this rank's actions.
#include "spikemesh/parallel/pp_runtime.h"

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

bool is_neuron_type(const std::string& t) { return t == "lif" || t == "plif" || t == "if"; }

// Last leaf of a layer (through plain sequential containers), skipping binary-preserving
// trailing layers; true when it is a spiking neuron.
bool ends_in_spikes(Layer& layer) {
  const std::string t = layer.type();
  if (is_neuron_type(t)) return true;
  if (t != "unit" && t != "sequential") return false;
  std::vector<Layer*> ch = layer.children();
  for (size_t i = ch.size(); i-- > 0;) {
    const std::string ct = ch[i]->type();
    if (ct == "maxpool2d" || ct == "flatten") continue;
    return ends_in_spikes(*ch[i]);
  }
  return false;
}

}  // namespace

bool unit_emits_spikes(Unit& unit) { return ends_in_spikes(unit); }

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
    spikes_.push_back(unit_emits_spikes(*model.units[u - 1]));
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

PpStepOutcome PipelineRuntime::train(const std::vector<MicroBatch>& micro, Ctx& ctx, double loss_grad_scale,
                                     UnitHooks* grad_hooks) {
  const int P = schedule_.ranks, S = schedule_.logical_stages(), M = schedule_.microbatches;
  SM_CHECK(static_cast<int>(micro.size()) == M, "pipeline step with " << micro.size() << " microbatches for a schedule of " << M);
  const int me = pp_.rank();
  const std::vector<PpAction>& actions = schedule_.per_rank[me];
  const Device dev = stage_.model().device();  // where the stage's layers run
  const DType act = micro[0].x.dtype();
  transfer_->prepare(dev);  // collective over pp the first time: picks the path (pp_transfer.h)
  auto idx = [&](int s, int m) { return static_cast<size_t>(s) * M + m; };
  auto chunk_of = [&](int s) { return static_cast<size_t>(s / P); };
  auto fwd_tag = [&](int s_low, int m) { return s_low * M + m; };
  auto bwd_tag = [&](int s_low, int m) { return S * M + s_low * M + m; };
  auto shape_of = [&](int s, int m) {  // the activation leaving stage s for microbatch m
    Shape sh{static_cast<int64_t>(micro[m].x.dim(0)), micro[m].y.numel()};
    sh.insert(sh.end(), boundary_shape_[s].begin(), boundary_shape_[s].end());
    return sh;
  };

  std::vector<Tensor> out(S * M), in(S * M), gin(S * M), gout(S * M);
  std::vector<PostedRecv> posted(2 * S * M);  // [0, S·M): RECV_F by (s, m); then RECV_B
  std::vector<PendingSend> sends;
  std::vector<int> backward_done(S, 0);
  PpStepOutcome res;
  res.losses.assign(M, LossResult{});
  timeline_.clear();

  // Gradient hooks see a unit's after_backward only with its stage's last backward.
  struct FinalOnly : UnitHooks {
    UnitHooks* inner = nullptr;
    bool final_pass = false;
    void after_backward(size_t k) override {
      if (inner && final_pass) inner->after_backward(k);
    }
  } hooks;
  hooks.inner = grad_hooks;

  auto post_recv = [&](const PpAction& a) {
    const bool fwd = a.kind == PpActionKind::RECV_F;
    const size_t slot = (fwd ? 0 : S * M) + idx(a.stage, a.microbatch);
    PostedRecv& r = posted[slot];
    if (r.handle) return;  // already posted
    const int peer = fwd ? schedule_.rank_of_stage(a.stage - 1) : schedule_.rank_of_stage(a.stage + 1);
    const int src_stage = fwd ? a.stage - 1 : a.stage;  // the boundary's lower stage
    const int tag = fwd ? fwd_tag(src_stage, a.microbatch) : bwd_tag(src_stage, a.microbatch);
    r = transfer_->post(shape_of(src_stage, a.microbatch), act, fwd && spikes_[src_stage], peer, tag, fwd);
  };
  auto take_recv = [&](const PpAction& a) -> Tensor {
    const bool fwd = a.kind == PpActionKind::RECV_F;
    post_recv(a);
    PostedRecv& r = posted[(fwd ? 0 : S * M) + idx(a.stage, a.microbatch)];
    return transfer_->take(r, shape_of(fwd ? a.stage - 1 : a.stage, a.microbatch), act, &traffic_);
  };
  auto send = [&](const Tensor& t, int peer, int tag, bool as_bits, bool activation) {
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
    sends.push_back(std::move(p));
  };
  // Posts the receives between action i and the next compute action (they overlap action i).
  auto post_ahead = [&](size_t i) {
    for (size_t j = i + 1; j < actions.size(); ++j) {
      const PpActionKind k = actions[j].kind;
      if (k == PpActionKind::RECV_F || k == PpActionKind::RECV_B) post_recv(actions[j]);
      if (is_compute(k)) break;
    }
  };
  post_ahead(static_cast<size_t>(-1));  // j starts at 0

  for (size_t i = 0; i < actions.size(); ++i) {
    const PpAction& a = actions[i];
    const int s = a.stage, m = a.microbatch;
    const size_t c = chunk_of(s);
    if (is_compute(a.kind)) post_ahead(i);
    PpRecordedAction rec{a, now_s(), 0};
    ctx.slot = m;
    ctx.sample_offset = micro[m].sample_offset;
    switch (a.kind) {
      case PpActionKind::F: {
        Tensor x = s == 0 ? micro[m].x : in[idx(s, m)].defined() ? in[idx(s, m)] : out[idx(s - 1, m)];
        SM_CHECK(x.defined(), "pipeline: F" << s << "," << m << " has no input");
        in[idx(s, m)] = Tensor();
        if (s > 0) out[idx(s - 1, m)] = Tensor();
        const double t0 = now_s();
        stage_.reset_state(c);  // neuron state at rest for every microbatch on every stage
        const double t1 = now_s();
        ctx.split_wgrad = false;
        Tensor y = stage_.forward_chunk(c, x, ctx);  // [T, n, ...stage output]
        if (s == S - 1) {
          res.losses[m] = loss_->forward(y, micro[m].y, m);
        } else {
          SM_CHECK(y.shape() == shape_of(s, m), "pipeline: stage " << s << " produced " << shape_str(y.shape())
                                                                    << ", expected " << shape_str(shape_of(s, m)));
          out[idx(s, m)] = y;
        }
        synchronize(dev);
        res.reset_ms += 1000.0 * (t1 - t0);
        res.forward_ms += 1000.0 * (now_s() - t1);
        break;
      }
      case PpActionKind::B:
      case PpActionKind::BW: {
        Tensor dy;
        if (s == S - 1) {
          dy = loss_->backward(loss_grad_scale, m);  // [T, n, K]
        } else {
          dy = gin[idx(s, m)].defined() ? gin[idx(s, m)] : gout[idx(s + 1, m)];
          gin[idx(s, m)] = Tensor();
          gout[idx(s + 1, m)] = Tensor();
        }
        SM_CHECK(dy.defined(), "pipeline: " << to_text(a) << " has no output gradient");
        ctx.split_wgrad = a.kind == PpActionKind::B;
        if (a.kind == PpActionKind::BW) hooks.final_pass = ++backward_done[s] == M;
        Tensor dx = stage_.backward_input_chunk(c, dy, ctx, &hooks);  // [T, n, ...stage input]
        if (s > 0) gout[idx(s, m)] = dx;
        ctx.split_wgrad = false;
        synchronize(dev);
        res.backward_ms += 1000.0 * (now_s() - rec.start);
        break;
      }
      case PpActionKind::W: {
        ctx.split_wgrad = true;
        hooks.final_pass = ++backward_done[s] == M;
        stage_.backward_weight_chunk(c, ctx, &hooks);
        ctx.split_wgrad = false;
        synchronize(dev);
        res.backward_ms += 1000.0 * (now_s() - rec.start);
        break;
      }
      case PpActionKind::SEND_F: {
        Tensor& y = out[idx(s, m)];
        SM_CHECK(y.defined(), "pipeline: " << to_text(a) << " before its forward");
        send(y, schedule_.rank_of_stage(s + 1), fwd_tag(s, m), spikes_[s], true);
        y = Tensor();
        break;
      }
      case PpActionKind::SEND_B: {
        Tensor& g = gout[idx(s, m)];
        SM_CHECK(g.defined(), "pipeline: " << to_text(a) << " before its backward");
        send(g, schedule_.rank_of_stage(s - 1), bwd_tag(s - 1, m), false, false);
        g = Tensor();
        break;
      }
      case PpActionKind::RECV_F: {
        const double t0 = now_s();
        in[idx(s, m)] = take_recv(a);
        res.wait_ms += 1000.0 * (now_s() - t0);
        break;
      }
      case PpActionKind::RECV_B: {
        const double t0 = now_s();
        gin[idx(s, m)] = take_recv(a);
        res.wait_ms += 1000.0 * (now_s() - t0);
        break;
      }
    }
    rec.end = now_s();
    timeline_.push_back(rec);
    for (PendingSend& p : sends)  // let MPI progress the sends in flight; a finished one frees its buffer
      if (p.handle && p.handle->test()) p = PendingSend{};
  }
  for (PendingSend& p : sends)
    if (p.handle) p.handle->wait();
  ctx.slot = 0;
  return res;
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
