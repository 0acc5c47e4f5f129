// flag_ranges.cpp — the table of numeric flag ranges and its checks (core/flag_ranges.h).
#include "spikemesh/core/flag_ranges.h"

#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/text_file.h"

namespace sm {

namespace {
constexpr double kBig = 9.0e15;        // integers above 2^53 are not exact in a double
constexpr double kSamples = 1 << 24;   // batch-like sizes: 16 Mi samples
constexpr double kSteps = 1e12;        // step counts
constexpr double kInf = HUGE_VAL;

FlagRange R(double lo, double hi, const char* note = "") {
  FlagRange r;
  r.lo = lo;
  r.hi = hi;
  r.note = note;
  return r;
}
FlagRange open_lo(double lo, double hi, const char* note = "") {
  FlagRange r = R(lo, hi, note);
  r.lo_open = true;
  return r;
}
FlagRange with_sentinel(FlagRange r, double s) {
  r.has_sentinel = true;
  r.sentinel = s;
  return r;
}

const std::map<std::string, FlagRange>& table() {
  static const std::map<std::string, FlagRange> t = {
      // model
      {"T", R(1, 65536, "time steps")},
      {"dropout", with_sentinel(R(0, 0.999999, "-1: the spec's"), -1)},
      // data and optimisation (train, bench, dump-grads)
      {"epochs", R(0, 1e9)},
      {"batch-size", R(1, kSamples)},
      {"eval-batch-size", R(0, kSamples, "0: --batch-size")},
      {"global-batch-size", R(0, kSamples * 1024, "0: batch-size x dp x grad-accum")},
      {"max-steps", R(0, kSteps, "0: no limit")},
      {"steps", R(0, kSteps)},
      {"warmup", R(0, kSteps)},
      {"lr", R(0, 1e6)},
      {"weight-decay", R(0, 1e6)},
      {"momentum", R(0, 1)},
      {"warmup-steps", R(0, kSteps)},
      {"min-lr", R(0, 1e6)},
      {"lr-step-size", R(0, kSteps)},
      {"lr-gamma", R(0, 1e6)},
      {"clip-grad-norm", R(0, 1e30, "0: off")},
      {"seed", R(0, kBig)},
      {"grad-accum", R(1, 1 << 20)},
      // run
      {"threads", R(0, 0, "0: cores / ranks on this node")},  // hi: machine_cpu_count()
      {"ckpt-every", R(0, kSteps, "0: at the end and on signals")},
      {"keep", R(1, 1e6)},
      {"log-every", R(1, kSteps)},
      {"check-replicas", R(0, kSteps, "0: at the start only")},
      // parallelism
      {"mesh-shape", R(1, 1 << 20)},
      {"tp-mesh-dim", R(-1, 2, "-1: DP TP PP order")},
      {"dp-mesh-dim", R(-1, 2, "-1: DP TP PP order")},
      {"comm-timeout", R(0, 1e7, "seconds; 0: never")},
      {"gpus-per-node", R(0, 1024, "plan: GPUs each node shows")},
      {"bucket-mb", open_lo(0, 1 << 20)},
      {"pp-virtual-stages", R(1, 1024)},
      {"pp-microbatches", R(0, 1 << 20, "0: automatic")},
      {"pp-timeline-steps", R(0, 1e6)},
      {"memopt-level", R(0, 4)},
      {"memory-budget-mb", R(0, 1e12, "0: none")},
      {"memopt-max-slowdown", R(1, 100)},
      {"pp-memopt-stage-budget-ratio", open_lo(0, 1)},
      {"timeline-columns", R(20, 10000)},
      // bench, data, commtest
      {"image-size", R(0, 1 << 16, "0: the spec's")},
      {"num-classes", R(0, 1 << 24, "0: the spec's")},
      {"kernel-neurons", R(1, 1LL << 34)},
      {"classes", R(2, 1 << 16)},
      {"size", R(1, 1 << 14)},
      {"train", R(0, kSamples * 64)},
      {"test", R(0, kSamples * 64)},
      {"min-bytes", R(0, 1LL << 40)},
      {"max-bytes", R(0, 1LL << 40)},
      {"iters", R(1, 1e9)},
      {"duration-us", R(1, 1e12, "microseconds")},
      {"dt-ms", R(0, 1e9, "milliseconds; 0: --split-by")},
      {"train-ratio", open_lo(0, 1)},
      {"deflate", R(-1, 9, "0: uncompressed; -1: auto")},
      {"files-per-round", R(1, 1 << 20)},
      {"batches", R(1, 1e9)},
      {"prefetch", R(1, 64)},
      {"step-ms", R(0, 1e9, "0: no comparison")},
      {"epoch", R(0, 1e9)},
      {"first", R(0, kSamples * 64)},
      {"count", R(1, 1 << 16)},
      // plan, calibrate
      {"top", R(1, 1 << 20)},
      // ckpt export
      {"nir-dt", open_lo(0, 1e6, "seconds")},
  };
  return t;
}

std::string num(double v) {
  if (v == kInf) return "inf";
  std::ostringstream os;
  os.precision(15);
  os << v;
  return os.str();
}
}  // namespace

int64_t machine_cpu_count() {
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return std::max<int64_t>({1, omp_get_num_procs(), online > 0 ? online : 1});
}

const FlagRange* flag_range(const std::string& key) {
  static thread_local FlagRange threads;
  const auto& t = table();
  auto it = t.find(key);
  if (it == t.end()) return nullptr;
  if (key == "threads") {
    threads = it->second;
    threads.hi = static_cast<double>(machine_cpu_count());
    return &threads;
  }
  return &it->second;
}

std::string flag_range_text(const std::string& key) {
  const FlagRange* r = flag_range(key);
  if (!r) return "";
  std::string s = (r->lo_open ? "(" : "[") + num(r->lo) + ", " + num(r->hi) + "]";
  std::string notes = key == "threads" ? num(r->hi) + ": the CPUs of this machine" : "";
  if (*r->note) notes += (notes.empty() ? "" : "; ") + std::string(r->note);
  return notes.empty() ? s : s + " (" + notes + ")";
}

void check_flag_value(const std::string& key, double value, const std::string& origin) {
  if (!std::isfinite(value)) SM_INPUT_ERROR(origin << " must be a finite number, got " << value);
  const FlagRange* r = flag_range(key);
  if (!r) return;
  if (r->has_sentinel && value == r->sentinel) return;
  const bool low = r->lo_open ? !(value > r->lo) : !(value >= r->lo);
  if (low || value > r->hi) {
    std::ostringstream os;
    os.precision(15);
    os << value;
    const std::string bound = low ? (r->lo_open ? "> " : ">= ") + num(r->lo) : "<= " + num(r->hi);
    SM_INPUT_ERROR(origin << " must be " << bound << ", got " << os.str() << "; range " << flag_range_text(key));
  }
}

int64_t parse_flag_int(const std::string& key, const std::string& text, const std::string& origin) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end)
    SM_INPUT_ERROR(origin << ": expected an integer, got '" << printable_token(text) << "'");
  if (errno == ERANGE)
    SM_INPUT_ERROR(origin << " " << printable_token(text) << " does not fit in 64 bits"
                          << (flag_range(key) ? "; expected " + flag_range_text(key) : std::string()));
  check_flag_value(key, static_cast<double>(x), origin);
  return x;
}

double parse_flag_real(const std::string& key, const std::string& text, const std::string& origin) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end)
    SM_INPUT_ERROR(origin << ": expected a number, got '" << printable_token(text) << "'");
  if (errno == ERANGE && std::fabs(x) > 1) SM_INPUT_ERROR(origin << " " << printable_token(text) << " is too large");
  check_flag_value(key, x, origin);
  return x;
}

CLI::Validator range_validator(const std::string& key, bool integer) {
  return CLI::Validator(
      [key, integer](std::string& s) -> std::string {
        try {
          if (integer)
            parse_flag_int(key, s, "--" + key);
          else
            parse_flag_real(key, s, "--" + key);
        } catch (const Error& e) {
          // CLI11 prefixes the flag itself: drop ours ("--key 5 is ..." -> "5 is ...").
          std::string m = e.what();
          const std::string own = "--" + key;
          if (m.rfind(own, 0) == 0) m = m.substr(own.size());
          while (!m.empty() && (m[0] == ' ' || m[0] == ':')) m.erase(0, 1);
          return m;
        }
        return std::string();
      },
      flag_range_text(key));
}

}  // namespace sm
