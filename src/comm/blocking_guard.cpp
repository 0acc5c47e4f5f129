// blocking_guard.cpp — the deadline thread, arrival checks and comm contexts
// (comm/blocking_guard.h).
#include "spikemesh/comm/blocking_guard.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "pending_op.h"
#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"

namespace sm {

namespace {

using clock_type = std::chrono::steady_clock;

struct Armed {
  std::string what;
  MPI_Comm abort_comm;
  clock_type::time_point start;
};

// One watchdog thread per process, started on the first deadline; it sleeps while nothing
// is armed and wakes every 50 ms while something is.
class DeadlineThread {
 public:
  static DeadlineThread& get() {
    static DeadlineThread* t = new DeadlineThread();  // never destroyed: the thread may outlive main
    return *t;
  }
  long arm(std::string what, MPI_Comm abort_comm) {
    std::lock_guard<std::mutex> l(mu_);
    const long id = next_++;
    armed_[id] = Armed{std::move(what), abort_comm, clock_type::now()};
    if (!started_) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
    cv_.notify_one();
    return id;
  }
  void disarm(long id) {
    std::lock_guard<std::mutex> l(mu_);
    armed_.erase(id);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      if (armed_.empty()) {
        cv_.wait(l);
        continue;
      }
      cv_.wait_for(l, std::chrono::milliseconds(50));
      const double timeout = comm_timeout_seconds();
      if (timeout <= 0) continue;
      const auto now = clock_type::now();
      for (const auto& [id, a] : armed_) {
        const double waited = std::chrono::duration<double>(now - a.start).count();
        if (waited <= timeout) continue;
        std::fprintf(stderr,
                     "spikemesh: error: comm timeout: %s did not complete within %g s (--comm-timeout) on %s; every "
                     "rank had arrived at it, so it is blocked inside the library (a file that differs between "
                     "ranks, a hung file system or network?).%s Aborting the job.\n",
                     a.what.c_str(), timeout, where_am_i().c_str(), comm_detail::lost_ranks_note().c_str());
        std::fflush(stderr);
        MPI_Abort(comm_detail::abort_comm_or(a.abort_comm), 3);
        ::_exit(3);  // MPI_Abort does not return; belt and braces
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<long, Armed> armed_;
  long next_ = 1;
  bool started_ = false;
};

thread_local std::vector<std::string> t_contexts;

// Ends the job after ranks arrived at different operations: the lowest rank prints once.
[[noreturn]] void abort_mismatch(Comm& comm, const std::vector<std::string>& whats) {
  if (comm.rank() == 0) {
    std::ostringstream os;
    os << "spikemesh: error: the ranks of comm '" << comm.name()
       << "' reached different collective operations (their inputs differ: the same files on every rank?):";
    // Group ranks by operation: "'X' on ranks 0,2; 'Y' on rank 1".
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (int r = 0; r < static_cast<int>(whats.size()); ++r) {
      bool found = false;
      for (auto& g : groups)
        if (g.first == whats[r]) {
          g.second.push_back(comm.world_ranks()[r]);
          found = true;
        }
      if (!found) groups.push_back({whats[r], {comm.world_ranks()[r]}});
    }
    for (size_t i = 0; i < groups.size(); ++i)
      os << (i ? ";" : "") << " world rank" << (groups[i].second.size() > 1 ? "s " : " ")
         << comm_detail::join_ranks(groups[i].second) << " at " << groups[i].first;
    os << ". Aborting the job.\n";
    std::fputs(os.str().c_str(), stderr);
    std::fflush(stderr);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(3));  // rank 0 speaks, then aborts everyone
  }
  MPI_Abort(comm_detail::abort_comm_or(comm.mpi_comm()), 3);
  ::_exit(3);
}

}  // namespace

BlockingDeadline::BlockingDeadline(std::string what, MPI_Comm abort_comm)
    : id_(DeadlineThread::get().arm(std::move(what), abort_comm)) {}
BlockingDeadline::~BlockingDeadline() { DeadlineThread::get().disarm(id_); }

CommContext::CommContext(const std::string& what) { t_contexts.push_back(what); }
CommContext::~CommContext() { t_contexts.pop_back(); }
const std::string& current_comm_context() {
  static const std::string none;
  return t_contexts.empty() ? none : t_contexts.back();
}

void guarded_collective(Comm& comm, const std::string& what, const std::function<void()>& body) {
  {
    CommContext ctx("arriving at " + what);
    Tensor mine = Tensor::empty({1}, DType::I64), all = Tensor::empty({comm.size()}, DType::I64);  // [1], [p]
    mine.data<int64_t>()[0] = static_cast<int64_t>(text_hash(what));
    comm.all_gather(mine, all);  // under Comm's watchdog: names the ranks that never arrive
    for (int r = 0; r < comm.size(); ++r)
      if (all.data<int64_t>()[r] != mine.data<int64_t>()[0]) abort_mismatch(comm, all_gather_strings(comm, what));
  }
  BlockingDeadline deadline(what + " (collective over comm '" + comm.name() + "')", comm.mpi_comm());
  body();
}

}  // namespace sm
