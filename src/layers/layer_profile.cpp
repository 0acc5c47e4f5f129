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
std::vector<SpikeConvRow> g_conv_rows;  // first-call order
std::vector<LayerTiming> g_layer_rows;  // first-call order
std::map<std::string, size_t> g_layer_index;
}  // namespace

void layer_profile_enable(bool on) { g_enabled.store(on); }
bool layer_profile_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void layer_profile_reset() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_rows.clear();
  g_conv_rows.clear();
  g_layer_rows.clear();
  g_layer_index.clear();
}

void layer_profile_spike_conv(const std::string& layer, const std::string& geometry, bool forward, double density,
                              bool sparse, double ms, double crossover) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = std::find_if(g_conv_rows.begin(), g_conv_rows.end(),
                         [&](const SpikeConvRow& r) { return r.layer == layer; });
  if (it == g_conv_rows.end()) {
    g_conv_rows.push_back({});
    it = g_conv_rows.end() - 1;
    it->layer = layer;
    it->geometry = geometry;
  }
  if (forward) {
    it->density_sum += density;
    ++it->forward_calls;
    it->forward_sparse += sparse;
    it->forward_ms += ms;
    it->crossover_forward = crossover;
  } else {
    ++it->weight_calls;
    it->weight_sparse += sparse;
    it->weight_ms += ms;
    it->crossover_weights = crossover;
  }
}

std::vector<SpikeConvRow> layer_profile_spike_conv_report() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_conv_rows;
}

void layer_profile_add(const std::string& type, double forward_ms, double backward_ms, bool is_forward_call,
                       double forward_flops, const std::string& layer) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!layer.empty()) {
    auto [it, fresh] = g_layer_index.emplace(layer, g_layer_rows.size());
    if (fresh) g_layer_rows.push_back(LayerTiming{layer, type});
    g_layer_rows[it->second].forward_ms += forward_ms;
    g_layer_rows[it->second].backward_ms += backward_ms;
  }
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

std::vector<LayerTiming> layer_profile_layers() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_layer_rows;
}

}  // namespace sm
