// heartbeat.cpp — heartbeat files in a shared directory (comm/heartbeat.h).
#include "spikemesh/comm/heartbeat.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "pending_op.h"

namespace sm {
namespace {

struct Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  std::thread thread;
  bool running = false;
  std::string dir;
  int rank = 0, size = 1;
  double interval_s = 1;
};

Heartbeat& state() {
  static Heartbeat* h = new Heartbeat();  // never destroyed: stop_heartbeat joins the thread
  return *h;
}

std::string file_of(const std::string& dir, int rank) { return dir + "/rank." + std::to_string(rank); }

// Modification time of `path` in seconds; < 0 when it cannot be read.
double mtime_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
}

void beat(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd < 0) return;  // a full or vanished directory: the heartbeat is a diagnosis aid only
  ::futimens(fd, nullptr);  // mtime = now, as the file system sees it
  ::close(fd);
}

}  // namespace

void start_heartbeat(const std::string& dir, int world_rank, int world_size, double interval_s) {
  stop_heartbeat();
  Heartbeat& h = state();
  std::unique_lock<std::mutex> l(h.mu);
  h.dir = dir;
  h.rank = world_rank;
  h.size = world_size;
  h.interval_s = interval_s > 0 ? interval_s : 1;
  h.running = true;
  beat(file_of(dir, world_rank));
  h.thread = std::thread([&h] {
    std::unique_lock<std::mutex> lk(h.mu);
    while (h.running) {
      h.cv.wait_for(lk, std::chrono::duration<double>(h.interval_s));
      if (h.running) beat(file_of(h.dir, h.rank));
    }
  });
}

void stop_heartbeat() {
  Heartbeat& h = state();
  {
    std::lock_guard<std::mutex> l(h.mu);
    if (!h.running) return;
    h.running = false;
  }
  h.cv.notify_all();
  if (h.thread.joinable()) h.thread.join();
  std::remove(file_of(h.dir, h.rank).c_str());
}

std::string stale_heartbeats() {
  std::string dir;
  int rank = 0, size = 1;
  double interval = 1;
  {
    Heartbeat& h = state();
    std::lock_guard<std::mutex> l(h.mu);
    if (!h.running) return "";
    dir = h.dir, rank = h.rank, size = h.size, interval = h.interval_s;
  }
  const double mine = mtime_of(file_of(dir, rank));
  if (mine < 0) return "";
  std::vector<int> stale;
  std::vector<double> ages;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const double t = mtime_of(file_of(dir, r));
    if (t >= 0 && mine - t <= 2 * interval) continue;
    stale.push_back(r);
    ages.push_back(t >= 0 ? mine - t : -1);
  }
  std::string s;
  for (size_t i = 0; i < stale.size(); ++i) {
    char age[48];
    if (ages[i] >= 0) std::snprintf(age, sizeof age, " (last %.0f s ago)", ages[i]);
    else std::snprintf(age, sizeof age, " (none)");
    s += (i ? ", " : "") + comm_detail::join_ranks_on_hosts({stale[i]}) + age;
  }
  return s;
}

}  // namespace sm
