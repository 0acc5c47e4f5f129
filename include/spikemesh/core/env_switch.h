// env_switch.h — the 1|0 switches of the environment (SPIKEMESH_FUSE, SPIKEMESH_MERGE_STEPS,
// SPIKEMESH_CPU_AVX512): read once when the library loads, where a bad value counts as on (a
// static initialiser must not throw), and checked at start-up, where a bad value is refused.
#pragma once

#include <functional>

namespace sm {

// True unless NAME is set to "0" (the load-time read; never throws).
bool env_switch_on(const char* name);

// NAME checked and applied: nothing when unset; set(true) for 1 and set(false) for 0;
// InputError "NAME=V: expected 1 (ON_MEANS) or 0 (off)" for any other value V.
void apply_env_switch(const char* name, const char* on_means, const std::function<void(bool)>& set);

}  // namespace sm
