// fuzz_util.h — shared helpers of the libFuzzer harnesses in tests/fuzz/ (tests/README.md):
// a per-process scratch file/directory under /dev/shm (or $TMPDIR), a byte reader that turns
// the fuzz input into bounded choices, the "expected outcome" wrapper (sm::Error is how the
// library refuses bad input; anything else escaping is a finding), and a loud failure for a
// broken property. Header-only so every harness is one .cpp that builds with clang
// (libFuzzer) and with mpicxx (tests/fuzz/replay_main.cpp, make fuzz-replay).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/core/toml_guard.h"
#include "spikemesh/core/log.h"

namespace fuzz {

inline std::vector<std::string>* scratch_registry() {
  static std::vector<std::string>* v = new std::vector<std::string>;  // outlives atexit handlers
  return v;
}

// /dev/shm/<tag>.<pid> (tmpfs: no disk I/O, fsync is free); $TMPDIR or /tmp without it.
inline std::string scratch_path(const std::string& tag) {
  std::string dir = "/dev/shm";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || access(dir.c_str(), W_OK) != 0) {
    const char* t = std::getenv("TMPDIR");
    dir = t && *t ? t : "/tmp";
  }
  const std::string path = dir + "/spikemesh_" + tag + "." + std::to_string(getpid());
  // Removed when the process exits normally (libFuzzer's -max_total_time, the replay driver).
  static const bool registered = [] {
    std::atexit([] {
      for (const std::string& p : *scratch_registry()) {
        std::error_code e;
        std::filesystem::remove_all(p, e);
      }
    });
    return true;
  }();
  (void)registered;
  scratch_registry()->push_back(path);
  return path;
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// A property of the code under test does not hold: abort (a libFuzzer finding, a replay failure).
[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "fuzz property violated: %s\n", why.c_str());
  std::abort();
}

// The message of the last sm::Error expect_ok_or_input_error caught (for failure reports).
inline std::string& last_error() {
  static std::string e;
  return e;
}

// Runs f; an sm::Error is the library refusing bad input (the expected outcome). Returns
// whether f completed. Any other exception propagates (libFuzzer reports it as a crash).
// SPIKEMESH_FUZZ_STRICT=1 also counts sm::Error of kind Internal (a failed SM_CHECK, i.e. an
// invariant the input validation should have protected) as a finding.
template <class F>
bool expect_ok_or_input_error(F&& f) {
  try {
    f();
    return true;
  } catch (const sm::Error& e) {
    last_error() = e.what();
    static const bool strict = [] {
      const char* s = std::getenv("SPIKEMESH_FUZZ_STRICT");
      return s && std::strcmp(s, "1") == 0;
    }();
    if (strict && e.kind() == sm::ErrorKind::Internal) fail(std::string("internal error on input: ") + e.what());
    return false;
  }
}

// Quiet library logging (warnings about bad input are expected by the thousand).
inline void quiet_logs() { sm::log_set_level(sm::LogLevel::Error); }

// Whether toml++ 3.3.0 (Debian 12) would crash on the input instead of throwing: the cases
// spikemesh itself refuses before parsing (core/toml_guard.h). The TOML harnesses skip them.
inline bool toml_known_bug_input(const uint8_t* d, size_t n) {
  return !sm::toml_parser_bug_reason(std::string(reinterpret_cast<const char*>(d), n)).empty();
}

// Consumes the fuzz input as bounded integers and strings; past the end everything reads 0/"".
class Bytes {
 public:
  Bytes(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  size_t left() const { return n_ - at_; }
  uint8_t u8() { return at_ < n_ ? d_[at_++] : 0; }
  bool flag() { return u8() & 1; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | u8();
    return v;
  }
  uint64_t u64() { return (uint64_t(u32()) << 32) | u32(); }
  // Uniform-ish in [lo, hi] (hi - lo < 2^32).
  int64_t range(int64_t lo, int64_t hi) {
    const uint64_t span = uint64_t(hi - lo) + 1;
    const uint64_t r = span <= 256 ? u8() : u32();
    return lo + int64_t(r % span);
  }
  // An integer that is usually small but may be an edge value: 0, -1, huge, INT64 limits, ...
  int64_t edgy_int(int64_t small_lo, int64_t small_hi) {
    switch (u8() % 12) {
      case 0: return 0;
      case 1: return -1;
      case 2: return INT32_MAX;
      case 3: return int64_t(INT32_MAX) + 1;
      case 4: return INT64_MAX;
      case 5: return INT64_MIN;
      case 6: return int64_t(u64());
      case 7: return -range(1, 1000);
      case 8: return int64_t(1) << range(20, 62);
      default: return range(small_lo, small_hi);
    }
  }
  // A double that may be NaN, ±Inf, huge, negative, denormal.
  double edgy_double(double typical) {
    switch (u8() % 10) {
      case 0: return std::numeric_limits<double>::quiet_NaN();
      case 1: return std::numeric_limits<double>::infinity();
      case 2: return -std::numeric_limits<double>::infinity();
      case 3: return 1e300;
      case 4: return -typical;
      case 5: return 0.0;
      case 6: return std::numeric_limits<double>::denorm_min();
      case 7: {
        double d;
        uint64_t bits = u64();
        std::memcpy(&d, &bits, sizeof d);
        return d;
      }
      default: return typical * (1 + u8() / 64.0);
    }
  }
  // Up to max_len bytes, as they are (may hold NULs, invalid UTF-8).
  std::string str(size_t max_len) {
    size_t len = std::min<size_t>(u8() % (max_len + 1), left());
    std::string s(reinterpret_cast<const char*>(d_ + at_), len);
    at_ += len;
    // Strings may reach toml++ (a checkpoint's /meta config): keep clear of its known UB.
    if (toml_known_bug_input(reinterpret_cast<const uint8_t*>(s.data()), s.size()))
      for (char& c : s) c = c == '[' ? '(' : char(c & 0x7F);
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_, at_ = 0;
};

}  // namespace fuzz
