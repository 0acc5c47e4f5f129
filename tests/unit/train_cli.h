// train_cli.h — the unit tests' `spikemesh train` command line: registers a resolver's flags on
// a CLI11 app, parses `args` (flags only; the program name is added) and resolves (defaults <
// --config < flags, then validation), as the train subcommand does.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "spikemesh/train/train_config.h"

namespace sm::test {

inline void parse_and_resolve(TrainConfigResolver& r, std::vector<std::string> args) {
  CLI::App app{"test"};
  r.add_options(app);
  args.insert(args.begin(), "spikemesh-train");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  r.resolve();
}

inline TrainConfig resolve_train_args(const std::vector<std::string>& args) {
  TrainConfig cfg;
  TrainConfigResolver r(cfg);
  parse_and_resolve(r, args);
  return cfg;
}

}  // namespace sm::test
