// model_options.h — the model-selection flags shared by every subcommand that builds a model
// (model, dump-grads; later train, bench):
//   --model NAME | --model-spec FILE   (exactly one)
//   --var NAME=INT ...                 spec variable overrides (e.g. C=16)
//   --T N, --dropout P                 spec overrides
// Invariant: build() validates everything and throws sm::Error(Input) naming the bad flag.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
class Option;
}

namespace sm {

class Model;
struct ModelOverrides;

struct ModelSelection {
  std::string model;              // built-in name
  std::string spec;               // path to a TOML spec
  std::vector<std::string> vars;  // "NAME=INT"
  int T = 0;                      // 0 = the spec's default
  double dropout = -1.0;          // < 0 = the spec's default

  // Adds the flags above to `cmd`; require_T makes --T mandatory.
  void add_options(CLI::App& cmd, bool require_T = false);
  // The overrides given on the command line (vars parsed; throws Input on "C=x", "C", ...).
  ModelOverrides overrides() const;
  // Loads the selected model (not finalised). Throws Input when neither/both of
  // --model/--model-spec are given, or the name/spec is unknown/malformed.
  std::unique_ptr<Model> build() const;
};

// "C=16" -> ("C", 16); throws sm::Error(Input) naming `flag` otherwise.
std::pair<std::string, int64_t> parse_var_assignment(const std::string& text, const std::string& flag);

}  // namespace sm
