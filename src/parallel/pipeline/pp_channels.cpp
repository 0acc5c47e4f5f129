// pp_channels.cpp — the pipeline's one-way channels (pp_channels.h): their global order, the
// per-channel order check, and their communicators.
#include "spikemesh/parallel/pipeline/pp_channels.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

#include "spikemesh/comm/blocking_guard.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"

namespace sm {

namespace {

// One message as an action sees it: the boundary's lower stage and the microbatch.
struct ChannelMessage {
  int low = 0, microbatch = 0;
  PpAction action;
};

bool is_send(PpActionKind k) { return k == PpActionKind::SEND_F || k == PpActionKind::SEND_B; }
bool is_recv(PpActionKind k) { return k == PpActionKind::RECV_F || k == PpActionKind::RECV_B; }
bool is_forward(PpActionKind k) { return k == PpActionKind::SEND_F || k == PpActionKind::RECV_F; }

// The boundary's lower stage of a transfer action (see pp_schedule.h: SEND_F/RECV_B carry the
// lower stage's side, RECV_F/SEND_B the upper one's).
int lower_stage(const PpAction& a) {
  return a.kind == PpActionKind::SEND_F || a.kind == PpActionKind::RECV_B ? a.stage : a.stage - 1;
}

// The pipeline rank at the other end of a transfer action.
int peer_of(const PpSchedule& s, const PpAction& a) {
  const int low = lower_stage(a);
  const bool at_low = a.kind == PpActionKind::SEND_F || a.kind == PpActionKind::RECV_B;
  return s.rank_of_stage(at_low ? low + 1 : low);
}

// The messages of `rank`'s actions on channel c (its sends when it is the sender, else its
// receives), in action order.
std::vector<ChannelMessage> channel_messages(const PpSchedule& s, const PpChannel& c, bool sends) {
  const int rank = sends ? c.sender : c.receiver, peer = sends ? c.receiver : c.sender;
  std::vector<ChannelMessage> out;
  for (const PpAction& a : s.per_rank[static_cast<size_t>(rank)]) {
    if (!(sends ? is_send(a.kind) : is_recv(a.kind)) || is_forward(a.kind) != c.forward || peer_of(s, a) != peer)
      continue;
    out.push_back(ChannelMessage{lower_stage(a), a.microbatch, a});
  }
  return out;
}

std::string describe(const ChannelMessage& m, bool forward) {
  std::ostringstream os;
  os << to_text(m.action) << " (stage " << (forward ? m.low : m.low + 1) << " -> " << (forward ? m.low + 1 : m.low)
     << ", microbatch " << m.microbatch << ")";
  return os.str();
}

}  // namespace

std::string PpChannel::str() const {
  return "rank " + std::to_string(sender) + " -> rank " + std::to_string(receiver) +
         (forward ? " (activations)" : " (gradients)");
}

std::vector<PpChannel> pp_channels(const PpSchedule& schedule) {
  std::set<std::tuple<int, int, int>> keys;  // (0 forward / 1 backward, sender, receiver)
  for (int s = 0; s + 1 < schedule.logical_stages(); ++s) {
    const int a = schedule.rank_of_stage(s), b = schedule.rank_of_stage(s + 1);
    if (a == b) continue;  // one rank: a hand-off, no message
    keys.emplace(0, a, b);
    keys.emplace(1, b, a);
  }
  std::vector<PpChannel> out;
  for (const auto& [dir, from, to] : keys) out.push_back(PpChannel{from, to, dir == 0});
  return out;
}

std::string check_channel_order(const PpSchedule& schedule) {
  for (const PpChannel& c : pp_channels(schedule)) {
    const std::vector<ChannelMessage> sent = channel_messages(schedule, c, true);
    const std::vector<ChannelMessage> got = channel_messages(schedule, c, false);
    std::ostringstream os;
    os << "channel " << c.str() << ": ";
    const size_t n = std::min(sent.size(), got.size());
    for (size_t k = 0; k < n; ++k)
      if (sent[k].low != got[k].low || sent[k].microbatch != got[k].microbatch) {
        os << "message " << k + 1 << " is sent as " << describe(sent[k], c.forward) << " but received as "
           << describe(got[k], c.forward);
        return os.str();
      }
    if (sent.size() != got.size()) {
      os << "rank " << c.sender << " sends " << sent.size() << " messages but rank " << c.receiver << " receives "
         << got.size();
      return os.str();
    }
  }
  return "";
}

PpChannelComms::PpChannelComms(Comm& pp, const PpSchedule& schedule, const Device& device) : me_(pp.rank()) {
  CommOptions opts;
  opts.backend = pp.backend_option();
  for (const PpChannel& c : pp_channels(schedule)) {  // the global order: collective over pp
    const bool member = c.sender == me_ || c.receiver == me_;
    MPI_Comm split = MPI_COMM_NULL;
    {
      BlockingDeadline deadline("creating pipeline channel " + c.str() + " (MPI_Comm_split of comm '" + pp.name() + "')",
                                pp.mpi_comm());
      SM_MPI_CHECK(MPI_Comm_split(pp.mpi_comm(), member ? 0 : MPI_UNDEFINED, c.sender == me_ ? 0 : 1, &split));
    }
    if (!member) continue;
    const std::string name = pp.name() + (c.forward ? "-act " : "-grad ") + std::to_string(c.sender) + ">" +
                             std::to_string(c.receiver);
    Entry e{c, nullptr};
    try {
      e.comm = std::make_unique<Comm>(split, name, opts);  // collective over the channel's two ranks
    } catch (...) {
      MPI_Comm_free(&split);
      throw;
    }
    MPI_Comm_free(&split);  // the Comm keeps its own duplicates
    mine_.push_back(std::move(e));
  }
  if (!device.is_cuda()) return;
  all_nccl_ = true;
  for (Entry& e : mine_) {  // still in the global order: collective over each channel's two ranks
    all_nccl_ = e.comm->device_backend_name() == "nccl" && all_nccl_;
    Tensor w = Tensor::zeros({1}, DType::U8, device);  // [1] warm-up: NCCL connects the pair now
    if (e.channel.sender == me_)
      e.comm->send(w, 1);
    else
      e.comm->recv(w, 0);
  }
}

PpChannelComms::~PpChannelComms() = default;

Comm& PpChannelComms::find(int sender, int receiver, bool forward) {
  auto it = std::find_if(mine_.begin(), mine_.end(), [&](const Entry& e) {
    return e.channel.sender == sender && e.channel.receiver == receiver && e.channel.forward == forward;
  });
  SM_CHECK(it != mine_.end(), "pipeline: no channel " << (PpChannel{sender, receiver, forward}).str() << " on rank " << me_);
  return *it->comm;
}

Comm& PpChannelComms::to(int receiver, bool forward) { return find(me_, receiver, forward); }
Comm& PpChannelComms::from(int sender, bool forward) { return find(sender, me_, forward); }

}  // namespace sm
