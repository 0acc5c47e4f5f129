// toml_guard.h — for the TOML harnesses (fuzz_spec_loader, fuzz_train_config): whether
// toml++ itself survives parsing a text, decided in a forked child. Debian 12's toml++ 3.3.0
// has reachable assert()s (builds without NDEBUG: an abort inside the parser, e.g. "[}" in a
// table header or a value that starts with a terminator) and a __builtin_unreachable() in its
// Unicode whitespace table (core/toml_guard.h; UBSan stops the child there).
// Those are third-party bugs
// (tests/README.md); an input that kills the bare parser is skipped, so the harnesses keep
// finding spikemesh's own bugs. In the child every sanitizer/libFuzzer crash hook is removed
// first, so a child's death writes no crash artifact and prints nothing.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <toml++/toml.h>

#if defined(__has_include)
#if __has_include(<sanitizer/common_interface_defs.h>) && defined(__clang__)
#include <sanitizer/common_interface_defs.h>
#define SM_FUZZ_HAVE_SANITIZER_HOOKS 1
#endif
#endif

namespace fuzz {

inline bool toml_parser_survives(const std::string& text) {
  const pid_t pid = fork();
  if (pid < 0) return true;  // cannot tell: let the real parse run
  if (pid == 0) {
#ifdef SM_FUZZ_HAVE_SANITIZER_HOOKS
    __sanitizer_set_death_callback(nullptr);
#endif
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGILL, SIGFPE}) signal(sig, SIG_DFL);
    close(2);
    close(1);
    // LLVM's libomp (clang -fopenmp) registers every process, forked children included, in
    // /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> and removes it only at a normal exit: a child
    // ending in _exit or an abort would leave one file per input behind. Removed up front.
    char reg[96];
    std::snprintf(reg, sizeof reg, "/dev/shm/__KMP_REGISTERED_LIB_%d_%d", int(getpid()), int(getuid()));
    unlink(reg);
    try {
      (void)toml::parse(std::string_view(text), std::string_view("guard"));
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace fuzz
