// slot_store.cpp — the thread's active SlotCapture (layers/slot_store.h).
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {
thread_local SlotCapture* g_active = nullptr;
}  // namespace

SlotCapture::SlotCapture() : outer_(g_active) { g_active = this; }

SlotCapture::~SlotCapture() { g_active = outer_; }

void SlotCapture::note(SlotReleaser* store, int slot) {
  if (g_active) g_active->noted_.emplace_back(store, slot);
}

void SlotCapture::release_all() {
  for (auto it = noted_.rbegin(); it != noted_.rend(); ++it) it->first->release(it->second);
  noted_.clear();
}

}  // namespace sm
