// log.cpp — rank-aware logging (rank 0 prints info; every rank prints warnings/errors).
#include "spikemesh/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace sm {
namespace {
LogLevel g_level = LogLevel::Info;
int g_rank = 0;
std::atomic<int> g_warnings{0};
std::mutex g_mu;
bool all_ranks() {
  const char* e = std::getenv("SPIKEMESH_LOG_ALL_RANKS");
  return e && e[0] == '1';
}
}  // namespace

void log_set_level(LogLevel l) { g_level = l; }
void log_set_rank(int rank) { g_rank = rank; }
int log_warning_count() { return g_warnings.load(); }

void log_message(LogLevel l, const std::string& msg) {
  if (l == LogLevel::Warn) g_warnings++;
  if (l < g_level) return;
  if (l < LogLevel::Warn && g_rank != 0 && !all_ranks()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  FILE* f = l >= LogLevel::Warn ? stderr : stdout;
  const char* tag = l == LogLevel::Warn ? "warning: " : l == LogLevel::Error ? "error: " : "";
  if (g_rank != 0 || all_ranks())
    std::fprintf(f, "[rank %d] %s%s\n", g_rank, tag, msg.c_str());
  else
    std::fprintf(f, "%s%s\n", tag, msg.c_str());
  std::fflush(f);
}

}  // namespace sm
