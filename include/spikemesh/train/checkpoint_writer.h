// checkpoint_writer.h — how a run writes its checkpoints (docs/checkpoints.md "Asynchronous
// checkpoints"): synchronously, every rank waiting for the collective write, or
// asynchronously (--ckpt-async): each rank copies its shards into host memory at the step
// boundary (the only stall) and the HDF5 thread (io/hdf5_thread.h) writes them collectively,
// on a communicator of its own, while training continues.
// Invariants:
//  * at most one write in flight: the next checkpoint waits for it (and says so in the log);
//  * a checkpoint appears under its name only when complete (io/checkpoint.h), so a process
//    killed mid-write leaves the previous complete checkpoint the newest;
//  * the ranks start, wait for and give up on the same writes at the same steps (the caller
//    agrees on failed() at a step boundary), and a write's errors are agreed inside it, so a
//    failed background write ends the run on every rank with one message;
//  * transient write errors are retried as io_retry.h says, with one policy on every rank;
//  * the poster's thread makes no MPI call while the write is outside its concurrent window
//    (io/checkpoint.h ConcurrentWindow): save() returns once the file exists, and the write
//    then waits, before its attributes and close, until every rank's poster holds still in
//    wait() (the trainer calls it at the first step boundary where every rank's write is
//    waiting: window_waiting() agreed over the ranks).
#pragma once
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spikemesh/core/io_retry.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/io/checkpoint.h"

namespace sm {

class CheckpointManager;
class Comm;
class Hdf5Job;
class LossScaler;
struct CheckpointSnapshot;

enum class CkptAsyncMode { Auto, On, Off };
// "auto" | "on" | "off" (an Input error naming --ckpt-async otherwise).
CkptAsyncMode ckpt_async_mode_from_name(const std::string& name);

// Whether this run's checkpoints are written in the background. A background write makes MPI
// calls beside the main thread's, so with a checkpoint group it needs MPI_THREAD_MULTIPLE (alone,
// an HDF5 thread: io/hdf5_thread.h hdf5_thread_allowed):
// `On` without it is an Input error naming the level the MPI library provides; `Auto` is then
// synchronous and `*why` says so. Alone (group == nullptr) no MPI call is made. Local.
bool resolve_ckpt_async(CkptAsyncMode mode, Comm* group, std::string* why);

class CheckpointWriter {
 public:
  using LogFn = std::function<void(const std::string&)>;
  // `group`: the layout's checkpoint group (nullptr alone); asynchronous writes use a
  // duplicate of it, made here (collective over `group` when `async`). `policy`: the retry
  // policy every rank shares; `report`: this rank names retries on stderr; `log`: lines for
  // the run's log (the writes' sizes, stalls and waits).
  CheckpointWriter(CheckpointManager& mgr, Comm* group, bool async, const IoRetryPolicy& policy, bool report, LogFn log);
  ~CheckpointWriter();  // waits for the write in flight (its error, if any, was reported by then)
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  bool async() const { return async_; }
  // The checkpoint of `st` (collective over the group). Synchronous: written when this
  // returns. Asynchronous: waits for the write in flight, takes the snapshot and starts the
  // write. Errors: the write's (io/checkpoint.h), on every rank alike.
  void save(TrainState& st, const LossScaler& scaler);
  bool in_flight() const { return job_ != nullptr; }
  bool failed() const;  // the write in flight ended with an error (local; agree on it)
  // The background write in flight waits at the end of its concurrent window (local). The
  // ranks agree on it and, once every rank's does, call wait(): the write then finishes.
  bool window_waiting() const;
  // Local, non-blocking: logs a background write that ended well since the last call.
  void poll();
  // Blocks until the write in flight has ended and logs it; rethrows its error, agreed:
  // collective over the group (every rank calls it at the same step).
  void wait();
  // The newest checkpoint this writer completed ("" when none yet).
  const std::string& last_path() const { return last_path_; }

 private:
  std::string write_now(const CheckpointSnapshot& snap, Comm* comm, const ConcurrentWindow* window = nullptr);
  void log_done(const std::string& path, double write_s, double stall_s, bool background);

  CheckpointManager& mgr_;
  Comm* group_;
  std::unique_ptr<Comm> own_;  // the background writes' communicator
  bool async_;
  IoRetryPolicy policy_;
  bool report_;
  LogFn log_;
  std::vector<Tensor> staging_;   // the host copies, reused by every asynchronous checkpoint
  std::shared_ptr<Hdf5Job> job_;  // the write in flight
  int64_t job_step_ = 0;
  double job_stall_s_ = 0;
  std::string job_path_, last_path_;
  // The concurrent window of the write in flight (written by the HDF5 thread, read by the poster).
  struct Window {
    mutable std::mutex m;
    std::condition_variable cv;
    bool open = false, closing = false;  // the write is inside it / waits at its end
    bool released = false;                // the poster holds still: the write may end
  };
  Window window_;
  ConcurrentWindow window_calls();  // its open and close, for write_checkpoint
  void release_window();
};

}  // namespace sm
