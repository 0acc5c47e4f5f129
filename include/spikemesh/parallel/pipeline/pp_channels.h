// pp_channels.h — one-way pipeline channels (docs/architecture.md §7 "PP"): the per-pair,
// per-direction communicators over which the pipeline runtime (pp_runtime.h) moves messages
// when it does not use MPI tags, and the check that a schedule may use them.
//
// A channel is (sender rank, receiver rank, direction): activations forward (stage s → s+1)
// or gradients backward (s+1 → s). Each channel gets its own Comm (an MPI split of the pp
// comm holding exactly its two ranks: channel rank 0 = sender, 1 = receiver), hence its own
// NCCL communicator and stream on GPUs. Messages on a channel carry no tag: they match in
// the order they are posted (NCCL orders send/recv on the comm's stream; MPI's non-overtaking
// rule with one tag). Two rules make that correct and deadlock-free:
//   * one direction per channel: a receive posted early never waits in front of a send of
//     the same rank (the reason the runtime cannot use NCCL on the shared pp comm);
//   * order (check_channel_order): on every channel the sender's SEND actions, in its action
//     order, carry the same messages — (lower stage, microbatch) — as the receiver's RECV
//     actions in its order. The runtime sends and posts receives in action order, so the k-th
//     send meets the k-th receive. Evaluation (forward through the stages in order) always
//     satisfies it and shares the forward channels between training steps (every training
//     message has been received when a step ends).
// Creation is collective over the pp comm in one global order (pp_channels), so no rank waits
// on a peer that is creating another channel first (the lowest unfinished channel always has
// both ends present).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {

class Comm;

struct PpChannel {
  int sender = 0, receiver = 0;  // pipeline ranks
  bool forward = true;           // activations (true) or gradients (false)
  // "rank 0 -> rank 1 (activations)"
  std::string str() const;
};

// Every channel the placement of `schedule` uses (a boundary s | s+1 between two ranks gives
// a forward channel rank_of(s) → rank_of(s+1) and a backward channel the other way), each
// once, in the one global order every rank creates them in: forward channels first, then
// backward ones, each sorted by (sender, receiver). Empty with one rank. Pure.
std::vector<PpChannel> pp_channels(const PpSchedule& schedule);

// "" when every channel's messages are sent and received in the same order (the rule above),
// else one line naming the first failing channel (in pp_channels order) and its first
// mismatching message, e.g. "channel rank 0 -> rank 1 (activations): message 2 is sent as
// 0SF1 (stage 0 -> 1, microbatch 1) but received as 1RF0 (stage 0 -> 1, microbatch 0)". A
// schedule that passes validate_schedule (pp_simulator.h) and this check can run on channels.
// Pure.
std::string check_channel_order(const PpSchedule& schedule);

// The Comms of this rank's channels. Build: collective over `pp` — for every channel of
// pp_channels(schedule), in that order, one MPI_Comm_split of pp's communicator (every pp rank
// takes part), then a Comm over the two ends (pp's backend option). With a CUDA `device`,
// each channel also decides its device path and exchanges one warm-up message of a device
// tensor, both collective over the channel's two ranks and in the same global order, so NCCL
// sets up its communicators and connections here and never inside a training step.
class PpChannelComms {
 public:
  PpChannelComms(Comm& pp, const PpSchedule& schedule, const Device& device);
  ~PpChannelComms();
  PpChannelComms(const PpChannelComms&) = delete;
  PpChannelComms& operator=(const PpChannelComms&) = delete;

  // The channel this rank sends on to pipeline rank `receiver` (its peer there is rank 1).
  Comm& to(int receiver, bool forward);
  // The channel this rank receives on from pipeline rank `sender` (its peer there is rank 0).
  Comm& from(int sender, bool forward);
  // Channels this rank is an end of.
  size_t size() const { return mine_.size(); }
  // Whether every channel of this rank moves device tensors with NCCL (decided for a CUDA
  // `device`; false otherwise).
  bool all_nccl() const { return all_nccl_; }

 private:
  struct Entry {
    PpChannel channel;
    std::unique_ptr<Comm> comm;
  };
  Comm& find(int sender, int receiver, bool forward);
  int me_ = 0;
  std::vector<Entry> mine_;
  bool all_nccl_ = false;
};

}  // namespace sm
