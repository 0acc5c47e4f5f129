// layer_profile.cpp — per-layer-type timing table (see layer_profile.h).
#include "spikemesh/layers/layer_profile.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace sm {
namespace {
std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::map<std::string, LayerTypeTiming> g_rows;
}  // namespace

void layer_profile_enable(bool on) { g_enabled.store(on); }
bool layer_profile_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void layer_profile_reset() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_rows.clear();
}

void layer_profile_add(const std::string& type, double forward_ms, double backward_ms, bool is_forward_call,
                       double forward_flops) {
  std::lock_guard<std::mutex> lk(g_mu);
  LayerTypeTiming& r = g_rows[type];
  r.type = type;
  r.forward_ms += forward_ms;
  r.backward_ms += backward_ms;
  r.forward_flops += forward_flops;
  if (is_forward_call) ++r.forward_calls;
}

std::vector<LayerTypeTiming> layer_profile_report() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<LayerTypeTiming> out;
  for (auto& kv : g_rows) out.push_back(kv.second);
  std::sort(out.begin(), out.end(), [](const LayerTypeTiming& a, const LayerTypeTiming& b) {
    return a.forward_ms + a.backward_ms > b.forward_ms + b.backward_ms;
  });
  return out;
}

}  // namespace sm
