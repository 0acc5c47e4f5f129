// pp_transfer.cpp — the pipeline's message paths (pp_transfer.h): the one collective decision,
// then sends and receives on the pp comm with tags or on the one-way channel comms.
#include "spikemesh/parallel/pipeline/pp_transfer.h"

#include <cstdlib>

#include "spikemesh/core/enum_names.h"
#include "spikemesh/core/log.h"
#include "spikemesh/parallel/pipeline/pp_channels.h"
#include "spikemesh/parallel/pipeline/pp_runtime.h"
#include "spikemesh/parallel/pipeline/pp_spikes.h"

namespace sm {

namespace {

// CUDA_DEVICE_MAX_CONNECTIONS unset or ≥ 8 (CUDA's default): the channel streams, the compute
// stream and the collectives' streams keep hardware queues of their own (pp_transfer.h).
bool enough_hardware_queues() {
  const char* v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  return v == nullptr || *v == '\0' || std::atoi(v) >= 8;
}

const EnumName<PpTransport> kTransportNames[] = {
    {"auto", PpTransport::Auto}, {"staged", PpTransport::Staged}, {"channels", PpTransport::Channels}};

}  // namespace

const char* pp_transport_name(PpTransport t) { return enum_name(kTransportNames, t); }

PpTransport pp_transport_from_name(const std::string& name) {
  if (auto t = enum_from_name(kTransportNames, name)) return *t;
  SM_INPUT_ERROR("pipeline transport '" << name << "': use auto, staged or channels");
}

PpTransfer::PpTransfer(Comm& pp, const PpSchedule& schedule, PpTransport requested)
    : pp_(pp), schedule_(schedule), requested_(requested), order_problem_(check_channel_order(schedule)) {
  if (requested == PpTransport::Channels && !order_problem_.empty())
    SM_INPUT_ERROR("pipeline transport 'channels' needs every channel's messages received in the order they are sent, "
                   "but the "
                   << schedule.kind << " schedule's " << order_problem_
                   << " (reorder the receives, or use the staged transport)");
}

PpTransfer::~PpTransfer() = default;

void PpTransfer::prepare(Device dev) {
  if (!path_.empty()) return;
  dev_ = dev;
  bool direct_ok = false;
  if (requested_ != PpTransport::Staged) {  // the same on every pp rank: the all-reduce is collective
    int ok = dev.is_cuda() && pp_.device_backend_name() == "nccl" && enough_hardware_queues() ? 1 : 0;
    Tensor votes = Tensor::full({1}, ok, DType::I32);  // [1] host
    pp_.all_reduce(votes, ReduceOp::Sum);              // collective over pp
    direct_ok = static_cast<int>(votes.item()) == pp_.size();
  }
  channels_ = requested_ == PpTransport::Channels || (requested_ == PpTransport::Auto && direct_ok && order_problem_.empty());
  if (requested_ == PpTransport::Auto && direct_ok && !order_problem_.empty())
    SM_INFO("pipeline: the " << schedule_.kind << " schedule cannot use one-way NCCL channels (" << order_problem_
                             << "); its transfers go through host memory and MPI tags");
  device_buffers_ = channels_ && direct_ok;
  if (channels_) {
    channel_comms_ = std::make_unique<PpChannelComms>(pp_, schedule_, device_buffers_ ? dev : Device::cpu());
    SM_CHECK(!device_buffers_ || channel_comms_->all_nccl(), "pipeline: a channel of an all-NCCL pp comm is not NCCL");
  }
  path_ = !channels_ ? "staged" : device_buffers_ ? "nccl-channels" : "mpi-channels";
  SM_DEBUG("pipeline: transfers over " << path_ << " (" << pp_transport_name(requested_) << " requested)");
}

Comm& PpTransfer::comm_for(int peer, bool forward, bool sending, int* comm_peer) {
  if (!channels_) {
    *comm_peer = peer;
    return pp_;
  }
  *comm_peer = sending ? 1 : 0;  // channel rank 0 = sender, 1 = receiver
  return sending ? channel_comms_->to(peer, forward) : channel_comms_->from(peer, forward);
}

PendingSend PpTransfer::send(const Tensor& t, int peer, int tag, bool forward, bool as_bits, PpTraffic* traffic) {
  SM_CHECK(!path_.empty(), "pipeline: a send before the transfer path was prepared");
  const Device where = device_buffers_ ? t.device() : Device::cpu();
  PendingSend p;
  if (as_bits) {
    p.keep = pack_spike_message(t, where);  // [ceil(numel/8)] u8 on `where`
    SM_CHECK(p.keep.defined(), "pipeline: an activation expected to be spikes holds values other than 0 and 1");
  } else {
    p.keep = t.to(where);  // the device tensor itself on the direct path
  }
  if (traffic && t.device().is_cuda() && where.is_cpu()) traffic->staged_bytes += p.keep.nbytes();
  if (traffic && device_buffers_) traffic->direct_messages += 1;
  int cpeer = 0;
  Comm& c = comm_for(peer, forward, true, &cpeer);
  p.handle = c.send_async(p.keep, cpeer, channels_ ? 0 : tag);
  return p;
}

PostedRecv PpTransfer::post(const Shape& shape, DType act, bool packed, int peer, int tag, bool forward) {
  SM_CHECK(!path_.empty(), "pipeline: a receive before the transfer path was prepared");
  PostedRecv r;
  r.packed = packed;
  const Device where = device_buffers_ ? dev_ : Device::cpu();
  const bool pinned = dev_.is_cuda() && where.is_cpu();  // host buffers whose data go on to a GPU
  if (packed)
    r.buffer = spike_message_buffer(shape_numel(shape), where, pinned);  // [ceil(numel/8)] u8
  else
    r.buffer = pinned ? Tensor::empty_pinned(shape, act) : Tensor::empty(shape, act, where);  // [T, n, ...]
  int cpeer = 0;
  Comm& c = comm_for(peer, forward, false, &cpeer);
  r.handle = c.recv_async(r.buffer, cpeer, channels_ ? 0 : tag);
  return r;
}

Tensor PpTransfer::take(PostedRecv& r, const Shape& shape, DType act, PpTraffic* traffic) {
  SM_CHECK(r.handle, "pipeline: taking a receive that was never posted");
  r.handle->wait();  // collective-free wait (watchdog applies)
  r.handle.reset();
  if (traffic && dev_.is_cuda() && r.buffer.device().is_cpu()) traffic->staged_bytes += r.buffer.nbytes();
  Tensor t = r.packed ? unpack_spike_message(r.buffer, shape, act, dev_) : r.buffer.to(dev_);  // [T, n, ...] on dev_
  r.buffer = Tensor();
  return t;
}

}  // namespace sm
