// io_retry.cpp — bounded retries of transient I/O failures and the test hook that injects them
// (core/io_retry.h).
#include "spikemesh/core/io_retry.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "spikemesh/core/error.h"

namespace sm {

namespace {

int64_t env_int(const char* name, int64_t dflt, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (errno || *end || x < lo || x > hi)
    SM_INPUT_ERROR(name << "=" << v << ": must be an integer in [" << lo << ", " << hi << "]");
  return x;
}

// This process's rank as the launcher exports it (-1: unknown).
int launcher_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* r = std::getenv(v)) return std::atoi(r);
  return -1;
}

struct FaultBudget {
  std::atomic<int64_t> left[2], skip[2];  // faults to inject; calls to let through first
  FaultBudget() {
    left[0] = left[1] = skip[0] = skip[1] = 0;
    const char* spec = std::getenv("SPIKEMESH_TEST_IO_FAULTS");
    if (!spec) return;
    const char* rank = std::getenv("SPIKEMESH_TEST_IO_FAULT_RANK");
    if (rank && *rank && std::atoi(rank) != launcher_rank()) return;
    std::istringstream is(spec);
    std::string item;
    while (std::getline(is, item, ',')) {
      const size_t colon = item.find(':'), at = item.find('@');
      const std::string site = item.substr(0, colon);
      const int64_t n = colon == std::string::npos ? 0 : std::atoll(item.c_str() + colon + 1);
      const int64_t after = at == std::string::npos ? 0 : std::atoll(item.c_str() + at + 1);
      int k = site == "dataset-read" ? 0 : site == "checkpoint-write" ? 1 : -1;
      if (k < 0) SM_INPUT_ERROR("SPIKEMESH_TEST_IO_FAULTS: unknown site '" << site << "' (dataset-read, checkpoint-write)");
      left[k] = n;
      skip[k] = after;
    }
  }
};

}  // namespace

IoRetryPolicy io_retry_policy() {
  IoRetryPolicy p;
  p.attempts = static_cast<int>(env_int("SPIKEMESH_IO_RETRIES", 4, 1, 20));
  p.first_delay_ms = static_cast<double>(env_int("SPIKEMESH_IO_RETRY_DELAY_MS", 500, 0, 600000));
  return p;
}

bool take_io_fault(IoSite site) {
  static FaultBudget budget;
  const int k = site == IoSite::DatasetRead ? 0 : 1;
  if (budget.skip[k].load() > 0 && budget.skip[k].fetch_sub(1) > 0) return false;
  std::atomic<int64_t>& n = budget.left[k];
  int64_t have = n.load();
  while (have > 0)
    if (n.compare_exchange_weak(have, have - 1)) return true;
  return false;
}

bool permanent_io_error(const std::string& m) {
  for (const char* s : {"No space left", "disk full", "Disk quota", "File too large", "file-size limit",
                        "Permission denied", "Read-only file system", "needs about"})
    if (m.find(s) != std::string::npos) return true;
  return false;
}

bool io_gave_up(const Error& e) { return std::strncmp(e.what(), kIoGaveUp, std::strlen(kIoGaveUp)) == 0; }

void with_io_retries(const std::string& what, const std::function<void()>& attempt,
                     const std::function<bool(const Error&)>& retryable, const std::function<void()>& before_retry,
                     bool report, const IoRetryPolicy* policy) {
  const IoRetryPolicy p = policy ? *policy : io_retry_policy();
  constexpr double kMaxDelayMs = 30000;
  double delay = std::min(p.first_delay_ms, kMaxDelayMs);
  for (int k = 1;; ++k) {
    try {
      attempt();
      return;
    } catch (const Error& e) {
      if (!retryable(e) || permanent_io_error(e.what())) throw;
      if (k >= p.attempts)
        throw Error(ErrorKind::Input, std::string(kIoGaveUp) + what + ": " + e.what() + " (" + std::to_string(k) +
                                          (k == 1 ? " attempt)" : " attempts)"));
      if (report)
        std::fprintf(stderr, "spikemesh: warning (%s): %s failed (attempt %d of %d): %s; retrying in %.3g s\n",
                     where_am_i().c_str(), what.c_str(), k, p.attempts, e.what(), delay / 1000.0);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay));
      delay = std::min(2 * delay, kMaxDelayMs);
      if (before_retry) before_retry();
    }
  }
}

}  // namespace sm
