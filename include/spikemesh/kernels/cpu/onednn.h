// onednn.h — the process-wide oneDNN CPU engine, a per-thread stream, and a thread-safe
// cache of primitives keyed by shape (creating a primitive descriptor costs far more than
// running a small primitive, so every kernel creates each shape once).
// Invariants: the engine lives for the whole process; a stream is only used by the thread
// that owns it; cached entries are immutable once created and shared between layers.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <dnnl.hpp>

namespace sm::cpu {

dnnl::engine& dnnl_engine();  // created on first use
dnnl::stream& dnnl_stream();  // this thread's in-order stream on dnnl_engine()

// Key -> shared entry, created by `make()` under the lock on first use.
template <class Entry>
class DnnlCache {
 public:
  using Key = std::vector<int64_t>;
  template <class Make>
  std::shared_ptr<const Entry> get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    auto entry = std::make_shared<const Entry>(make());
    map_.emplace(key, entry);
    return entry;
  }

 private:
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<const Entry>> map_;
};

// Logs which implementation oneDNN picked for a new primitive (debug level); warns once per
// primitive when it is a slow reference ("ref:") implementation.
void note_dnnl_implementation(const char* what, const std::string& impl_info);

// Wraps a dnnl::error as a spikemesh Library error naming the call.
[[noreturn]] void throw_dnnl_error(const dnnl::error& e, const char* what, const char* file,
                                   int line);

}  // namespace sm::cpu

// Runs oneDNN statement(s), turning dnnl::error into an sm::Error(Library) that names
// `what` (a short description such as "conv2d forward").
#define SM_DNNL_CHECK(what, ...)                                               \
  do {                                                                         \
    try {                                                                      \
      __VA_ARGS__;                                                             \
    } catch (const dnnl::error& sm_e_) {                                       \
      ::sm::cpu::throw_dnnl_error(sm_e_, what, __FILE__, __LINE__);            \
    }                                                                          \
  } while (0)
