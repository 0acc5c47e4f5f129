// model_options.cpp — the CLI11 flags that fill a ModelSelection.
#include "spikemesh/app/model_options.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

namespace sm {

namespace {
// --T: an integer >= 1 (0 or less would silently mean "the spec's T" further down).
CLI::Validator time_steps_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        long long v = std::strtoll(s.c_str(), &end, 10);
        if (end == s.c_str() || *end != '\0') return "expects an integer number of time steps, got '" + s + "'";
        if (v < 1) return "must be >= 1 (time steps), got " + s;
        if (errno != 0 || v > INT_MAX) return "is too large: " + s;
        return std::string();
      },
      "INT>=1");
}
}  // namespace

void add_model_options(CLI::App& cmd, ModelSelection& sel, bool require_T) {
  auto* m = cmd.add_option("--model", sel.model, "built-in model name (see `spikemesh model --list`)");
  auto* s = cmd.add_option("--model-spec", sel.spec, "model spec file (TOML), instead of --model");
  m->excludes(s);
  s->excludes(m);
  cmd.add_option("--var", sel.vars,
                 "override a spec variable, NAME=INTEGER (repeatable, e.g. --var C=16)")
      ->type_name("NAME=INT");
  auto* t = cmd.add_option("--T", sel.T, "time steps, >= 1 (default: the spec's T)")->check(time_steps_validator());
  if (require_T) t->required();
  cmd.add_option("--dropout", sel.dropout, "dropout probability in [0, 1) (default: the spec's)")
      ->check(CLI::Range(0.0, 1.0))
      ->type_name("P");
}

}  // namespace sm
