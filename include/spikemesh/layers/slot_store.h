// slot_store.h — per-microbatch storage of what a layer's backward needs.
// Invariant: forward writes slot s; backward of slot s reads it; the last backward pass
// over slot s (B when W is not split off, else W) releases it.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/core/error.h"

namespace sm {

template <class S>
class SlotStore {
 public:
  S& fresh(int slot) {  // forward: (re)create
    if (slot >= static_cast<int>(v_.size())) v_.resize(slot + 1);
    v_[slot] = std::make_unique<S>();
    return *v_[slot];
  }
  S& get(int slot) {  // backward: must exist
    SM_CHECK(slot < static_cast<int>(v_.size()) && v_[slot], "no saved state for microbatch slot "
                                                                  << slot << " (backward before forward?)");
    return *v_[slot];
  }
  bool has(int slot) const { return slot < static_cast<int>(v_.size()) && v_[slot]; }
  void release(int slot) {
    if (slot < static_cast<int>(v_.size())) v_[slot].reset();
  }
  void clear() { v_.clear(); }

 private:
  std::vector<std::unique_ptr<S>> v_;
};

}  // namespace sm
