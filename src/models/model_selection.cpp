// model_selection.cpp — validation of a model selection and the spec overrides it implies.
#include "spikemesh/models/model_selection.h"

#include <cerrno>
#include <cstdlib>

#include "spikemesh/core/error.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {

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

void check_time_steps(int64_t T, const std::string& flag) {
  if (T < 1) SM_INPUT_ERROR(flag << " must be >= 1 (time steps), got " << T);
}

ModelOverrides ModelSelection::overrides() const {
  ModelOverrides o;
  for (const auto& v : vars) {
    auto kv = parse_var_assignment(v, "--var");
    if (o.vars.count(kv.first)) SM_INPUT_ERROR("--var " << kv.first << " given twice");
    o.vars[kv.first] = kv.second;
  }
  if (T != 0) {  // 0: not given (the spec's T)
    check_time_steps(T, "--T");
    o.T = T;
  }
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
