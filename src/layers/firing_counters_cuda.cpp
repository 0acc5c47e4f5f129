// firing_counters_cuda.cpp — the pooled firing counters of the CUDA neurons
// (firing_counters_cuda.h).
#ifdef SPIKEMESH_HAVE_CUDA
#include "firing_counters_cuda.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

namespace sm {
namespace {

struct Pool {
  std::vector<Tensor> pages;  // device I64 [kPageSlots]
  std::vector<Tensor> mirror; // host copies of the pages
  std::vector<char> read;     // [page·kPageSlots + slot]: read since the last refresh
  int64_t used = 0;           // slots handed out
  bool stale = true;
};

// Never destroyed (its device tensors must not be freed during static destruction at exit).
struct Pools {
  std::mutex mu;
  std::map<int, Pool> by_device;  // by device ordinal
};
Pools& pools() {
  static Pools* p = new Pools;
  return *p;
}

}  // namespace

Tensor firing_counter_slot(Device dev) {
  Pools& all = pools();
  std::lock_guard<std::mutex> lock(all.mu);
  Pool& p = all.by_device[dev.ordinal];
  const int64_t page = p.used / kPageSlots, slot = p.used % kPageSlots;
  if (page == static_cast<int64_t>(p.pages.size())) {
    p.pages.push_back(Tensor::zeros({kPageSlots}, DType::I64, dev));
    p.mirror.push_back(Tensor::zeros({kPageSlots}, DType::I64));
  }
  ++p.used;
  p.read.push_back(0);
  p.stale = true;
  return p.pages[static_cast<size_t>(page)].slice0(slot, slot + 1);
}

void firing_counters_written(Device dev) {
  Pools& all = pools();
  std::lock_guard<std::mutex> lock(all.mu);
  auto it = all.by_device.find(dev.ordinal);
  if (it != all.by_device.end()) it->second.stale = true;
}

bool firing_counter_read(const Tensor& counter, int64_t& value) {
  if (!counter.defined() || !counter.device().is_cuda() || counter.dtype() != DType::I64 || counter.numel() != 1)
    return false;
  Pools& all = pools();
  std::lock_guard<std::mutex> lock(all.mu);
  auto it = all.by_device.find(counter.device().ordinal);
  if (it == all.by_device.end()) return false;
  Pool& p = it->second;
  const auto* c = static_cast<const int64_t*>(counter.raw());
  for (size_t k = 0; k < p.pages.size(); ++k) {
    const auto* base = static_cast<const int64_t*>(p.pages[k].raw());
    if (c < base || c >= base + kPageSlots) continue;
    const size_t flag = k * kPageSlots + static_cast<size_t>(c - base);
    // Refresh when a forward marked the pool stale, or when this slot was already read since
    // the last refresh: a new report (a replayed CUDA graph writes counters without telling
    // the host, and every report reads each of its layers' slots once).
    if (p.stale || p.read[flag]) {
      for (size_t j = 0; j < p.pages.size(); ++j) p.mirror[j].copy_from(p.pages[j]);
      std::fill(p.read.begin(), p.read.end(), 0);
      p.stale = false;
    }
    p.read[flag] = 1;
    value = p.mirror[k].data<int64_t>()[c - base];
    return true;
  }
  return false;
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
