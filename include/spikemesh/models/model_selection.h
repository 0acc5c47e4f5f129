// model_selection.h — which model to build, as chosen on a command line or in a config, and
// the overrides applied to its spec (used by the subcommands and by the trainer):
//   model NAME | spec FILE   (exactly one)
//   vars "NAME=INT" ...      spec variable overrides (e.g. C=16)
//   T, dropout               spec overrides (T >= 1; 0 = the spec's)
// The command-line flags that fill it (--model, --model-spec, --var, --T, --dropout) are
// registered by app/model_options.h; this struct knows nothing about CLI11.
// Invariant: build() validates everything and throws sm::Error(Input) naming the bad flag.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sm {

class Model;
struct ModelOverrides;

struct ModelSelection {
  std::string model;              // built-in name
  std::string spec;               // path to a TOML spec
  std::vector<std::string> vars;  // "NAME=INT"
  int T = 0;                      // 0 = the spec's default; otherwise >= 1 (--T)
  double dropout = -1.0;          // < 0 = the spec's default

  // The overrides given on the command line (vars parsed; throws Input on "C=x", "C", a
  // negative --T, a --dropout outside [0, 1), ...).
  ModelOverrides overrides() const;
  // Loads the selected model (not finalised). Throws Input when neither/both of
  // --model/--model-spec are given, or the name/spec is unknown/malformed.
  std::unique_ptr<Model> build() const;
};

// "C=16" -> ("C", 16); throws sm::Error(Input) naming `flag` otherwise.
std::pair<std::string, int64_t> parse_var_assignment(const std::string& text, const std::string& flag);

// Checks a time-step count given as `flag` (e.g. "--T"): throws sm::Error(Input)
// "<flag> must be >= 1 (time steps), got <T>" when T < 1.
void check_time_steps(int64_t T, const std::string& flag);

}  // namespace sm
