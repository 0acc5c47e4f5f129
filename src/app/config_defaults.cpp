// config_defaults.cpp — a training config file as defaults for plan/model (app/config_defaults.h).
#include "spikemesh/app/config_defaults.h"

#include <CLI/CLI.hpp>

#include "spikemesh/core/config_keys.h"
#include "spikemesh/models/model_selection.h"

namespace sm {

bool ConfigFileValues::fills(const CLI::App& cmd, const std::string& key) const {
  if (!keys.count(key)) return false;
  const CLI::Option* opt = cmd.get_option_no_throw("--" + key);
  return !opt || opt->count() == 0;
}

ConfigFileValues read_config_file(const std::string& path) {
  ConfigFileValues f;
  TrainConfigResolver r(f.cfg);
  r.apply_toml_file(path);  // every key checked: unknown keys, types, ranges (flag_ranges.h)
  f.keys = r.file_keys();
  f.path = path;
  return f;
}

void apply_config_model(const CLI::App& cmd, const ConfigFileValues& f, ModelSelection& sel) {
  const TrainConfig& c = f.cfg;
  const bool model_on_cli = cmd.get_option("--model")->count() || cmd.get_option("--model-spec")->count();
  if (!model_on_cli) {
    if (f.keys.count("model-spec") && !c.model_spec.empty())
      sel.spec = c.model_spec;
    else if (f.keys.count("model"))
      sel.model = c.model;
  }
  if (f.keys.count("var")) {  // the file's variables, then each --var by name
    std::vector<std::string> vars = c.vars;
    for (const std::string& v : sel.vars) merge_var_assignment(vars, v);
    sel.vars = vars;
  }
  if (f.fills(cmd, "T") && c.T > 0) sel.T = static_cast<int>(c.T);
  if (f.fills(cmd, "dropout") && c.dropout >= 0) sel.dropout = c.dropout;
}

void apply_config_parallel(const CLI::App& cmd, const ConfigFileValues& f, ConfigKeys& keys) {
  std::set<std::string> fill;
  for (const std::string& k : parallel_keys())
    if (f.fills(cmd, k)) fill.insert(k);
  if (fill.empty()) return;
  ParallelConfig from = f.cfg.parallel;  // the file's values, as the same table writes them
  ConfigKeys file_keys;
  add_parallel_keys(file_keys, from);
  keys.apply_toml_text(toml_subset(file_keys.to_toml(""), fill, f.path), f.path);
}

}  // namespace sm
