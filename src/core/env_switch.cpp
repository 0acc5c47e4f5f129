// env_switch.cpp — the environment's 1|0 switches (env_switch.h).
#include "spikemesh/core/env_switch.h"

#include <cstdlib>
#include <string>

#include "spikemesh/core/error.h"

namespace sm {

bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::string(e) == "0");
}

void apply_env_switch(const char* name, const char* on_means, const std::function<void(bool)>& set) {
  const char* e = std::getenv(name);
  if (!e) return;
  const std::string v = e;
  if (v != "0" && v != "1") SM_INPUT_ERROR(name << "=" << v << ": expected 1 (" << on_means << ") or 0 (off)");
  set(v == "1");
}

}  // namespace sm
