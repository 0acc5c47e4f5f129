// hdf5_thread.cpp — the process's HDF5 thread (io/hdf5_thread.h): one queue of tasks, served
// in order by one thread; a background job serves the Local tasks at its yields.
// Invariants: only the HDF5 thread runs tasks while it is alive, holding the process-wide
// mutex (which the inline path without a thread takes too); a task's exception travels to
// its poster; the destructor runs everything posted before it returns.
#include "spikemesh/io/hdf5_thread.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <future>
#include <mutex>
#include <thread>

#include "spikemesh/core/error.h"
#include "spikemesh/core/timer.h"

namespace sm {

namespace {

std::mutex& hdf5_mutex() {  // held by whoever calls HDF5
  static std::mutex m;
  return m;
}

class BackgroundJob final : public Hdf5Job {
 public:
  explicit BackgroundJob(std::function<void()> f) : f_(std::move(f)) {}
  void run() {
    {
      std::lock_guard<std::mutex> l(m_);
      timer_.reset();  // its time runs from its start, not from its posting
    }
    std::exception_ptr err;
    try {
      f_();
    } catch (...) {
      err = std::current_exception();
    }
    f_ = nullptr;
    std::lock_guard<std::mutex> l(m_);
    err_ = err;
    ms_ = timer_.ms();
    done_ = true;
    cv_.notify_all();
  }
  bool done() const override {
    std::lock_guard<std::mutex> l(m_);
    return done_;
  }
  bool failed() const override {
    std::lock_guard<std::mutex> l(m_);
    return done_ && err_;
  }
  void wait() override {
    std::unique_lock<std::mutex> l(m_);
    cv_.wait(l, [&] { return done_; });
    if (err_) std::rethrow_exception(err_);
  }
  double seconds() const override {
    std::lock_guard<std::mutex> l(m_);
    return (done_ ? ms_ : timer_.ms()) / 1000.0;
  }

 private:
  std::function<void()> f_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr err_;
  Timer timer_;
  double ms_ = 0;
};

struct Entry {
  std::packaged_task<void()> task;  // a task, or
  std::shared_ptr<BackgroundJob> job;  // a background job
  double idle_per_busy = 0;            // of the job: hdf5_background
  Hdf5Task kind = Hdf5Task::Collective;
};

int slow_background_ms() {
  const char* v = std::getenv("SPIKEMESH_TEST_SLOW_BACKGROUND_MS");
  return v ? std::atoi(v) : 0;
}

// The one live thread's state.
struct State {
  std::mutex m;
  std::condition_variable cv;
  std::deque<Entry> queue;
  bool stop = false;
  bool in_job = false;  // the thread is inside a background job
  double idle_per_busy = 0;  // of the job in progress
  std::chrono::steady_clock::time_point busy_since;  // the job's work since its last yield
  std::thread thread;
  int slow_ms = slow_background_ms();

  void serve() {
    std::lock_guard<std::mutex> hold(hdf5_mutex());  // nobody else calls HDF5 while this thread lives
    for (;;) {
      Entry e;
      {
        std::unique_lock<std::mutex> l(m);
        cv.wait(l, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stopping, and everything posted has run
        e = std::move(queue.front());
        queue.pop_front();
        in_job = e.job != nullptr;
        idle_per_busy = e.idle_per_busy;
        busy_since = std::chrono::steady_clock::now();
      }
      if (e.job) {
        e.job->run();
        std::lock_guard<std::mutex> l(m);
        in_job = false;
      } else {
        e.task();
      }
    }
  }
  // On the thread, inside a job: serves the Local tasks waiting while it sleeps until `until`.
  void idle_until(std::chrono::steady_clock::time_point until) {
    for (;;) {
      serve_local();
      const auto now = std::chrono::steady_clock::now();
      if (now >= until) return;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(2)));
    }
  }
  // On the thread, inside a job: the Local tasks waiting, in order; the others stay queued.
  void serve_local() {
    std::deque<Entry> local;
    {
      std::lock_guard<std::mutex> l(m);
      for (auto it = queue.begin(); it != queue.end();) {
        if (!it->job && it->kind == Hdf5Task::Local) {
          local.push_back(std::move(*it));
          it = queue.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Entry& e : local) e.task();
  }
};

std::mutex g_state_mutex;  // guards g_state (start, stop, lookups)
State* g_state = nullptr;

State* live_state() {
  std::lock_guard<std::mutex> l(g_state_mutex);
  return g_state;
}

}  // namespace

bool hdf5_thread_allowed() {
  int up = 0;
  MPI_Initialized(&up);
  if (!up) return true;
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  return level >= MPI_THREAD_SERIALIZED;
}

Hdf5Thread::Hdf5Thread() {
  std::lock_guard<std::mutex> l(g_state_mutex);
  SM_CHECK(g_state == nullptr, "a second HDF5 thread in one process");
  g_state = new State();
  State* s = g_state;
  s->thread = std::thread([s] { s->serve(); });
}

Hdf5Thread::~Hdf5Thread() {
  State* s = live_state();
  {
    std::lock_guard<std::mutex> l(s->m);
    s->stop = true;
  }
  s->cv.notify_all();
  s->thread.join();
  std::lock_guard<std::mutex> l(g_state_mutex);
  g_state = nullptr;
  delete s;
}

thread_local bool t_inline = false;  // this thread holds the mutex of the inline path

void hdf5_run(const std::function<void()>& f, Hdf5Task kind) {
  State* s = live_state();
  if (!s) {  // no HDF5 thread: here, under the mutex (taken once: a task may call hdf5_call)
    if (t_inline) return f();
    std::lock_guard<std::mutex> l(hdf5_mutex());
    t_inline = true;
    try {
      f();
    } catch (...) {
      t_inline = false;
      throw;
    }
    t_inline = false;
    return;
  }
  if (std::this_thread::get_id() == s->thread.get_id()) {  // a task's own HDF5 work
    f();
    return;
  }
  Entry e;
  e.task = std::packaged_task<void()>(f);
  e.kind = kind;
  std::future<void> done = e.task.get_future();
  {
    std::lock_guard<std::mutex> l(s->m);
    SM_CHECK(!s->stop, "an HDF5 task posted while the HDF5 thread stops");
    s->queue.push_back(std::move(e));
  }
  s->cv.notify_all();
  done.get();  // rethrows the task's exception
}

std::shared_ptr<Hdf5Job> hdf5_background(std::function<void()> job, double idle_per_busy) {
  State* s = live_state();
  SM_CHECK(s != nullptr, "a background HDF5 job without an HDF5 thread");
  SM_CHECK(idle_per_busy >= 0, "idle_per_busy " << idle_per_busy);
  auto j = std::make_shared<BackgroundJob>(std::move(job));
  Entry e;
  e.job = j;
  e.idle_per_busy = idle_per_busy;
  {
    std::lock_guard<std::mutex> l(s->m);
    SM_CHECK(!s->stop, "a background HDF5 job posted while the HDF5 thread stops");
    s->queue.push_back(std::move(e));
  }
  s->cv.notify_all();
  return j;
}

bool hdf5_collective_posted() {
  State* s = live_state();
  if (!s) return false;
  std::lock_guard<std::mutex> l(s->m);
  return std::any_of(s->queue.begin(), s->queue.end(),
                     [](const Entry& e) { return !e.job && e.kind == Hdf5Task::Collective; });
}

void hdf5_yield() {
  State* s = live_state();
  if (!s || std::this_thread::get_id() != s->thread.get_id()) return;
  {
    std::lock_guard<std::mutex> l(s->m);
    if (!s->in_job) return;
  }
  const auto now = std::chrono::steady_clock::now();
  // Paced: idle `idle_per_busy` times as long as the job worked since its last yield (at most
  // 100 ms at a time), so that it takes at most 1 / (1 + idle_per_busy) of a core.
  auto idle = std::chrono::duration_cast<std::chrono::steady_clock::duration>((now - s->busy_since) * s->idle_per_busy);
  idle = std::min<std::chrono::steady_clock::duration>(idle, std::chrono::milliseconds(100));
  if (s->slow_ms > 0) idle += std::chrono::milliseconds(s->slow_ms);  // a test catching a job in flight
  s->idle_until(now + idle);
  s->busy_since = std::chrono::steady_clock::now();
}

}  // namespace sm
