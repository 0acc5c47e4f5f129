// stop_signal.cpp — the stop-signal flag set by SIGTERM/SIGUSR1 handlers (stop_signal.h).
#include "spikemesh/core/stop_signal.h"

#include <atomic>
#include <csignal>

namespace sm {

namespace {
std::atomic<int> g_stop{0};
void on_stop_signal(int sig) { g_stop.store(sig); }
}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

int stop_signal() { return g_stop.load(); }
void clear_stop_request() { g_stop.store(0); }

}  // namespace sm
