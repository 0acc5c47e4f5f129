// error_of.h — the unit tests' way to read an sm::Error's message: runs f and returns what()
// of the Error it throws, or "" when it throws none.
#pragma once
#include <functional>
#include <string>

#include "spikemesh/core/error.h"

namespace sm {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace sm
