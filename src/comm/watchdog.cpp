// watchdog.cpp — the poll loop behind every blocking comm call: spin briefly, then yield,
// then sleep between polls (oversubscribed ranks must not starve each other), and abort the
// job with one clear line when comm_timeout_seconds() passes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "pending_op.h"
#include "spikemesh/comm/blocking_guard.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/heartbeat.h"
#include "spikemesh/core/error.h"

namespace sm::comm_detail {
namespace {
MPI_Comm g_abort_comm = MPI_COMM_NULL;
std::vector<std::string> g_world_hosts;  // by world rank; written once, before any op waits
}

void set_abort_comm(MPI_Comm comm) { g_abort_comm = comm; }
MPI_Comm abort_comm_or(MPI_Comm fallback) { return g_abort_comm != MPI_COMM_NULL ? g_abort_comm : fallback; }

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

std::string lost_ranks_note() {
  const std::string stale = stale_heartbeats();
  return stale.empty() ? "" : " No heartbeat from world rank(s) " + stale + ": a lost node or a killed process?";
}

void set_world_hosts(const std::vector<std::string>& hosts) { g_world_hosts = hosts; }

std::string join_ranks_on_hosts(const std::vector<int>& world_ranks) {
  std::vector<std::pair<std::string, std::vector<int>>> by_host;  // in order of first appearance
  for (int r : world_ranks) {
    if (r < 0 || static_cast<size_t>(r) >= g_world_hosts.size()) return join_ranks(world_ranks);
    const std::string& h = g_world_hosts[static_cast<size_t>(r)];
    auto it = std::find_if(by_host.begin(), by_host.end(), [&](const auto& e) { return e.first == h; });
    if (it == by_host.end()) by_host.push_back({h, {r}});
    else it->second.push_back(r);
  }
  std::string s;
  for (size_t i = 0; i < by_host.size(); ++i) s += (i ? ", " : "") + join_ranks(by_host[i].second) + " on " + by_host[i].first;
  return s;
}

double wait_or_abort(PendingOp& op, const OpLabel& label) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  if (op.progress()) return std::chrono::duration<double>(clock::now() - t0).count();
  const double timeout = comm_timeout_seconds();
  long polls = 0;
  for (;;) {
    if (op.progress()) break;
    ++polls;
    double waited = std::chrono::duration<double>(clock::now() - t0).count();
    if (timeout > 0 && waited > timeout) {
      const std::string& context = current_comm_context();
      std::fprintf(stderr,
                   "spikemesh: error: comm timeout: %s did not complete within %g s (--comm-timeout) on %s; "
                   "waiting for %s%s%s.%s Aborting the job.\n",
                   label.what.c_str(), timeout, where_am_i().c_str(), op.pending_peers().c_str(),
                   context.empty() ? "" : " while ", context.c_str(), lost_ranks_note().c_str());
      std::fflush(stderr);
      MPI_Abort(abort_comm_or(label.abort_comm), 3);
      std::abort();  // MPI_Abort does not return; belt and braces
    }
    if (polls < 2000) continue;  // spin: latency of short collectives
    if (waited < 0.05)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return std::chrono::duration<double>(clock::now() - t0).count();
}

}  // namespace sm::comm_detail
