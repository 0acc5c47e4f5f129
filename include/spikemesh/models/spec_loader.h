// spec_loader.h — TOML model specs (format: input/models/README.md) -> Model, and the
// built-in model zoo (input/models/<name>.toml). Every mistake in a spec is an
// sm::Error(Input) whose message names the file (with line where known) and the entry.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "spikemesh/models/model.h"

namespace sm {

struct ModelOverrides {
  std::map<std::string, int64_t> vars;  // replace [vars] entries (each must exist in the spec)
  std::optional<double> dropout;        // p of every dropout layer; 0 removes them
  std::optional<int> T;                 // replaces [model] T
};

// Parses, validates (shape chaining included) and builds the units; not yet finalised.
std::unique_ptr<Model> load_model_spec(const std::string& path, const ModelOverrides& ov = {});

// Finds input/models/<name>.toml in $SPIKEMESH_MODELS, ./input/models, then
// <dir of the executable>/../../input/models; Input error listing the available names.
std::string builtin_model_path(const std::string& name);
std::unique_ptr<Model> load_builtin_model(const std::string& name, const ModelOverrides& ov = {});
std::vector<std::string> builtin_model_names();  // sorted, from every search directory

}  // namespace sm
