// memopt_probe.cpp — the active probe and its region measurements (layers/memopt_probe.h).
#include "spikemesh/layers/memopt_probe.h"

#include <algorithm>
#include <chrono>

#include "spikemesh/core/allocator.h"
#include "spikemesh/core/device.h"

namespace sm {
namespace {
thread_local MemoptProbe* g_probe = nullptr;
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

MemoptProbe::MemoptProbe() : outer_(g_probe) { g_probe = this; }
MemoptProbe::~MemoptProbe() { g_probe = outer_; }
MemoptProbe* MemoptProbe::active() { return g_probe; }

SegmentMeasure& MemoptProbe::at(const Sequential* unit, size_t segment) {
  for (SegmentMeasure& m : m_)
    if (m.unit == unit && m.segment == segment) return m;
  SegmentMeasure m;
  m.unit = unit;
  m.segment = segment;
  m.order = static_cast<int>(m_.size());
  m_.push_back(m);
  return m_.back();
}

ProbeRegion::ProbeRegion(const Sequential* unit, size_t segment, bool forward, const Device& dev) {
  MemoptProbe* p = MemoptProbe::active();
  if (!p) return;
  m_ = &p->at(unit, segment);
  forward_ = forward;
  dev_ = dev;
  synchronize(dev);
  Allocator& a = allocator_for(dev);
  outer_peak_ = a.peak_bytes();
  a.reset_peak();
  size_t& base = forward ? m_->forward_base : m_->backward_base;
  base = std::max(base, a.current_bytes());
  t0_ = now_ms();
}

ProbeRegion::~ProbeRegion() {
  if (!m_) return;
  synchronize(dev_);
  const double ms = now_ms() - t0_;
  Allocator& a = allocator_for(dev_);
  const size_t peak = a.peak_bytes();
  a.raise_peak(outer_peak_);
  if (forward_) {
    m_->forward_ms += ms;
    m_->forward_peak = std::max(m_->forward_peak, peak);
  } else {
    m_->backward_ms += ms;
    m_->backward_peak = std::max(m_->backward_peak, peak);
  }
}

size_t ProbeRegion::current_bytes() const { return m_ ? allocator_for(dev_).current_bytes() : 0; }

}  // namespace sm
