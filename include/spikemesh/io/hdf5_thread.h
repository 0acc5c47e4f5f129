// hdf5_thread.h — the one thread that calls HDF5 while a training run goes on. Debian's
// parallel HDF5 is built without thread safety, and a run has several threads that need it:
// the prefetch thread reads batches, the main thread writes metrics, resumes and checkpoints,
// and an asynchronous checkpoint is written while training continues. While an Hdf5Thread is
// alive every one of them hands its HDF5 work to that thread (hdf5_call) and waits for it, so
// HDF5 is only ever called from one thread of the process.
// Order: tasks run in the order posted, with one exception. A background job (hdf5_background:
// a checkpoint written while training continues) calls hdf5_yield() between its steps, and
// there the Local tasks posted meanwhile run (a batch read, a metrics row), so training is
// not held up by the write. Collective tasks (those that wait for other ranks: a collective
// open or read, a synchronous checkpoint, a resume) never run inside a background job: they
// wait until it has ended, so a rank never enters one collective operation while its HDF5
// thread is inside another (which could deadlock against a rank that entered them the other
// way round).
// Without a live Hdf5Thread (tools and single-threaded commands), hdf5_call runs the task on
// the calling thread under one process-wide mutex, so two threads never call HDF5 at once.
// MPI: a Collective task makes MPI calls on the HDF5 thread while its poster waits (fine under
// MPI_THREAD_SERIALIZED); a background job makes them while the main thread communicates
// too, which needs MPI_THREAD_MULTIPLE (the caller checks: train/checkpoint_writer.h).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>

namespace sm {

enum class Hdf5Task {
  Local,       // no MPI call, never waits for another rank (may run inside a background job)
  Collective,  // communicates or waits for other ranks (runs only when no background job does)
};

// Whether this process may run an HDF5 thread: MPI is not initialised, or it allows calls from
// several threads (MPI_THREAD_SERIALIZED at least: a Collective task calls MPI on that thread).
bool hdf5_thread_allowed();

// Starts the process's HDF5 thread; the destructor waits for a background job in flight and
// every queued task, then joins. At most one alive at a time (an Internal error otherwise).
class Hdf5Thread {
 public:
  Hdf5Thread();
  ~Hdf5Thread();
  Hdf5Thread(const Hdf5Thread&) = delete;
  Hdf5Thread& operator=(const Hdf5Thread&) = delete;
};

// Runs `f` where HDF5 may be called (see above) and waits for it; its exception is rethrown
// here unchanged. Called on the HDF5 thread itself, `f` runs at once.
void hdf5_run(const std::function<void()>& f, Hdf5Task kind);

template <class F>
auto hdf5_call(F&& f, Hdf5Task kind = Hdf5Task::Local) -> decltype(f()) {
  using R = decltype(f());
  if constexpr (std::is_void_v<R>) {
    hdf5_run(std::function<void()>(std::forward<F>(f)), kind);
  } else {
    std::optional<R> out;
    hdf5_run([&] { out.emplace(f()); }, kind);
    return std::move(*out);
  }
}

// A job running on the HDF5 thread while its poster goes on.
class Hdf5Job {
 public:
  virtual ~Hdf5Job() = default;
  virtual bool done() const = 0;      // non-blocking
  virtual bool failed() const = 0;    // done, with an exception
  virtual void wait() = 0;            // blocks until done; rethrows the job's exception
  virtual double seconds() const = 0;  // how long it ran (so far, while running)
};

// Posts `job` to run on the HDF5 thread (Internal error without a live Hdf5Thread). It may be
// collective over its own communicator, which no other thread uses, and must call
// hdf5_yield() between its steps so that Local tasks are served meanwhile. `idle_per_busy`
// paces it: at each yield the thread idles (serving Local tasks) that many times as long as the
// job worked since its previous yield, so it takes at most 1 / (1 + idle_per_busy) of a core.
std::shared_ptr<Hdf5Job> hdf5_background(std::function<void()> job, double idle_per_busy = 0);

// On the HDF5 thread inside a background job: runs the Local tasks that are waiting. Anywhere
// else: nothing. Tests slow a background job down here (SPIKEMESH_TEST_SLOW_BACKGROUND_MS: a sleep of that
// many milliseconds at each of its yields), to catch it in flight.
void hdf5_yield();

// Whether a Collective task is waiting for the HDF5 thread (false without one). Its poster
// waits for it and makes no MPI call meanwhile; every rank posts it at the same point.
bool hdf5_collective_posted();

}  // namespace sm
