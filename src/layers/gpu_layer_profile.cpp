// gpu_layer_profile.cpp — the CUDA-event recorder of gpu_layer_profile.h: a per-device pool
// of timing events (index 0/1: the step's start/end; 2+2k/3+2k: pass k's start/end), grown
// on first need and reused by every later profiled step.
#include "spikemesh/layers/gpu_layer_profile.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "spikemesh/core/error.h"

#ifdef SPIKEMESH_HAVE_CUDA
#include <array>

#include "spikemesh/core/error_cuda.h"
#include "spikemesh/core/stream_cuda.h"
#endif

namespace sm {
namespace {
std::atomic<bool> g_armed{false};
constexpr size_t kSkipped = std::numeric_limits<size_t>::max();

#ifdef SPIKEMESH_HAVE_CUDA
struct PendingPass {
  std::string layer, type;
  ProfilePass pass = ProfilePass::Forward;
  bool ended = false;
};

struct StepRecorder {
  int ordinal = -1;
  cudaStream_t stream = nullptr;
  std::vector<PendingPass> passes;
};
StepRecorder g_step;
std::array<std::vector<cudaEvent_t>, cuda::kMaxDevices> g_pools;  // never destroyed

// Event `i` of device `ordinal`'s pool, created (on that device) when the pool is too short.
cudaEvent_t pool_event(int ordinal, size_t i) {
  std::vector<cudaEvent_t>& pool = g_pools[ordinal];
  if (i >= pool.size()) {
    cuda::DeviceGuard guard(ordinal);
    const size_t want = std::max(i + 1, 2 * pool.size());
    while (pool.size() < want) {
      cudaEvent_t e = nullptr;
      SM_CUDA_CHECK(cudaEventCreate(&e));
      pool.push_back(e);
    }
  }
  return pool[i];
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  SM_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  return st != cudaStreamCaptureStatusNone;
}

double elapsed_ms(int ordinal, size_t start, size_t end) {
  float ms = 0.0f;
  SM_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_event(ordinal, start), pool_event(ordinal, end)));
  return static_cast<double>(ms);
}
#endif
}  // namespace

bool gpu_profile_armed() { return g_armed.load(std::memory_order_relaxed); }

#ifdef SPIKEMESH_HAVE_CUDA
void gpu_profile_begin_step(const Device& dev) {
  SM_CHECK(dev.is_cuda() && dev.ordinal >= 0 && dev.ordinal < cuda::kMaxDevices,
           "the per-layer GPU profile needs a CUDA device, got " << dev.str());
  SM_CHECK(!gpu_profile_armed(), "a per-layer GPU profile is already being recorded");
  g_step = StepRecorder{dev.ordinal, cuda::stream_for(dev), {}};
  SM_CHECK(!capturing(g_step.stream), "the per-layer GPU profile cannot time a step being captured as a CUDA graph");
  SM_CUDA_CHECK(cudaEventRecord(pool_event(dev.ordinal, 0), g_step.stream));
  g_armed.store(true);
}

std::vector<PassTiming> gpu_profile_end_step(double* step_ms) {
  SM_CHECK(gpu_profile_armed(), "gpu_profile_end_step without gpu_profile_begin_step");
  g_armed.store(false);
  const int ord = g_step.ordinal;
  cudaEvent_t end = pool_event(ord, 1);
  SM_CUDA_CHECK(cudaEventRecord(end, g_step.stream));
  SM_CUDA_CHECK(cudaEventSynchronize(end));  // every pair recorded before it is complete now
  if (step_ms) *step_ms = elapsed_ms(ord, 0, 1);
  std::vector<PassTiming> out;
  for (size_t k = 0; k < g_step.passes.size(); ++k) {
    const PendingPass& p = g_step.passes[k];
    if (!p.ended) continue;  // a pass whose layer threw: nothing to read
    out.push_back({p.layer, p.type, p.pass, elapsed_ms(ord, 2 + 2 * k, 3 + 2 * k)});
  }
  g_step.passes.clear();
  return out;
}

size_t gpu_profile_pass_start(const Device& dev) {
  if (!dev.is_cuda() || dev.ordinal != g_step.ordinal || capturing(g_step.stream)) return kSkipped;
  const size_t k = g_step.passes.size();
  g_step.passes.emplace_back();
  SM_CUDA_CHECK(cudaEventRecord(pool_event(g_step.ordinal, 2 + 2 * k), g_step.stream));
  return k;
}

void gpu_profile_pass_end(size_t index, const std::string& layer, const std::string& type, ProfilePass pass) {
  if (index == kSkipped || index >= g_step.passes.size()) return;
  SM_CUDA_CHECK(cudaEventRecord(pool_event(g_step.ordinal, 3 + 2 * index), g_step.stream));
  PendingPass& p = g_step.passes[index];
  p.layer = layer;
  p.type = type;
  p.pass = pass;
  p.ended = true;
}
#else
void gpu_profile_begin_step(const Device& dev) {
  SM_CHECK(false, "the per-layer GPU profile needs a CUDA build (device " << dev.str() << ")");
}
std::vector<PassTiming> gpu_profile_end_step(double* step_ms) {
  if (step_ms) *step_ms = 0.0;
  return {};
}
size_t gpu_profile_pass_start(const Device&) { return kSkipped; }
void gpu_profile_pass_end(size_t, const std::string&, const std::string&, ProfilePass) {}
#endif

}  // namespace sm
