// test_bench_record.cpp — benchmark records: append/find by configuration (most recent match,
// other configurations ignored, missing file, malformed lines), concurrent appends that must
// not interleave, the comparison table (values, delta, percent checked by hand), stamping,
// and unwritable paths as input errors naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/io/bench_record.h"

namespace {

namespace fs = std::filesystem;
using sm::BenchRecord;

// A fresh directory per test, removed afterwards.
class BenchRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("sm_bench_record_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

BenchRecord config(const std::string& mode, int batch) {
  BenchRecord r;
  r["benchmark_regime"] = "throughput_weak_scaling";
  r["model"] = "cifar10dvs_vgg";
  r["mode"] = mode;
  r["world_size"] = 1;
  r["batch_size"] = batch;
  r["T"] = 10;
  r["backend"] = "spikemesh";
  r["device"] = "cpu";
  r["hostname"] = "node1";
  return r;
}

BenchRecord with_latency(BenchRecord r, double ms) {
  r["step_latency_ms"] = ms;
  return r;
}

std::vector<std::string> read_lines(const std::string& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(BenchRecordFields, ConfigAndMetricListsAreDisjointAndComplete) {
  const auto& cfg = sm::bench_config_fields();
  const auto& met = sm::bench_metric_fields();
  for (const char* f : {"benchmark_regime", "model", "mode", "T", "pp_memopt_stages", "backend",
                        "device", "precision", "threads", "hostname", "mesh_shape", "compile"})
    EXPECT_NE(std::find(cfg.begin(), cfg.end(), f), cfg.end()) << f;
  for (const char* f : {"step_latency_ms", "global_throughput_sps", "peak_allocated_mb",
                        "peak_rss_mb", "forward_ms", "warning_count", "optimize_ms"})
    EXPECT_NE(std::find(met.begin(), met.end(), f), met.end()) << f;
  for (const auto& f : cfg) EXPECT_EQ(std::find(met.begin(), met.end(), f), met.end()) << f;
  for (const char* f : {"timestamp", "recommendation"}) {
    EXPECT_EQ(std::find(cfg.begin(), cfg.end(), f), cfg.end()) << f;
    EXPECT_EQ(std::find(met.begin(), met.end(), f), met.end()) << f;
  }
}

TEST_F(BenchRecordTest, AppendWritesOneJsonLinePerRecordAndCreatesDirectories) {
  const std::string p = path("a/b/log.jsonl");
  sm::append_bench_record(p, with_latency(config("dp", 8), 12.5));
  sm::append_bench_record(p, with_latency(config("tp", 8), 7.0));
  const auto lines = read_lines(p);
  ASSERT_EQ(lines.size(), 2u);
  const auto first = BenchRecord::parse(lines[0]);
  EXPECT_EQ(first["mode"], "dp");
  EXPECT_EQ(first["step_latency_ms"], 12.5);
  // insertion order kept: first field written first
  EXPECT_EQ(first.begin().key(), "benchmark_regime");
  EXPECT_EQ(BenchRecord::parse(lines[1])["mode"], "tp");
}

TEST_F(BenchRecordTest, FindReturnsMostRecentRecordOfTheSameConfiguration) {
  const std::string p = path("log.jsonl");
  sm::append_bench_record(p, with_latency(config("dp", 8), 1.0));
  sm::append_bench_record(p, with_latency(config("tp", 8), 2.0));   // other mode
  sm::append_bench_record(p, with_latency(config("dp", 8), 3.0));   // the one
  sm::append_bench_record(p, with_latency(config("dp", 16), 4.0));  // other batch
  BenchRecord other_host = with_latency(config("dp", 8), 5.0);
  other_host["hostname"] = "node2";
  sm::append_bench_record(p, other_host);
  BenchRecord torch = with_latency(config("dp", 8), 6.0);
  torch["backend"] = "pytorch";
  sm::append_bench_record(p, torch);

  auto prev = sm::find_previous_record(p, config("dp", 8));
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ((*prev)["step_latency_ms"], 3.0);

  auto prev_tp = sm::find_previous_record(p, config("tp", 8));
  ASSERT_TRUE(prev_tp.has_value());
  EXPECT_EQ((*prev_tp)["step_latency_ms"], 2.0);

  EXPECT_FALSE(sm::find_previous_record(p, config("pp", 8)).has_value());
}

TEST_F(BenchRecordTest, FieldMissingOnBothSidesMatchesButMissingOnOneSideDoesNot) {
  const std::string p = path("log.jsonl");
  BenchRecord with_mesh = with_latency(config("fsdp_tp", 8), 1.0);
  with_mesh["mesh_shape"] = {2, 2};
  sm::append_bench_record(p, with_mesh);
  sm::append_bench_record(p, with_latency(config("fsdp_tp", 8), 2.0));  // no mesh_shape

  auto prev = sm::find_previous_record(p, config("fsdp_tp", 8));  // no mesh_shape
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ((*prev)["step_latency_ms"], 2.0);

  BenchRecord query = config("fsdp_tp", 8);
  query["mesh_shape"] = {2, 2};
  prev = sm::find_previous_record(p, query);
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ((*prev)["step_latency_ms"], 1.0);

  query["mesh_shape"] = {4, 1};
  EXPECT_FALSE(sm::find_previous_record(p, query).has_value());

  // null counts as not set
  query["mesh_shape"] = nullptr;
  prev = sm::find_previous_record(p, query);
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ((*prev)["step_latency_ms"], 2.0);
}

// GPU records carry the three numerics choices (--conv-algos, --conv-fp32-precision,
// --matmul-fp32-precision): each is configuration, so records differing in one never compare.
TEST_F(BenchRecordTest, GpuNumericsChoicesAreConfigurationFields) {
  const auto& cfg = sm::bench_config_fields();
  for (const char* f : {"conv_algos", "conv_fp32_precision", "matmul_fp32_precision"})
    EXPECT_NE(std::find(cfg.begin(), cfg.end(), f), cfg.end()) << f;
  const std::string p = path("log.jsonl");
  auto gpu = [](const char* algos, const char* conv, const char* matmul, double ms) {
    BenchRecord r = with_latency(config("none", 32), ms);
    r["device"] = "cuda";
    r["conv_algos"] = algos;
    r["conv_fp32_precision"] = conv;
    r["matmul_fp32_precision"] = matmul;
    return r;
  };
  sm::append_bench_record(p, gpu("exact", "ieee", "ieee", 1.0));
  sm::append_bench_record(p, gpu("exact", "tf32", "ieee", 2.0));
  sm::append_bench_record(p, gpu("exact", "ieee", "tf32", 3.0));
  sm::append_bench_record(p, gpu("fast-tuned", "ieee", "ieee", 4.0));
  const double want[] = {1.0, 2.0, 3.0, 4.0};
  const BenchRecord queries[] = {gpu("exact", "ieee", "ieee", 0), gpu("exact", "tf32", "ieee", 0),
                                 gpu("exact", "ieee", "tf32", 0), gpu("fast-tuned", "ieee", "ieee", 0)};
  for (int i = 0; i < 4; ++i) {
    auto prev = sm::find_previous_record(p, queries[i]);
    ASSERT_TRUE(prev.has_value()) << i;
    EXPECT_EQ((*prev)["step_latency_ms"], want[i]) << i;
  }
  EXPECT_FALSE(sm::find_previous_record(p, gpu("exact", "tf32", "tf32", 0)).has_value());
}

TEST_F(BenchRecordTest, MetricsTimestampAndRecommendationDoNotAffectMatching) {
  const std::string p = path("log.jsonl");
  BenchRecord old = with_latency(config("dp", 8), 9.0);
  old["timestamp"] = "2020-01-01T00:00:00Z";
  old["recommendation"] = {{"mode", "dp"}, {"rationale", "one rank"}};
  old["warning_count"] = 3;
  sm::append_bench_record(p, old);
  BenchRecord query = with_latency(config("dp", 8), 1.0);
  query["timestamp"] = "2030-01-01T00:00:00Z";
  auto prev = sm::find_previous_record(p, query);
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ((*prev)["step_latency_ms"], 9.0);
}

TEST_F(BenchRecordTest, IntegerAndFloatConfigValuesCompareByValue) {
  const std::string p = path("log.jsonl");
  BenchRecord r = with_latency(config("pp", 8), 1.0);
  r["pp_memopt_stage_budget_ratio"] = 1;  // written as integer
  sm::append_bench_record(p, r);
  BenchRecord q = config("pp", 8);
  q["pp_memopt_stage_budget_ratio"] = 1.0;
  EXPECT_TRUE(sm::find_previous_record(p, q).has_value());
  q["pp_memopt_stage_budget_ratio"] = 0.5;
  EXPECT_FALSE(sm::find_previous_record(p, q).has_value());
}

TEST_F(BenchRecordTest, MissingFileGivesNullopt) {
  EXPECT_FALSE(sm::find_previous_record(path("nope.jsonl"), config("dp", 8)).has_value());
  EXPECT_FALSE(sm::find_previous_record(path("no/such/dir/x.jsonl"), config("dp", 8)).has_value());
}

TEST_F(BenchRecordTest, MalformedAndBlankLinesAreSkipped) {
  const std::string p = path("log.jsonl");
  sm::append_bench_record(p, with_latency(config("dp", 8), 1.0));
  {
    std::ofstream out(p, std::ios::app);
    out << "{\"mode\": \"dp\", truncated\n";  // malformed
    out << "\n";                              // blank
    out << "[1, 2, 3]\n";                     // valid JSON, not a record
  }
  sm::append_bench_record(p, with_latency(config("dp", 8), 2.0));
  {
    std::ofstream out(p, std::ios::app);
    out << "{\"model\": \"cifar10dvs_vgg\"";  // unterminated last line, no newline
  }
  auto prev = sm::find_previous_record(p, config("dp", 8));
  ASSERT_TRUE(prev.has_value());
  EXPECT_EQ((*prev)["step_latency_ms"], 2.0);
}

TEST_F(BenchRecordTest, ConcurrentAppendsNeverInterleave) {
  const std::string p = path("log.jsonl");
  const int kThreads = 4, kPerThread = 40;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        BenchRecord r = config("dp", t);
        r["index"] = i;
        r["padding"] = std::string(8000, static_cast<char>('a' + t));  // > one pipe buffer page
        sm::append_bench_record(p, r);
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto lines = read_lines(p);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kPerThread));
  std::vector<int> seen(kThreads, 0);
  for (const auto& l : lines) {
    const auto r = BenchRecord::parse(l, nullptr, false);
    ASSERT_FALSE(r.is_discarded()) << l.substr(0, 80);
    const int t = r["batch_size"].get<int>();
    EXPECT_EQ(r["padding"], std::string(8000, static_cast<char>('a' + t)));
    EXPECT_EQ(r["index"].get<int>(), seen[t]);  // each thread's records in its own order
    seen[t]++;
  }
}

TEST_F(BenchRecordTest, UnwritablePathIsAnInputErrorNamingTheFile) {
  // parent "directory" is a regular file (fails even for root, unlike permission bits)
  const std::string blocker = path("plain_file");
  { std::ofstream(blocker) << "x"; }
  const std::string p = blocker + "/sub/log.jsonl";
  try {
    sm::append_bench_record(p, config("dp", 8));
    FAIL() << "expected an error";
  } catch (const sm::Error& e) {
    EXPECT_EQ(e.kind(), sm::ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  // the path is a directory
  try {
    sm::append_bench_record(dir_.string(), config("dp", 8));
    FAIL() << "expected an error";
  } catch (const sm::Error& e) {
    EXPECT_EQ(e.kind(), sm::ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos) << e.what();
  }
}

// The row of `metric` in a compare_records table, split on whitespace.
std::vector<std::string> row_of(const std::string& table, const std::string& metric) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<std::string> cells;
    for (std::string c; ls >> c;) cells.push_back(c);
    if (!cells.empty() && cells[0] == metric) return cells;
  }
  return {};
}

TEST(BenchRecordCompare, DeltaAndPercentPerMetricPresentInBoth) {
  BenchRecord prev, cur;
  prev["step_latency_ms"] = 10;
  cur["step_latency_ms"] = 12;
  prev["global_throughput_sps"] = 155.5;
  cur["global_throughput_sps"] = 140.0;
  prev["peak_allocated_mb"] = 400.0;  // only in prev
  cur["peak_rss_mb"] = 1500.0;        // only in cur
  prev["warning_count"] = 0;
  cur["warning_count"] = 2;
  prev["tp_all_reduce_mb"] = 8.0;
  cur["tp_all_reduce_mb"] = 6.0;
  prev["model"] = "cifar10dvs_vgg";  // not a metric
  cur["model"] = "cifar10dvs_vgg";
  const std::string table = sm::compare_records(prev, cur);

  const auto header = row_of(table, "metric");
  EXPECT_EQ(header, (std::vector<std::string>{"metric", "previous", "current", "delta", "percent"}));
  EXPECT_EQ(row_of(table, "step_latency_ms"),
            (std::vector<std::string>{"step_latency_ms", "10", "12", "+2", "+20.0%"}));
  // 140 - 155.5 = -15.5; -15.5 / 155.5 = -9.967...%
  EXPECT_EQ(row_of(table, "global_throughput_sps"),
            (std::vector<std::string>{"global_throughput_sps", "155.500", "140.000", "-15.500",
                                      "-10.0%"}));
  EXPECT_EQ(row_of(table, "tp_all_reduce_mb"),
            (std::vector<std::string>{"tp_all_reduce_mb", "8.000", "6.000", "-2.000", "-25.0%"}));
  // previous 0: percent undefined
  EXPECT_EQ(row_of(table, "warning_count"),
            (std::vector<std::string>{"warning_count", "0", "2", "+2", "n/a"}));
  EXPECT_TRUE(row_of(table, "peak_allocated_mb").empty());
  EXPECT_TRUE(row_of(table, "peak_rss_mb").empty());
  EXPECT_TRUE(row_of(table, "model").empty());
  // header + 4 rows
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 5);
}

TEST(BenchRecordCompare, NegativePreviousGivesPercentOfItsMagnitude) {
  BenchRecord prev, cur;
  prev["optimize_ms"] = -4.0;  // not realistic, but the sign of the percent must follow delta
  cur["optimize_ms"] = -3.0;
  EXPECT_EQ(row_of(sm::compare_records(prev, cur), "optimize_ms"),
            (std::vector<std::string>{"optimize_ms", "-4.000", "-3.000", "+1.000", "+25.0%"}));
}

TEST(BenchRecordStamp, TimestampIsIsoUtcAndHostnameIsSetFirst) {
  BenchRecord r = config("dp", 8);
  r.erase("hostname");
  sm::stamp_record(r);
  ASSERT_TRUE(r.contains("timestamp"));
  const std::string ts = r["timestamp"].get<std::string>();
  EXPECT_TRUE(std::regex_match(ts, std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z)"))) << ts;
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(r["hostname"], std::string(host));
  EXPECT_EQ(r.begin().key(), "timestamp");
  EXPECT_EQ(r["model"], "cifar10dvs_vgg");  // other fields kept
  EXPECT_EQ(r.size(), config("dp", 8).size() + 1);

  r["hostname"] = "stale";
  sm::stamp_record(r);  // re-stamping overwrites in place
  EXPECT_EQ(r["hostname"], std::string(host));
  EXPECT_EQ(r.begin().key(), "timestamp");
}

}  // namespace
