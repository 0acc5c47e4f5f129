// onednn.cpp — the shared oneDNN CPU engine and per-thread streams (see onednn.h).
#include "spikemesh/kernels/cpu/onednn.h"

#include <string>

#include "spikemesh/core/error.h"
#include "spikemesh/core/log.h"

namespace sm::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

void note_dnnl_implementation(const char* what, const std::string& impl_info) {
  SM_DEBUG("oneDNN " << what << ": " << impl_info);
  if (impl_info.rfind("ref", 0) == 0)
    SM_WARN("oneDNN picked its slow reference implementation (" << impl_info << ") for " << what);
}

void throw_dnnl_error(const dnnl::error& e, const char* what, const char* file, int line) {
  throw_library_error("oneDNN", what, std::string(e.what()) + " (status " +
                                          std::to_string(static_cast<int>(e.status)) + ")",
                      file, line);
}

}  // namespace sm::cpu
