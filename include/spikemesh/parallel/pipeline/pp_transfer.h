// pp_transfer.h — how the pipeline runtime's messages travel (pp_runtime.h; docs/architecture.md §7
// "PP"): one object per runtime that picks a path once and then starts sends and posts
// and completes receives on it. Messages are the activation leaving a stage (forward; spikes
// bit-packed, pp_spikes.h) and the gradient entering it (backward; in the activation dtype).
//
// Paths (decided collectively on the first train()/evaluate(), the same on every pp rank):
//   staged         host buffers over the pp comm with MPI tags (tag = direction, stage pair,
//                  microbatch), so any valid schedule works. Device activations are copied
//                  through host memory; device spikes are packed ON THE GPU and only their
//                  ceil(n/8) bytes cross to the host (the receiver's GPU unpacks them).
//   nccl-channels  device buffers over one-way channel comms (pp_channels.h) with NCCL: the
//                  sender's device tensor (or packed device bits) is sent as it is and the
//                  receive lands in a device buffer. Chosen by `auto` when the model is on a GPU,
//                  the pp comm's device path is NCCL (every pp rank its own distinct GPU; never
//                  with --comm mpi), CUDA_DEVICE_MAX_CONNECTIONS is unset or ≥ 8 on every rank,
//                  and the schedule passes check_channel_order; a schedule failing the check
//                  (only a --pp-schedule-file can) falls back to `staged` with a one-line notice.
//   mpi-channels   the channel comms with host buffers over MPI (tag 0, matched in order like
//                  NCCL): what `channels` gives without NCCL — on the CPU it runs exactly the
//                  plumbing of nccl-channels, which is how the CPU tests prove it.
// Requested `channels` with a schedule failing the order check is refused at construction
// (input error naming the channel and its first mismatching message); `staged` forces staged.
//
// What the NCCL path relies on: every message's buffer stays alive until its operation
// completed (PendingSend::keep, PostedRecv::buffer); before each operation the NCCL stream of a
// channel waits for the legacy default stream (comm/nccl_backend.cpp), which orders after all
// work of the blocking compute stream (core/stream_cuda.h), so a device buffer from the caching
// allocator is never written while earlier compute still uses it and a sent tensor is complete;
// received data are read only after the host saw completion; the compute stream never waits
// for a channel stream. NCCL's caveat — kernels of several communicators in
// flight at once can deadlock when the GPU cannot run them concurrently — applies: a rank has
// at most four channels (in and out, both directions), each ordered on its own stream, plus the
// dp/tp collectives; a NCCL p2p kernel occupies a few SMs, far below a data-centre GPU's, and
// with CUDA_DEVICE_MAX_CONNECTIONS < 8 (e.g. Megatron's 1) streams would share hardware queues,
// where a waiting receive could block the very compute its sender waits for — hence the rule
// above. Deadlock freedom otherwise is the staged path's: sends never block the host (they
// complete by the end of the step), receives are posted in action order, and on each channel
// the k-th send meets the k-th receive.
#pragma once
#include <memory>
#include <string>

#include "spikemesh/comm/comm.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {

class PpChannelComms;
struct PpTraffic;

enum class PpTransport { Auto, Staged, Channels };
const char* pp_transport_name(PpTransport t);                  // "auto" | "staged" | "channels"
PpTransport pp_transport_from_name(const std::string& name);  // an input error naming the choices

struct PendingSend {
  std::unique_ptr<CommHandle> handle;
  Tensor keep;  // the buffer in flight (host or device)
};

struct PostedRecv {
  std::unique_ptr<CommHandle> handle;
  Tensor buffer;  // what arrives: packed bits or the tensor itself, on the host or the device
  bool packed = false;
};

class PpTransfer {
 public:
  // `pp` and `schedule` must outlive this object. Refuses `Channels` for a schedule failing
  // check_channel_order (input error). Local.
  PpTransfer(Comm& pp, const PpSchedule& schedule, PpTransport requested);
  ~PpTransfer();
  PpTransfer(const PpTransfer&) = delete;
  PpTransfer& operator=(const PpTransfer&) = delete;

  // Picks the path for stages on `dev` and builds the channel comms. Collective over the pp comm
  // on the first call (an all-reduce, and the channels' creation); later calls return at once.
  void prepare(Device dev);
  // "staged", "nccl-channels" or "mpi-channels"; "" before prepare().
  const std::string& path() const { return path_; }

  // send/post/take are point-to-point (on the pp comm, or on the channel of this pair and
  // direction), never collective; prepare() must have run.
  // Starts sending `t` (a stage's activation, or a gradient) to pipeline rank `peer`. `tag` is
  // used on the staged path only. as_bits: `t` is spikes — packed, every value checked (an
  // internal error names the activation when one is not 0 or 1). Counts traffic->staged_bytes
  // and traffic->direct_messages when `traffic` is given (message bytes are the caller's).
  PendingSend send(const Tensor& t, int peer, int tag, bool forward, bool as_bits, PpTraffic* traffic);
  // Posts the receive of a message of `shape` in `act` (packed: spikes, as bits) from `peer`.
  PostedRecv post(const Shape& shape, DType act, bool packed, int peer, int tag, bool forward);
  // Waits for `r` (watchdog applies) and returns the message as a tensor of `shape` in `act` on
  // the prepared device (flagged binary when packed); `r` is released.
  Tensor take(PostedRecv& r, const Shape& shape, DType act, PpTraffic* traffic);

 private:
  Comm& comm_for(int peer, bool forward, bool sending, int* comm_peer);

  Comm& pp_;
  const PpSchedule& schedule_;
  PpTransport requested_;
  std::string order_problem_;  // check_channel_order's verdict
  std::string path_;
  Device dev_;
  bool channels_ = false, device_buffers_ = false;
  std::unique_ptr<PpChannelComms> channel_comms_;
};

}  // namespace sm
