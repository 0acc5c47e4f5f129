// test_pp_schedule_file.cpp — --pp-schedule-file as an untrusted user file, through
// the functions train, bench and plan call (resolve_microbatches, resolve_schedule): /dev/zero
// and a FIFO-like endless file end with an error naming the file instead of exhausting memory
// (checked in a forked child under an address-space limit, so a regression cannot take the
// machine down); a binary file is refused without echoing its bytes, and a token with non-ASCII
// bytes is quoted printable; a file whose actions use microbatch 99 names the file, its
// microbatch range and line, and never "--pp-microbatches" when that flag was not given; a
// 3-line file at pp 2 says so instead of reasoning about "rank s mod 3".
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "spikemesh/core/error.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {
namespace {

// The message of the Input error `f` throws; "" when it throws none; "<other>" for any other.
std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind() == ErrorKind::Input ? std::string(e.what()) : "<not an input error> " + std::string(e.what());
  } catch (const std::exception& e) {
    return std::string("<other> ") + e.what();
  }
  return "";
}

std::string temp_file(const std::string& tag, const std::string& content) {
  const std::string p = ::testing::TempDir() + "sm_ppfile_" + std::to_string(getpid()) + "_" + tag;
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

// True when every byte of `s` is printable ASCII, tab or newline (nothing raw from a file).
bool printable(const std::string& s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\n' && c != '\t') || c >= 0x7f) return false;
  return true;
}

// Runs `f` in a forked child limited to 1 GiB of new address space and 60 s of CPU: 0 when `f`
// threw an Input error containing `needle`, 1 other error, 2 no error, 3 out of memory /
// killed.
int in_limited_child(const std::function<void()>& f, const std::string& needle) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // 1 GiB more than this process already maps (libraries, thread stacks): far above the
    // bounded read (16 MiB), far below the machine.
    long vm_kb = 0;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmSize:", 0) == 0) vm_kb = std::atol(line.c_str() + 7);
    rlimit as{};
    as.rlim_cur = as.rlim_max = (rlim_t(vm_kb) << 10) + (rlim_t(1) << 30);
    setrlimit(RLIMIT_AS, &as);
    rlimit cpu{};
    cpu.rlim_cur = cpu.rlim_max = 60;
    setrlimit(RLIMIT_CPU, &cpu);
    int code = 2;
    try {
      f();
    } catch (const Error& e) {
      code = e.kind() == ErrorKind::Input && std::string(e.what()).find(needle) != std::string::npos ? 0 : 1;
    } catch (const std::bad_alloc&) {
      code = 3;
    } catch (...) {
      code = 1;
    }
    _exit(code);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return 4;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

}  // namespace

TEST(PpScheduleFile, DevZeroIsRefusedNamingTheFileNotReadUntilMemoryRunsOut) {
  EXPECT_EQ(in_limited_child([] { resolve_schedule("auto", "/dev/zero", 2, 1, false, 4); }, "/dev/zero"), 0)
      << "0: input error naming /dev/zero; 2: accepted; 3: memory exhausted";
  EXPECT_EQ(in_limited_child([] { resolve_microbatches(8, 2, 1, 0, "auto", false, "/dev/zero"); }, "/dev/zero"), 0);
  const std::string e = input_error_of([] { resolve_schedule("auto", "/dev/zero", 2, 1, false, 4); });
  EXPECT_NE(e.find("--pp-schedule-file /dev/zero"), std::string::npos) << e;
  // A directory and a missing file: named too.
  EXPECT_NE(input_error_of([] { resolve_schedule("auto", "/tmp", 2, 1, false, 4); }).find("/tmp"), std::string::npos);
  EXPECT_NE(input_error_of([] { resolve_schedule("auto", "/nonexistent/s.pp", 2, 1, false, 4); }).find("cannot open"),
            std::string::npos);
}

TEST(PpScheduleFile, BinaryContentIsNeverEchoed) {
  static const char kBin[] = "0F0\x01\x02\x1b[31m\xff\xfe garbage\n1F0\n";
  const std::string bin = temp_file("bin", std::string(kBin, sizeof kBin - 1));
  for (const std::string& e : {input_error_of([&] { resolve_schedule("auto", bin, 2, 1, false, 1); }),
                               input_error_of([&] { resolve_microbatches(8, 2, 1, 0, "auto", false, bin); })}) {
    EXPECT_NE(e.find(bin), std::string::npos) << e;
    EXPECT_NE(e.find("not a text file"), std::string::npos) << e;
    EXPECT_TRUE(printable(e)) << e;
  }
  // Text with non-ASCII bytes (no control characters) parses up to the bad token, which is
  // quoted printable.
  const std::string utf = temp_file("utf", "0F0 0SF0 0RB0 0BW0\n1RF0 1\xc3\xa9" "F0 1BW0 1SB0\n");
  const std::string e = input_error_of([&] { resolve_schedule("auto", utf, 2, 1, false, 1); });
  EXPECT_NE(e.find(utf + ":2: action '1\\xc3\\xa9F0'"), std::string::npos) << e;
  EXPECT_TRUE(printable(e)) << e;
  // parse_schedule itself (any source) never echoes raw bytes either.
  const std::string p = input_error_of([] { parse_schedule("0F0 \x7f\x80Q1\n", 1, "s.txt"); });
  EXPECT_TRUE(printable(p)) << p;
  EXPECT_NE(p.find("s.txt:1"), std::string::npos) << p;
  std::remove(bin.c_str());
  std::remove(utf.c_str());
}

TEST(PpScheduleFile, MicrobatchCountFromTheFileNamesTheFileNotAFlag) {
  // Valid placement at pp 2 (rank 0: stage 0, rank 1: stage 1); microbatch 99 on line 2
  // (after a comment line), so the file implies 100 microbatches.
  const std::string f = temp_file("mb", "# two ranks\n0F0 0F99\n1F0\n");
  const std::string e = input_error_of([&] { resolve_microbatches(8, 2, 1, 0, "auto", false, f); });
  EXPECT_NE(e.find("--pp-schedule-file " + f), std::string::npos) << e;
  EXPECT_NE(e.find("microbatches 0..99 (100 microbatches; microbatch 99 first on line 2)"), std::string::npos) << e;
  EXPECT_NE(e.find("batch of 8 samples per replica"), std::string::npos) << e;
  EXPECT_EQ(e.find("--pp-microbatches"), std::string::npos) << "the user never gave --pp-microbatches: " << e;
  // --pp-microbatches given: then the flag may be named, with the file's range beside it.
  const std::string g = input_error_of([&] { resolve_schedule("auto", f, 2, 1, false, 4); });
  EXPECT_NE(g.find(f), std::string::npos) << g;
  EXPECT_NE(g.find("0..99"), std::string::npos) << g;
  EXPECT_NE(g.find("4 microbatches per step (--pp-microbatches)"), std::string::npos) << g;
  // A count that divides the batch is taken from the file.
  const std::string ok = temp_file("mb4", "0F0 0F3\n1F0\n");
  EXPECT_EQ(resolve_microbatches(8, 2, 1, 0, "auto", false, ok), 4);
  std::remove(f.c_str());
  std::remove(ok.c_str());
}

TEST(PpScheduleFile, LineCountOtherThanPpIsSaidPlainly) {
  const std::string f = temp_file("lines", "0F0 0SF0\n1RF0 1F0\n2F0\n");
  for (const std::string& e : {input_error_of([&] { resolve_schedule("auto", f, 2, 1, false, 1); }),
                               input_error_of([&] { resolve_microbatches(8, 2, 1, 0, "auto", false, f); })}) {
    EXPECT_NE(e.find(f), std::string::npos) << e;
    EXPECT_NE(e.find("the file has 3 lines of actions"), std::string::npos) << e;
    EXPECT_NE(e.find("pp = 2"), std::string::npos) << e;
    EXPECT_EQ(e.find("mod 3"), std::string::npos) << e;
    EXPECT_EQ(e.find("rank 2"), std::string::npos) << e;
  }
  // One line at pp 2 likewise.
  const std::string one = temp_file("one", "0F0\n");
  EXPECT_NE(input_error_of([&] { resolve_schedule("auto", one, 2, 1, false, 1); }).find("has 1 line of actions"),
            std::string::npos);
  std::remove(f.c_str());
  std::remove(one.c_str());
}

}  // namespace sm
