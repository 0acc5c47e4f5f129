// spike_bits_cache.cpp — the registry of spike bits written by neurons (spike_bits_cache.h).
#include "spikemesh/core/spike_bits_cache.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace sm {
namespace {

struct Entry {
  Tensor bits;
  int64_t numel = 0;
  DType dtype = DType::F32;
};

// Never destroyed: the device allocator may call spike_bits_forget while other static
// objects holding tensors are destroyed at exit.
struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, Entry> entries;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}
std::atomic<size_t> g_count{0};  // lock-free "nothing recorded" check for the allocator's hot path

}  // namespace

void spike_bits_remember(const Tensor& spikes, const Tensor& bits) {
  SM_CHECK(spikes.defined() && bits.defined() && bits.dtype() == DType::I32 &&
               bits.numel() == (spikes.numel() + 31) / 32,
           "spike_bits_remember: " << bits.numel() << " words for " << spikes.numel() << " spikes");
  Entry old;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    Entry& e = r.entries[spikes.raw()];
    old = std::move(e);
    e = Entry{bits, spikes.numel(), spikes.dtype()};
    g_count.store(r.entries.size(), std::memory_order_relaxed);
  }  // `old` is dropped outside the lock (freeing its block calls spike_bits_forget)
}

Tensor spike_bits_find(const Tensor& x) {
  if (!x.defined() || g_count.load(std::memory_order_relaxed) == 0) return Tensor();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(x.raw());
  if (it == r.entries.end() || it->second.numel != x.numel() || it->second.dtype != x.dtype()) return Tensor();
  return it->second.bits;
}

void spike_bits_forget(const void* block) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  Entry dropped;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.entries.find(block);
    if (it == r.entries.end()) return;
    dropped = std::move(it->second);
    r.entries.erase(it);
    g_count.store(r.entries.size(), std::memory_order_relaxed);
  }  // the bits' own block is freed here, outside the lock
}

size_t spike_bits_entries() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.entries.size();
}

}  // namespace sm
