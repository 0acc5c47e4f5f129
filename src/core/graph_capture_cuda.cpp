// graph_capture_cuda.cpp — the thread's capture record (core/graph_capture_cuda.h).
#include "spikemesh/core/graph_capture_cuda.h"

#include "spikemesh/core/error.h"

namespace sm {

namespace {
thread_local GraphCapture* g_capture = nullptr;
}

GraphCapture* active_graph_capture() { return g_capture; }

GraphCaptureScope::GraphCaptureScope(GraphCapture* g) {
  SM_CHECK(g_capture == nullptr, "nested CUDA graph captures");
  g_capture = g;
}

GraphCaptureScope::~GraphCaptureScope() { g_capture = nullptr; }

void refuse_graph_capture(const std::string& why) {
  if (g_capture && g_capture->refusal.empty()) g_capture->refusal = why;
  SM_INPUT_ERROR("cannot capture the step into a CUDA graph: " << why);
}

}  // namespace sm
