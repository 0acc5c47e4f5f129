// flag_ranges.h — the documented range of every numeric command-line flag and config key of
// every subcommand, in one table, and the one check that enforces it. The training registry
// (train_config.cpp: flags and TOML keys) and the other subcommands' CLI11 options
// (range_validator) both go through check_flag_value, so a value is refused the same way
// wherever it comes from, with one message naming the flag (or file: key), the value and the
// range; --help shows the range beside each flag.
// Invariants: integers are parsed into int64 (overflow is an error, never a wrap); reals must
// be finite (NaN and Inf are refused everywhere); a bound that depends on the machine (threads)
// is computed when checked.
#pragma once
#include <cstdint>
#include <string>

namespace CLI {
class Validator;
}

namespace sm {

struct FlagRange {
  double lo = 0, hi = 0;         // inclusive bounds, unless lo_open
  bool lo_open = false;          // (lo, hi]
  bool has_sentinel = false;     // `sentinel` is accepted too (e.g. -1: "the spec's")
  double sentinel = 0;
  const char* note = "";         // shown after the range in --help, e.g. "0: off"
};

// The range of flag `key` (without dashes, e.g. "batch-size"); nullptr when the key is not
// numeric or not in the table. "threads" is bounded by the CPUs of this machine.
const FlagRange* flag_range(const std::string& key);

// "[0, 1), or -1 (the spec's)" style text for --help; "" for keys without a range.
std::string flag_range_text(const std::string& key);

// Input error unless `value` lies in flag_range(key) (keys without a range pass). `origin`
// names where the value came from: "--lr" or "run.toml: lr".
void check_flag_value(const std::string& key, double value, const std::string& origin);

// Parses `text` as an int64 / finite double for `origin` (Input error naming it otherwise:
// not a number, out of 64-bit range, NaN/Inf) and checks it against `key`'s range.
int64_t parse_flag_int(const std::string& key, const std::string& text, const std::string& origin);
double parse_flag_real(const std::string& key, const std::string& text, const std::string& origin);

// A CLI11 validator for option `--key` of any subcommand: the value parses (integer when
// `integer`) and lies in the key's range; its description is the range text.
CLI::Validator range_validator(const std::string& key, bool integer);

// The CPUs a --threads value may use on this machine (hardware threads of the node).
int64_t machine_cpu_count();

}  // namespace sm
