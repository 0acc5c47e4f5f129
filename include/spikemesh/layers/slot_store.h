// slot_store.h — per-microbatch storage of what a layer's backward needs.
// Invariant: forward writes slot s; backward of slot s reads it; the last backward pass
// over slot s (B when W is not split off, else W) releases it.
// SlotCapture (memopt, layers/memopt_segment.h): while one is active on this thread, every
// fresh() notes its (store, slot); release_all() then drops what those forwards saved. keep()
// writes a slot that no capture drops (state a checkpointed forward keeps for its recompute).
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/core/error.h"

namespace sm {

class SlotReleaser {
 public:
  virtual void release(int slot) = 0;

 protected:
  ~SlotReleaser() = default;
};

// Notes the slots written by fresh() on this thread while it lives (captures do not nest).
class SlotCapture {
 public:
  SlotCapture();
  ~SlotCapture();
  SlotCapture(const SlotCapture&) = delete;
  SlotCapture& operator=(const SlotCapture&) = delete;
  void release_all();  // every noted slot released, in reverse order
  static void note(SlotReleaser* store, int slot);

 private:
  std::vector<std::pair<SlotReleaser*, int>> noted_;
  SlotCapture* outer_ = nullptr;
};

template <class S>
class SlotStore final : public SlotReleaser {
 public:
  S& fresh(int slot) {  // forward: (re)create
    S& s = keep(slot);
    SlotCapture::note(this, slot);
    return s;
  }
  S& keep(int slot) {  // (re)create, never dropped by a SlotCapture
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
  void release(int slot) override {
    if (slot < static_cast<int>(v_.size())) v_[slot].reset();
  }
  void clear() { v_.clear(); }

 private:
  std::vector<std::unique_ptr<S>> v_;
};

}  // namespace sm
