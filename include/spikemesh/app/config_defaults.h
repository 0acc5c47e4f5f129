// config_defaults.h — `--config FILE.toml` for the commands that build a model without
// training it (plan, model): the same training config file `spikemesh train --config` reads
// (the same keys, checks and messages: TrainConfigResolver), so a run's own config can be
// planned. Precedence as in train: the command's defaults < the file's keys < flags; --var
// overrides one variable of the file's var list by name (merge_var_assignment).
#pragma once
#include <memory>
#include <set>
#include <string>

#include "spikemesh/train/train_config.h"

namespace CLI {
class App;
}

namespace sm {

struct ModelSelection;
class ConfigKeys;

// A training config file read and validated key by key (not as a whole run: `data` may be
// missing), with the keys it set.
struct ConfigFileValues {
  TrainConfig cfg;
  std::set<std::string> keys;
  std::string path;
  // True when the file set `key` and `cmd` did not get the flag --key on its command line.
  bool fills(const CLI::App& cmd, const std::string& key) const;
};
ConfigFileValues read_config_file(const std::string& path);

// Fills the model flags (--model/--model-spec, --var, --T, --dropout) of `cmd` from `f`.
void apply_config_model(const CLI::App& cmd, const ConfigFileValues& f, ModelSelection& sel);
// Fills the parallel flags (parallel/parallel_config.h) the file sets and `cmd` did not get, into
// the command's registry `keys` (bound to its ParallelConfig).
void apply_config_parallel(const CLI::App& cmd, const ConfigFileValues& f, ConfigKeys& keys);

}  // namespace sm
