// test_crash_report.cpp — the fatal-signal report (core/crash_report.h), in death tests: a
// call through a null function pointer names the calling function's return address, and a
// read at a bad address names that address; the process still dies (of the signal, or of the
// sanitizer's exit when one runs after the report).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdint>

#include "spikemesh/core/crash_report.h"

namespace {

bool died(int status) { return WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0); }

using Fn = void (*)();
__attribute__((noinline)) void call_through(volatile Fn* f) { (*f)(); }

__attribute__((noinline)) int read_at(uintptr_t address) { return *reinterpret_cast<volatile int*>(address); }

}  // namespace

TEST(CrashReport, NullCallNamesTheCaller) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        sm::install_crash_report("rank 7 on testhost");
        volatile Fn f = nullptr;
        call_through(&f);
      },
      died,
      "spikemesh: fatal: SIGSEGV \\(invalid memory access\\) on rank 7 on testhost, fault address 0x0000000000000000\n"
      "  instruction 0x0000000000000000 in \\?\n"
      "  called from 0x[0-9a-f]{16} in [^?\n]*spikemesh_tests\\)\n"
      "  stack");
}

TEST(CrashReport, BadReadNamesTheAddressAndInstruction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        sm::install_crash_report("rank 0 on testhost");
        read_at(0x10);
      },
      died,
      "fatal: SIGSEGV \\(invalid memory access\\) on rank 0 on testhost, fault address 0x0000000000000010\n"
      "  instruction 0x[0-9a-f]{16} in [^?\n]*spikemesh_tests\\)\n"
      "  stack");
}
