// model_options.cpp — parsing and validation of the shared model-selection flags.
#include "spikemesh/app/model_options.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>

#include "spikemesh/core/error.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {

void ModelSelection::add_options(CLI::App& cmd, bool require_T) {
  auto* m = cmd.add_option("--model", model, "built-in model name (see `spikemesh model --list`)");
  auto* s = cmd.add_option("--model-spec", spec, "model spec file (TOML), instead of --model");
  m->excludes(s);
  s->excludes(m);
  cmd.add_option("--var", vars,
                 "override a spec variable, NAME=INTEGER (repeatable, e.g. --var C=16)")
      ->type_name("NAME=INT");
  auto* t = cmd.add_option("--T", T, "time steps (default: the spec's T)")->check(CLI::PositiveNumber);
  if (require_T) t->required();
  cmd.add_option("--dropout", dropout, "dropout probability in [0, 1) (default: the spec's)")
      ->check(CLI::Range(0.0, 1.0))
      ->type_name("P");
}

std::pair<std::string, int64_t> parse_var_assignment(const std::string& text, const std::string& flag) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    SM_INPUT_ERROR(flag << " expects NAME=INTEGER, got '" << text << "'");
  std::string name = text.substr(0, eq), value = text.substr(eq + 1);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (errno != 0 || end == value.c_str() || *end != '\0')
    SM_INPUT_ERROR(flag << " " << text << ": '" << value << "' is not an integer");
  return {name, static_cast<int64_t>(v)};
}

ModelOverrides ModelSelection::overrides() const {
  ModelOverrides o;
  for (const auto& v : vars) {
    auto kv = parse_var_assignment(v, "--var");
    if (o.vars.count(kv.first)) SM_INPUT_ERROR("--var " << kv.first << " given twice");
    o.vars[kv.first] = kv.second;
  }
  if (T > 0) o.T = T;
  if (dropout >= 1.0) SM_INPUT_ERROR("--dropout " << dropout << ": must be in [0, 1)");
  if (dropout >= 0.0) o.dropout = dropout;
  return o;
}

std::unique_ptr<Model> ModelSelection::build() const {
  if (model.empty() && spec.empty()) SM_INPUT_ERROR("give --model NAME or --model-spec FILE");
  if (!model.empty() && !spec.empty()) SM_INPUT_ERROR("give only one of --model and --model-spec");
  ModelOverrides o = overrides();
  return model.empty() ? load_model_spec(spec, o) : load_builtin_model(model, o);
}

}  // namespace sm
