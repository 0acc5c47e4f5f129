// pp_runtime.h — the ONE pipeline runtime (DESIGN §6 "PP"): executes any valid schedule
// (pp_schedule.h) of this rank's actions over its Stage (models/stage.h: one chunk per
// virtual stage held here, chunk c = logical stage rank + P·c) and the pipeline comm.
//
//   F(s, m)   neurons of the chunk reset, forward of microbatch m (ctx.slot = m); the last
//             logical stage also runs the loss (mean over T, cross-entropy) on m's labels.
//   B / BW    input-gradient (B) or full (BW) backward of (s, m): the last stage starts from
//             the loss gradient (scaled by loss_grad_scale), the others from the received one.
//   W         weight-gradient half of (s, m) (ctx.split_wgrad).
//   SEND_*/RECV_*   point-to-point on the pp comm (MPI), tag = (direction, lower stage, microbatch);
//             sends are asynchronous and complete by the end of the step; every RECV is posted
//             early — when the compute action before it starts — so transfers overlap compute.
// Transfers always go through host memory and MPI (device tensors are copied to and from
// pinned host buffers): NCCL's send/recv have no tags and are ordered on their stream, so a
// receive posted early for one message could wait behind — or deadlock with — a different
// message between the same two ranks in an arbitrary (user) schedule; MPI matches by tag.
// Activations whose producing unit ends in a spiking neuron (optionally followed by max-pool
// or flatten) are exactly {0,1} and travel bit-packed (1 bit per element; the sender checks
// every value); everything else (gradients, residual streams) travels in its dtype.
// Gradient reduction: `grad_hooks` (the layout's dp strategy) sees after_backward(k) of a
// unit only with its LAST microbatch's backward, so a stage's dp/ZeRO reduction starts as soon
// as its last W (or BW) is done and overlaps the rest of the schedule.
// Every pp rank passes the same microbatches (labels everywhere; inputs are used by the first
// stage). Invariants: after train() every send has completed and every slot was released;
// the same schedule on every rank of a pp group (validated before use) cannot deadlock.
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/loss.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/pp_schedule.h"

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

// Bytes this rank sent to its pipeline neighbours (cumulative).
struct PpTraffic {
  uint64_t activation_elements = 0, activation_bytes = 0;  // forward messages (packed or not)
  uint64_t spike_elements = 0, spike_bytes = 0;            // of those, the bit-packed ones
  uint64_t gradient_bytes = 0;                             // backward messages
};

class PipelineRuntime {
 public:
  // `units_per_stage`: the partition (one entry per logical stage, schedule.logical_stages()
  // entries); `stage` holds exactly this rank's logical stages. `pp` is the pipeline comm
  // (rank = pipeline rank). `unit_out_shapes`: every unit's LOCAL per-sample output shape
  // (pp_costs.h dry_run_units: channel shards under tp). Everything must outlive the runtime.
  PipelineRuntime(Stage& stage, Comm& pp, const PpSchedule& schedule, const std::vector<int>& units_per_stage,
                  const std::vector<Shape>& unit_out_shapes, Loss* loss);

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

 private:
  Stage& stage_;
  Comm& pp_;
  PpSchedule schedule_;
  std::vector<int> units_per_stage_;
  Loss* loss_;
  std::vector<Shape> boundary_shape_;  // per logical stage: per-sample shape of its output
  std::vector<bool> spikes_;           // per logical stage: output travels as bits
  std::vector<PpRecordedAction> timeline_;
  PpTraffic traffic_;
};

// An input error when `schedule` needs more message tags (2·S·M + S: forward, backward and
// evaluation messages) than MPI guarantees (32767). Local.
void check_pp_message_tags(const PpSchedule& schedule);

// Whether `unit`'s output is exactly {0,1}: its last layer is a spiking neuron, possibly
// followed by max-pooling or flatten (which keep spikes binary).
bool unit_emits_spikes(Unit& unit);

}  // namespace sm
