// memopt_probe.cpp — the active probe and its region measurements (layers/memopt_probe.h).
#include "spikemesh/layers/memopt_probe.h"

#include <algorithm>
#include <chrono>

#include "spikemesh/core/allocator.h"
#include "spikemesh/core/device.h"

namespace sm {
namespace {
thread_local MemoptProbe* g_probe = nullptr;
thread_local ProbeRegion* g_region = nullptr;  // the innermost region being measured
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

MemoptProbe::MemoptProbe() : outer_(g_probe) { g_probe = this; }
MemoptProbe::~MemoptProbe() { g_probe = outer_; }
MemoptProbe* MemoptProbe::active() { return g_probe; }

size_t MemoptProbe::index_of(const Sequential* unit, size_t segment) {
  for (size_t i = 0; i < m_.size(); ++i)
    if (m_[i].unit == unit && m_[i].segment == segment) return i;
  SegmentMeasure m;
  m.unit = unit;
  m.segment = segment;
  m.order = static_cast<int>(m_.size());
  m_.push_back(m);
  return m_.size() - 1;
}

ProbeRegion::ProbeRegion(const Sequential* unit, size_t segment, bool forward, const Device& dev) {
  MemoptProbe* p = MemoptProbe::active();
  if (!p) return;
  probe_ = p;
  index_ = p->index_of(unit, segment);
  enclosing_ = g_region;
  g_region = this;
  forward_ = forward;
  dev_ = dev;
  synchronize(dev);
  Allocator& a = allocator_for(dev);
  outer_peak_ = a.peak_bytes();
  a.reset_peak();
  SegmentMeasure& m = p->at(index_);
  size_t& base = forward ? m.forward_base : m.backward_base;
  base = std::max(base, a.current_bytes());
  t0_ = now_ms();
}

ProbeRegion::~ProbeRegion() {
  if (!probe_) return;
  g_region = enclosing_;
  synchronize(dev_);
  const double ms = now_ms() - t0_;
  Allocator& a = allocator_for(dev_);
  const size_t peak = a.peak_bytes();
  a.raise_peak(outer_peak_);
  SegmentMeasure& m = probe_->at(index_);
  if (forward_) {
    m.forward_ms += ms;
    m.forward_peak = std::max(m.forward_peak, peak);
  } else {
    m.backward_ms += ms;
    m.backward_peak = std::max(m.backward_peak, peak);
  }
}

size_t ProbeRegion::current_bytes() const { return probe_ ? allocator_for(dev_).current_bytes() : 0; }

ProbeWorkspace::ProbeWorkspace(const Device& dev, size_t operand_bytes) {
  if (!g_region || !MemoptProbe::active()) return;
  region_ = g_region;
  dev_ = dev;
  operands_ = operand_bytes;
  Allocator& a = allocator_for(dev);
  outer_peak_ = a.peak_bytes();
  before_ = a.current_bytes();
  a.reset_peak();
}

ProbeWorkspace::~ProbeWorkspace() {
  if (!region_) return;
  Allocator& a = allocator_for(dev_);
  const size_t above = a.peak_bytes() - std::min(a.peak_bytes(), before_ + operands_);
  a.raise_peak(outer_peak_);  // the region's own peak measurement goes on
  SegmentMeasure& m = region_->probe_->at(region_->index_);
  size_t& ws = region_->forward_ ? m.forward_workspace : m.backward_workspace;
  ws = std::max(ws, above);
}

}  // namespace sm
