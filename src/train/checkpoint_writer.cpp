// checkpoint_writer.cpp — a run's checkpoint writes, synchronous or in the background
// (train/checkpoint_writer.h).
#include "spikemesh/train/checkpoint_writer.h"

#include <mpi.h>

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <thread>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/io/hdf5_thread.h"
#include "spikemesh/train/run_checkpoints.h"

namespace sm {

namespace {
const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// The background write idles as long as it works (half a core at most): it competes with
// training for cores and memory bandwidth, and a write that takes twice as long costs nothing
// while it ends before the next checkpoint (docs/checkpoints.md has the measurements).
constexpr double kBackgroundIdlePerBusy = 1.0;

bool write_error_is_retryable(const Error& e) {
  return e.kind() == ErrorKind::Input && std::string(e.what()).find(" not written ") != std::string::npos;
}
}  // namespace

CkptAsyncMode ckpt_async_mode_from_name(const std::string& name) {
  if (name == "auto") return CkptAsyncMode::Auto;
  if (name == "on") return CkptAsyncMode::On;
  if (name == "off") return CkptAsyncMode::Off;
  SM_INPUT_ERROR("--ckpt-async must be auto, on or off, got '" << name << "'");
}

bool resolve_ckpt_async(CkptAsyncMode mode, Comm* group, std::string* why) {
  if (mode == CkptAsyncMode::Off) return false;
  int up = 0, level = MPI_THREAD_MULTIPLE;
  MPI_Initialized(&up);
  if (up) MPI_Query_thread(&level);
  // alone, no MPI call is made, but the HDF5 thread needs MPI_THREAD_SERIALIZED (hdf5_thread_allowed)
  if (level >= MPI_THREAD_MULTIPLE || (!group && hdf5_thread_allowed())) return true;
  std::ostringstream os;
  os << "the MPI library provides " << thread_level_name(level)
     << ", and a checkpoint written while training continues needs MPI_THREAD_MULTIPLE";
  if (mode == CkptAsyncMode::On) SM_INPUT_ERROR("--ckpt-async on: " << os.str() << " (use --ckpt-async off or auto)");
  if (why) *why = os.str() + ": checkpoints are written synchronously";
  return false;
}

CheckpointWriter::CheckpointWriter(CheckpointManager& mgr, Comm* group, bool async, const IoRetryPolicy& policy,
                                   bool report, LogFn log)
    : mgr_(mgr), group_(group), async_(async), policy_(policy), report_(report), log_(std::move(log)) {
  if (async_ && group_) own_ = std::make_unique<Comm>(group_->mpi_comm(), "checkpoint writer");
}

CheckpointWriter::~CheckpointWriter() {
  if (!job_) return;
  release_window();
  try {
    job_->wait();
  } catch (const std::exception&) {  // unwinding an error already: this one was agreed with it
  }
}

// Collective over `comm` (nullptr alone), on the HDF5 thread: the write with its retries.
std::string CheckpointWriter::write_now(const CheckpointSnapshot& snap, Comm* comm, const ConcurrentWindow* window) {
  std::string path;
  with_io_retries(
      "writing the checkpoint of step " + std::to_string(snap.meta.state.step),
      [&] { path = mgr_.write(comm, snap, async_, window); }, write_error_is_retryable, {}, report_, &policy_);
  return path;
}

// On the HDF5 thread. open: the file exists (the poster may go on). close: waits until the
// poster holds still (release_window) or posts a Collective task (it then waits for that),
// serving batch reads and metrics rows meanwhile. A retried write opens and closes again; a
// poster that holds still does so until the write ends.
ConcurrentWindow CheckpointWriter::window_calls() {
  Window* w = &window_;
  ConcurrentWindow c;
  c.open = [w] {
    std::lock_guard<std::mutex> l(w->m);
    w->open = true, w->closing = false;
    w->cv.notify_all();
  };
  c.close = [w] {
    {
      std::lock_guard<std::mutex> l(w->m);
      w->closing = true;
    }
    for (;;) {
      {
        std::lock_guard<std::mutex> l(w->m);
        if (w->released) break;
      }
      if (hdf5_collective_posted()) break;
      hdf5_yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  return c;
}

void CheckpointWriter::release_window() {
  std::lock_guard<std::mutex> l(window_.m);
  window_.released = true;
}

bool CheckpointWriter::window_waiting() const {
  if (!job_ || !own_) return false;
  std::lock_guard<std::mutex> l(window_.m);
  return window_.closing && !window_.released;
}

void CheckpointWriter::log_done(const std::string& path, double write_s, double stall_s, bool background) {
  last_path_ = path;
  std::error_code ec;
  const double mb = static_cast<double>(std::filesystem::file_size(path, ec)) / 1048576.0;
  std::ostringstream os;
  os << "checkpoint " << path << " (" << std::fixed << std::setprecision(1) << (ec ? 0.0 : mb) << " MB; ";
  if (background) os << "written in the background in " << std::setprecision(3) << write_s << " s; ";
  os << "training stalled " << std::setprecision(3) << stall_s << " s)";
  log_(os.str());
}

void CheckpointWriter::save(TrainState& st, const LossScaler& scaler) {
  Timer stall;  // how long training stops for this checkpoint
  if (async_) {
    const bool was_writing = job_ != nullptr;
    const int64_t previous = job_step_;
    wait();  // collective over the group
    const double waited = stall.ms() / 1000.0;
    if (was_writing && waited >= 0.001) {
      std::ostringstream os;
      os << "checkpoint of step " << st.step << " waited " << std::fixed << std::setprecision(3) << waited
         << " s for the write of step " << previous
         << " (one write at a time: checkpoint less often, or on faster storage, to avoid the wait)";
      log_(os.str());
    }
  }
  if (!async_) {
    const CheckpointSnapshot views = mgr_.snapshot(st, scaler, false);  // staged tensor by tensor
    const std::string path = hdf5_call([&] { return write_now(views, group_); }, Hdf5Task::Collective);
    log_done(path, 0, stall.ms() / 1000.0, false);
    return;
  }
  auto snap = std::make_shared<CheckpointSnapshot>();
  // Collective over the group: a rank that cannot copy (host memory) fails every rank alike.
  agree_on_error(group_, [&] { *snap = mgr_.snapshot(st, scaler, true, &staging_); });  // device → host copies
  job_step_ = st.step;
  Comm* comm = own_.get();
  {  // a fresh window for this write (with a group: alone the write makes no MPI call)
    std::lock_guard<std::mutex> l(window_.m);
    window_.open = window_.closing = window_.released = false;
  }
  const ConcurrentWindow w = comm ? window_calls() : ConcurrentWindow{};
  job_ = hdf5_background(
      [this, snap, comm, w]() mutable {
        job_path_ = write_now(*snap, comm, comm ? &w : nullptr);
        snap.reset();  // the staging copies stay (staging_) for the next checkpoint
      },
      kBackgroundIdlePerBusy);
  if (comm) {  // the file's creation waits inside MPI: this thread holds still until it exists
    std::unique_lock<std::mutex> l(window_.m);
    while (!window_.cv.wait_for(l, std::chrono::milliseconds(1), [&] { return window_.open; }) && !job_->done()) {
    }
  }
  job_stall_s_ = stall.ms() / 1000.0;
}

bool CheckpointWriter::failed() const { return job_ && job_->failed(); }

void CheckpointWriter::poll() {
  if (!job_ || !job_->done() || job_->failed()) return;
  const std::shared_ptr<Hdf5Job> job = std::move(job_);
  log_done(job_path_, job->seconds(), job_stall_s_, true);
}

void CheckpointWriter::wait() {
  if (!async_) return;
  const std::shared_ptr<Hdf5Job> job = std::move(job_);  // null where poll() saw it end already
  release_window();  // this thread holds still from here until the write has ended
  // Collective over the group whatever this rank's job state: the write's errors are agreed
  // inside it, and whatever failed on one rank alone outside that agreement reaches every rank.
  agree_on_error(group_, [&] {
    if (job) job->wait();
  });
  if (job) log_done(job_path_, job->seconds(), job_stall_s_, true);
}

}  // namespace sm
