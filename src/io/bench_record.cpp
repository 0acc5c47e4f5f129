// bench_record.cpp — JSONL benchmark records: field lists, atomic append, lookup of the
// previous record of the same configuration, the comparison table, and time/host stamps.
#include "spikemesh/io/bench_record.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "spikemesh/core/error.h"
#include "spikemesh/core/text_file.h"
#include "spikemesh/core/log.h"

namespace sm {

const std::vector<std::string>& bench_config_fields() {
  static const std::vector<std::string> fields = {
      // SpikingJelly's record fields (docs/semantics.md §7): what was run
      "benchmark_regime", "model", "mode", "prefer", "world_size", "optimizer_sharding",
      "memopt_level", "batch_size", "global_batch_size", "per_rank_batch_size", "data_replicas",
      "num_classes", "T", "steps", "warmup", "image_size", "mesh_shape", "tp_mesh_dim",
      "dp_mesh_dim", "memopt_compress_x", "pp_microbatches", "pp_memopt_stage_budget_ratio",
      "pp_schedule", "pp_virtual_stages", "pp_layout", "pp_delay_wgrad", "pp_memopt_stages",
      // ours: which implementation, where, at which precision and thread count
      "backend", "device", "precision", "threads", "hostname",
      // ours: the memopt search's budget (--memory-budget-mb; 0: none) and level 4's time bound
      "memory_budget_mb", "memopt_max_slowdown",
      // ours, GPU records only: whether the timed steps were replayed as a CUDA graph
      "cuda_graphs",
      // ours, GPU records only: the GPU numerics (--conv-algos: exact | deterministic | fast, each
      // optionally -tuned; --conv-fp32-precision and --matmul-fp32-precision: ieee | tf32)
      "conv_algos", "conv_fp32_precision", "matmul_fp32_precision",
      // ours, CPU records only: the kernel mode of f32 convolutions of spike inputs (--conv-algo),
      // the own kernels' registers (avx512 | avx2: SPIKEMESH_CPU_AVX512) and the most oneDNN may
      // use (ONEDNN_MAX_CPU_ISA)
      "conv_algo", "cpu_kernels_isa", "onednn_isa",
      // ours, pipeline records only: how stage boundaries travelled (staged | nccl-channels | mpi-channels)
      "pp_transfer_path",
      // PyTorch only (bench/torch_bench.py): eager vs torch.compile; spikemesh leaves it unset
      "compile"};
  return fields;
}

const std::vector<std::string>& bench_metric_fields() {
  static const std::vector<std::string> fields = {
      "step_latency_ms", "global_throughput_sps", "per_device_throughput_sps",
      "peak_allocated_mb", "peak_rss_mb", "forward_ms", "backward_ms", "optimizer_ms",
      "reset_ms", "data_ms", "tp_all_reduce_calls", "tp_all_reduce_mb", "warning_count",
      "optimize_ms", "memopt_trial_steps"};
  return fields;
}

void append_bench_record(const std::string& path, const BenchRecord& r) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec)
      SM_INPUT_ERROR("cannot write benchmark record to " << path << ": cannot create directory "
                                                         << p.parent_path().string() << ": "
                                                         << ec.message());
  }
  // replace: a stray invalid UTF-8 byte in a string field must not lose the record.
  const std::string line =
      r.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    SM_INPUT_ERROR("cannot write benchmark record to " << path << ": " << std::strerror(errno));
  // One write() of the whole line: with O_APPEND the kernel positions and writes it as a unit,
  // so lines of concurrent appenders never interleave. Only EINTR before any byte is retried.
  ssize_t n;
  do {
    n = ::write(fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (n < 0)
    SM_INPUT_ERROR("cannot write benchmark record to " << path << ": "
                                                       << std::strerror(write_errno));
  if (static_cast<size_t>(n) != line.size())
    SM_INPUT_ERROR("short write of benchmark record to " << path << " (" << n << " of "
                                                         << line.size()
                                                         << " bytes; disk full?)");
  if (!closed)
    SM_INPUT_ERROR("cannot write benchmark record to " << path << ": close: "
                                                       << std::strerror(errno));
}

namespace {

// Missing and null are the same "not set" for configuration matching.
bool is_unset(const BenchRecord& rec, const std::string& field) {
  auto it = rec.find(field);
  return it == rec.end() || it->is_null();
}

bool same_configuration(const BenchRecord& a, const BenchRecord& b) {
  for (const std::string& f : bench_config_fields()) {
    const bool a_unset = is_unset(a, f), b_unset = is_unset(b, f);
    if (a_unset || b_unset) {
      if (a_unset != b_unset) return false;
      continue;
    }
    // nlohmann compares numbers across integer/unsigned/float (8 == 8.0).
    if (a.at(f) != b.at(f)) return false;
  }
  return true;
}

}  // namespace

std::optional<BenchRecord> find_previous_record(const std::string& path, const BenchRecord& r) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  // Bounded and text-only (core/text_file.h): 256 MiB of JSON lines is ~500 k records.
  std::istringstream in(read_text_file(path, "--result-log", std::size_t(256) << 20));

  std::optional<BenchRecord> last;
  std::string line;
  for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
    BenchRecord rec = BenchRecord::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_discarded() || !rec.is_object()) {
      SM_WARN(path << ":" << lineno << ": not a JSON object record; line skipped");
      continue;
    }
    if (same_configuration(rec, r)) last = std::move(rec);
  }
  return last;
}

namespace {

bool is_integral(const BenchRecord& v) { return v.is_number_integer(); }

// Integers as integers; other numbers with 3 decimals. `sign` forces a leading '+'.
std::string format_number(double v, bool integral, bool sign) {
  char buf[64];
  if (integral)
    std::snprintf(buf, sizeof buf, sign ? "%+.0f" : "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, sign ? "%+.3f" : "%.3f", v);
  return buf;
}

}  // namespace

std::string compare_records(const BenchRecord& prev, const BenchRecord& cur) {
  struct Row {
    std::string metric, previous, current, delta, percent;
  };
  std::vector<Row> rows = {{"metric", "previous", "current", "delta", "percent"}};
  for (const std::string& m : bench_metric_fields()) {
    auto pi = prev.find(m), ci = cur.find(m);
    if (pi == prev.end() || ci == cur.end() || !pi->is_number() || !ci->is_number()) continue;
    const double p = pi->get<double>(), c = ci->get<double>();
    const bool integral = is_integral(*pi) && is_integral(*ci);
    const double delta = c - p;
    std::string percent = "n/a";
    if (p != 0 && std::isfinite(p) && std::isfinite(c)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * delta / std::fabs(p));
      percent = buf;
    }
    rows.push_back({m, format_number(p, integral, false), format_number(c, integral, false),
                    format_number(delta, integral, true), percent});
  }

  size_t w[5] = {0, 0, 0, 0, 0};
  for (const Row& r : rows) {
    const std::string* cells[5] = {&r.metric, &r.previous, &r.current, &r.delta, &r.percent};
    for (int i = 0; i < 5; ++i) w[i] = std::max(w[i], cells[i]->size());
  }
  std::ostringstream os;
  for (const Row& r : rows) {
    const std::string* cells[5] = {&r.metric, &r.previous, &r.current, &r.delta, &r.percent};
    // metric left-aligned, numbers right-aligned
    os << *cells[0] << std::string(w[0] - cells[0]->size(), ' ');
    for (int i = 1; i < 5; ++i) os << "  " << std::string(w[i] - cells[i]->size(), ' ') << *cells[i];
    os << "\n";
  }
  return os.str();
}

void stamp_record(BenchRecord& r) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);

  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");

  if (r.is_object() && r.contains("timestamp") && r.contains("hostname")) {
    r["timestamp"] = stamp;
    r["hostname"] = host;
    return;
  }
  BenchRecord out = BenchRecord::object();
  out["timestamp"] = stamp;
  out["hostname"] = host;
  if (r.is_object())
    for (auto it = r.begin(); it != r.end(); ++it)
      if (it.key() != "timestamp" && it.key() != "hostname") out[it.key()] = it.value();
  r = std::move(out);
}

}  // namespace sm
