// bench_record.h — benchmark records: one JSON object per run, appended as one line to a
// JSONL result log (docs/semantics.md §7), found again by configuration, and compared.
// A record's fields are either configuration (what was run: model, mode, batch, mesh, ...,
// plus our backend/device/precision/threads/hostname, and "compile" which only PyTorch
// records set), metrics (numbers compared between runs: latency, throughput, memory, phase
// times, counters) or neither (timestamp, recommendation {mode, rationale}, notes). Both `spikemesh bench` and bench/torch_bench.py write
// the same field names, so a log can hold both backends side by side.
// Invariants: append is one write() of the whole line with O_APPEND, so concurrent appenders
// (ranks, parallel jobs) never interleave; a field missing on both sides, or null on one side
// and missing on the other, counts as equal when matching configurations.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace sm {

// Insertion-ordered so a record prints its fields in the order they were set.
using BenchRecord = nlohmann::ordered_json;

// Fields that identify a configuration (records with equal values are comparable).
const std::vector<std::string>& bench_config_fields();
// Numeric metrics compared between runs, in the order compare_records prints them.
const std::vector<std::string>& bench_metric_fields();

// Appends `r` as one JSON line to `path`, creating parent directories. Errors name the file
// (SM_INPUT_ERROR for an unwritable path).
void append_bench_record(const std::string& path, const BenchRecord& r);

// The last record in `path` whose configuration fields all equal r's; nullopt if the file is
// missing or has none. Malformed lines are skipped with SM_WARN naming file:line. Since
// "hostname" is a configuration field, stamp `r` before looking up its predecessor.
std::optional<BenchRecord> find_previous_record(const std::string& path, const BenchRecord& r);

// Text table "metric | previous | current | delta | percent", one row for every metric
// present (and numeric) in both records; percent is "n/a" when the previous value is 0.
std::string compare_records(const BenchRecord& prev, const BenchRecord& cur);

// Sets "timestamp" (ISO-8601 UTC, e.g. 2024-05-01T12:34:56Z) and "hostname"; both are placed
// first in the record when they were not already present.
void stamp_record(BenchRecord& r);

}  // namespace sm
