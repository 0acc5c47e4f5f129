// memopt_probe.h — what memopt's search (train/memopt_search.h) measures of one real step:
// per checkpointed segment, on this thread while a MemoptProbe is active, the peak bytes of
// its device's allocator during its forward and during its backward (absolute: everything
// alive then), the bytes its layers saved and the checkpoint dropped (what it would keep
// un-checkpointed), the bytes of what the checkpoint keeps, and the time of its forward and
// backward, the bytes alive when each began, the sizes of its input and output and the largest
// workspace of its kernels. Segments that are not checkpointed are measured too (saved = 0).
// Invariant: a probe never changes what is computed; the allocator's overall peak is
// restored (raise_peak) after each region it measures.
#pragma once
#include <cstddef>
#include <vector>

#include "spikemesh/core/device.h"

namespace sm {

class Sequential;

struct SegmentMeasure {
  const Sequential* unit = nullptr;
  size_t segment = 0;
  int order = 0;                 // forward order of first appearance in the step
  double forward_ms = 0, backward_ms = 0;  // summed over microbatches
  size_t forward_peak = 0, backward_peak = 0;  // bytes, max over microbatches
  size_t saved = 0, kept = 0;    // bytes, max over microbatches
  // Bytes alive when its forward / backward began (max over microbatches), and the sizes of
  // its input and output tensors: what the search's predictions start from.
  size_t forward_base = 0, backward_base = 0, in_bytes = 0, out_bytes = 0;
  // The largest kernel workspace of its forward / backward beyond the kernel's activation
  // operands (bytes a weight layer's kernel allocated above what was alive when it was called,
  // less its input and output sizes; max over its calls): what running in pieces does not
  // divide (such workspaces follow the weights, not the batch).
  size_t forward_workspace = 0, backward_workspace = 0;
};

class MemoptProbe {
 public:
  MemoptProbe();
  ~MemoptProbe();
  MemoptProbe(const MemoptProbe&) = delete;
  MemoptProbe& operator=(const MemoptProbe&) = delete;
  static MemoptProbe* active();
  // The entry of a segment (made at its first appearance); its index stays valid while the
  // probe lives (a reference may not: later entries can move the others).
  size_t index_of(const Sequential* unit, size_t segment);
  SegmentMeasure& at(size_t index) { return m_[index]; }
  const std::vector<SegmentMeasure>& measures() const { return m_; }

 private:
  std::vector<SegmentMeasure> m_;
  MemoptProbe* outer_ = nullptr;
};

// Measures one region of a segment (RAII): its peak bytes and time go to `field_peak` /
// `field_ms` of the probe's entry; nothing happens when no probe is active.
class ProbeRegion {
 public:
  ProbeRegion(const Sequential* unit, size_t segment, bool forward, const Device& dev);
  ~ProbeRegion();
  SegmentMeasure* measure() { return probe_ ? &probe_->at(index_) : nullptr; }
  size_t current_bytes() const;

 private:
  friend class ProbeWorkspace;
  MemoptProbe* probe_ = nullptr;  // none: nothing is measured
  size_t index_ = 0;
  ProbeRegion* enclosing_ = nullptr;  // the region this one runs inside (none: nullptr)
  bool forward_ = true;
  Device dev_ = Device::cpu();
  size_t outer_peak_ = 0;
  double t0_ = 0;
};

// Measures one kernel call's workspace (RAII) for the innermost active region: the peak bytes
// above those alive at its start, less `operand_bytes` (its activation operands: temporaries
// up to their size — reorders, column buffers — scale with the batch like them), go to that
// segment's forward_workspace or backward_workspace. Nothing happens when no region is being
// measured.
class ProbeWorkspace {
 public:
  ProbeWorkspace(const Device& dev, size_t operand_bytes);
  ~ProbeWorkspace();
  ProbeWorkspace(const ProbeWorkspace&) = delete;
  ProbeWorkspace& operator=(const ProbeWorkspace&) = delete;

 private:
  ProbeRegion* region_ = nullptr;
  Device dev_ = Device::cpu();
  size_t outer_peak_ = 0, before_ = 0, operands_ = 0;
};

}  // namespace sm
