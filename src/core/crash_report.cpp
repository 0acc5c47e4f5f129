// crash_report.cpp — the fatal-signal report (core/crash_report.h).
#include "spikemesh/core/crash_report.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace sm {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
constexpr int kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);
struct sigaction g_previous[kNumSignals];
char g_where[256] = "";
bool g_installed = false;

void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void put_hex(uintptr_t v) {
  char buf[2 + 16 + 1];
  buf[0] = '0';
  buf[1] = 'x';
  for (int i = 0; i < 16; ++i) buf[2 + i] = "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
  buf[18] = 0;
  put(buf);
}

void put_dec(long v) {
  char buf[24];
  int i = sizeof buf - 1;
  buf[i] = 0;
  const bool negative = v < 0;
  unsigned long u = negative ? 0UL - static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
  do {
    buf[--i] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u > 0 && i > 1);
  if (negative) buf[--i] = '-';
  put(buf + i);
}

// "function+offset (object)" of a code address, or "?" where no loaded object holds it.
void put_symbol(uintptr_t pc) {
  Dl_info info{};
  if (pc == 0 || !dladdr(reinterpret_cast<void*>(pc), &info) || !info.dli_fname) {
    put("?");
    return;
  }
  if (info.dli_sname) {
    put(info.dli_sname);
    put("+");
    put_hex(pc - reinterpret_cast<uintptr_t>(info.dli_saddr));
  } else {
    put_hex(pc - reinterpret_cast<uintptr_t>(info.dli_fbase));
  }
  put(" (");
  put(info.dli_fname);
  put(")");
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV (invalid memory access)";
    case SIGBUS: return "SIGBUS (bus error)";
    case SIGILL: return "SIGILL (illegal instruction: a CPU without the instructions this build uses?)";
    default: return "SIGFPE (arithmetic exception)";
  }
}

void report(int sig, siginfo_t* info, void* context) {
  put("spikemesh: fatal: ");
  put(signal_name(sig));
  put(" on ");
  put(g_where);
  if (info->si_code <= 0) {  // sent (kill, raise): no faulting access
    put(", sent by process ");
    put_dec(info->si_pid);
  } else {
    put(", fault address ");
    put_hex(reinterpret_cast<uintptr_t>(info->si_addr));
  }
  put("\n");
#if defined(__x86_64__)
  const auto* uc = static_cast<const ucontext_t*>(context);
  const uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const uintptr_t sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  put("  instruction ");
  put_hex(pc);
  put(" in ");
  put_symbol(pc);
  put("\n");
  Dl_info at_pc{};
  if (pc == 0 || !dladdr(reinterpret_cast<void*>(pc), &at_pc)) {  // a call to a dead pointer
    uintptr_t ret = 0;
    if (sp != 0 && (sp & 7) == 0) std::memcpy(&ret, reinterpret_cast<const void*>(sp), sizeof ret);
    put("  called from ");
    put_hex(ret);
    put(" in ");
    put_symbol(ret);
    put("\n");
  }
#else
  (void)context;
#endif
  void* frames[48];
  const int n = backtrace(frames, 48);
  put("  stack (the report's own frames first):\n");
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  put("  (an offset into a binary without symbols: addr2line -f -C -e BINARY OFFSET)\n");
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  report(sig, info, context);
  // Hand the signal to whoever had it before (MPI's handler, or the default action): the
  // faulting instruction runs again on return and raises it anew under that handler.
  for (int i = 0; i < kNumSignals; ++i)
    if (kSignals[i] == sig) sigaction(sig, &g_previous[i], nullptr);
  if (info->si_code <= 0) raise(sig);  // sent by a process, not raised by an instruction
}

}  // namespace

void install_crash_report(const char* where) {
  std::snprintf(g_where, sizeof g_where, "%s", where);
  if (g_installed) return;
  g_installed = true;
  void* warm[1];
  backtrace(warm, 1);  // loads libgcc's unwinder now: the handler must not be the first caller
  static char alt_stack[1 << 16];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &sa, &g_previous[i]);
}

}  // namespace sm
