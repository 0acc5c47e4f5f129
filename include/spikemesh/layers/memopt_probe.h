// memopt_probe.h — what memopt's search (train/memopt_search.h) measures of one real step:
// per checkpointed segment, on this thread while a MemoptProbe is active, the peak bytes of
// its device's allocator during its forward and during its backward (absolute: everything
// alive then), the bytes its layers saved and the checkpoint dropped (what it would keep
// un-checkpointed), the bytes of what the checkpoint keeps, and the time of its forward and
// backward, the bytes alive when each began and the sizes of its input and output. Segments
// that are not checkpointed are measured too (saved = 0).
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
};

class MemoptProbe {
 public:
  MemoptProbe();
  ~MemoptProbe();
  MemoptProbe(const MemoptProbe&) = delete;
  MemoptProbe& operator=(const MemoptProbe&) = delete;
  static MemoptProbe* active();
  SegmentMeasure& at(const Sequential* unit, size_t segment);
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
  SegmentMeasure* measure() { return m_; }
  size_t current_bytes() const;

 private:
  SegmentMeasure* m_ = nullptr;
  bool forward_ = true;
  Device dev_ = Device::cpu();
  size_t outer_peak_ = 0;
  double t0_ = 0;
};

}  // namespace sm
