// pp_runtime.h — the ONE pipeline runtime (docs/architecture.md §7 "PP"): executes any valid
// schedule (pp_schedule.h) of this rank's actions over its Stage (models/stage.h: one chunk per
// virtual stage held here, chunk c = logical stage rank + P·c) and the pipeline comm.
//
//   F(s, m)   neurons of the chunk reset, forward of microbatch m (ctx.slot = m); the last
//             logical stage also runs the loss (mean over T, cross-entropy) on m's labels.
//   B / BW    input-gradient (B) or full (BW) backward of (s, m): the last stage starts from
//             the loss gradient (scaled by loss_grad_scale), the others from the received one.
//   W         weight-gradient half of (s, m) (ctx.split_wgrad).
//   SEND_*/RECV_*   point-to-point between pipeline ranks (pp_transfer.h); sends are asynchronous
//             and complete by the end of the step; every RECV is posted early — when the compute
//             action before it starts — so transfers overlap compute.
// Transfers (pp_transfer.h picks the path once, collectively): `staged` — host buffers over
// the pp comm with MPI tags = (direction, lower stage, microbatch), any valid schedule; or
// one-way channels (pp_channels.h: a comm per sender, receiver and direction, messages matched
// in order) — `nccl-channels` when every pp rank owns its own GPU (the pp comm's device path is
// NCCL, not --comm mpi): sends go from and receives land in device buffers; `mpi-channels`
// the same plumbing with host buffers (forced with PpTransport::Channels; the CPU tests). NCCL
// is never used on the shared pp comm itself: its send/recv have no tags and are ordered on the
// comm's stream, so a receive posted early could wait behind — or deadlock with — another
// message between the same two ranks; one-way channels plus check_channel_order (each channel's
// sends and receives in the same order) remove both. Shared GPUs, --comm mpi and the CPU stay
// on `staged` under PpTransport::Auto.
// Activations whose producing unit ends in a spiking neuron (optionally followed by max-pool
// or flatten) are exactly {0,1} and travel bit-packed (1 bit per element, pp_spikes.h: packed
// and checked on the GPU when they live there, so only ceil(n/8) bytes leave it; the same
// bytes on every path); everything else (gradients, residual streams) travels in its dtype.
// Gradient reduction: `grad_hooks` (the layout's dp strategy) sees after_backward(k) of a
// unit only with its LAST microbatch's backward, so a stage's dp/ZeRO reduction starts as soon
// as its last W (or BW) is done and overlaps the rest of the schedule.
// Every pp rank passes the same microbatches (labels everywhere; inputs are used by the first
// stage). Invariants: after train() every send has completed and every slot was released;
// the same schedule on every rank of a pp group (validated before use) cannot deadlock.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/parallel/pipeline/pp_transfer.h"

namespace sm {

class Comm;
struct MicroBatch;

// One executed action: start and end on this host's monotonic clock, in seconds.
struct PpRecordedAction {
  PpAction action;
  double start = 0, end = 0;
};

struct PpStepOutcome {
  std::vector<LossResult> losses;  // per microbatch on the last stage (count 0 elsewhere)
  double forward_ms = 0, backward_ms = 0, reset_ms = 0, wait_ms = 0;  // compute and receive-wait sums
};

// Bytes this rank sent to its pipeline neighbours in training steps (cumulative; evaluation
// is not counted). Message bytes are what travels between the ranks: the same on every path.
struct PpTraffic {
  uint64_t activation_elements = 0, activation_bytes = 0;  // forward messages (packed or not)
  uint64_t spike_elements = 0, spike_bytes = 0;            // of those, the bit-packed ones
  uint64_t gradient_bytes = 0;                             // backward messages
  // Message bytes copied between this rank's GPU and host memory, sent and received (the
  // staged path on a GPU; packed spikes count ceil(n/8)); 0 on the CPU and on nccl-channels.
  uint64_t staged_bytes = 0;
  uint64_t direct_messages = 0;  // messages sent from device buffers (nccl-channels)
};

class PipelineRuntime {
 public:
  // `units_per_stage`: the partition (one entry per logical stage, schedule.logical_stages()
  // entries); `stage` holds exactly this rank's logical stages. `pp` is the pipeline comm
  // (rank = pipeline rank). `unit_out_shapes`: every unit's LOCAL per-sample output shape
  // (pp_costs.h dry_run_units: channel shards under tp). Everything must outlive the runtime.
  // `transport`: pp_transfer.h (Channels with a schedule failing check_channel_order is an
  // input error here).
  PipelineRuntime(Stage& stage, Comm& pp, const PpSchedule& schedule, const std::vector<int>& units_per_stage,
                  const std::vector<Shape>& unit_out_shapes, Loss* loss, PpTransport transport = PpTransport::Auto);
  ~PipelineRuntime();

  // One training step's microbatches through the schedule. Collective over the pp comm.
  PpStepOutcome train(const std::vector<MicroBatch>& micro, Ctx& ctx, double loss_grad_scale, UnitHooks* grad_hooks);
  // Eval-mode forward of one batch through every stage in order (spikes bit-packed between
  // stages, as in train()); the loss on the last stage (count 0 elsewhere). Collective over
  // the pp comm.
  LossResult evaluate(const Tensor& x, const Tensor& y, Ctx& ctx);

  const PpSchedule& schedule() const { return schedule_; }
  const std::vector<int>& units_per_stage() const { return units_per_stage_; }
  // The actions of the last train() with their times (this rank's execution order).
  const std::vector<PpRecordedAction>& last_timeline() const { return timeline_; }
  const PpTraffic& traffic() const { return traffic_; }
  // Whether the activation leaving logical stage s travels bit-packed.
  bool boundary_is_spikes(int s) const { return spikes_[s]; }
  // The transfer path (pp_transfer.h: "staged", "nccl-channels", "mpi-channels") once the first
  // train() or evaluate() decided it; "" before.
  const std::string& transfer_path() const { return transfer_->path(); }

 private:
  // train(): a short loop that hands each action to its handler over one step's state
  // (pp_runtime.cpp). The handlers that send or receive are point-to-point on the pp comm.
  struct StepState;
  void run_action(const PpAction& a, StepState& st);
  void run_forward(const PpAction& a, StepState& st);          // F
  void run_backward_input(const PpAction& a, StepState& st);   // B, BW
  void run_backward_weight(const PpAction& a, StepState& st);  // W
  void run_send_forward(const PpAction& a, StepState& st);     // SEND_F
  void run_send_backward(const PpAction& a, StepState& st);    // SEND_B
  void run_receive(const PpAction& a, StepState& st);          // RECV_F, RECV_B
  void post_receive(const PpAction& a, StepState& st);
  void post_receives_ahead(const std::vector<PpAction>& actions, size_t from, StepState& st);
  void send_message(const Tensor& t, int peer, int tag, bool as_bits, bool activation, StepState& st);

  Stage& stage_;
  Comm& pp_;
  PpSchedule schedule_;
  std::vector<int> units_per_stage_;
  Loss* loss_;
  std::vector<Shape> boundary_shape_;  // per logical stage: per-sample shape of its output
  std::vector<bool> spikes_;           // per logical stage: output travels as bits
  std::vector<PpRecordedAction> timeline_;
  PpTraffic traffic_;
  std::unique_ptr<PpTransfer> transfer_;  // refers to schedule_ and pp_
};

// An input error when `schedule` needs more message tags (2·S·M + S: forward, backward and
// evaluation messages) than MPI guarantees (32767). Local.
void check_pp_message_tags(const PpSchedule& schedule);

}  // namespace sm
