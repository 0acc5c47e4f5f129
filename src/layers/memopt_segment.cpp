// memopt_segment.cpp — checkpointed segments of a Sequential (layers/memopt_segment.h): what a
// checkpointed forward keeps, and its recompute in backward.
#include "spikemesh/layers/memopt_segment.h"

#include <sstream>

#include "spikemesh/core/bitpack.h"
#include "spikemesh/core/error.h"
#include "spikemesh/layers/sequential.h"
#include "spikemesh/layers/slot_store.h"
#ifdef SPIKEMESH_HAVE_CUDA
#include "layer_util_cuda.h"
#endif

namespace sm {

std::string MemoptSegment::describe() const {
  if (!checkpoint) return "none";
  std::ostringstream os;
  os << "ckpt" << (compress ? "+bits" : "");
  if (time_chunks > 1) os << " t/" << time_chunks;
  if (batch_pieces > 1) os << " n/" << batch_pieces;
  return os.str();
}

std::vector<std::pair<size_t, size_t>> natural_segments(Sequential& seq) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0;
  for (size_t i = 0; i < seq.size(); ++i) {
    Layer& l = seq.at(i);
    const bool cut = l.emits_spikes() || !l.children().empty();
    const bool next_joins = i + 1 < seq.size() && seq.at(i + 1).preserves_spikes() && seq.at(i + 1).children().empty();
    if (cut && !next_joins) {
      out.emplace_back(begin, i + 1);
      begin = i + 1;
    }
  }
  if (begin < seq.size()) out.emplace_back(begin, seq.size());
  return out;
}

// ---- what a checkpointed segment keeps of its input ------------------------------------------

Sequential::KeptInput Sequential::KeptInput::keep(const Tensor& x, bool compress) {
  KeptInput k;
  k.shape = x.shape();
  k.dtype = x.dtype();
  k.binary = x.is_binary();
  if (!compress || !x.is_binary()) {
    k.kept = x;  // by reference (layers never write their inputs)
    return k;
  }
#ifdef SPIKEMESH_HAVE_CUDA
  if (x.device().is_cuda()) {
    k.device_bits = std::make_shared<cuda_layer::DeviceSaved>(cuda_layer::DeviceSaved::save(x));
    return k;
  }
#endif
  k.host_bits = SavedActivation::save(x);
  return k;
}

Tensor Sequential::KeptInput::restore() const {
#ifdef SPIKEMESH_HAVE_CUDA
  if (device_bits) return static_cast<const cuda_layer::DeviceSaved*>(device_bits.get())->restore();
#endif
  Tensor x = host_bits.defined() ? host_bits.restore() : kept;
  SM_CHECK(x.defined(), "memopt: a checkpointed segment has no kept input (backward before forward?)");
  x.set_binary(binary);
  return x;
}

// ---- forward and backward of one segment ------------------------------------------------------

Tensor Sequential::segment_forward(const MemoptSegment& seg, size_t index, const Tensor& x, Ctx& ctx) {
  Tensor h = x;  // [T, N, ...]
  if (!seg.checkpoint || !ctx.training) {
    for (size_t i = seg.begin; i < seg.end; ++i) h = layers_[i]->forward(h, ctx);
    return h;
  }
  std::vector<KeptInput>& kept = memopt_state().kept(ctx.slot, segments_.size());
  kept[index] = KeptInput::keep(x, seg.compress);
  Ctx c = ctx;
  c.checkpointed = true;
  SlotCapture capture;
  for (size_t i = seg.begin; i < seg.end; ++i) h = layers_[i]->forward(h, c);
  capture.release_all();  // what the layers saved: recomputed in backward
  return h;  // [T, N, ...segment output]
}

Tensor Sequential::segment_backward(const MemoptSegment& seg, size_t index, const Tensor& dy, Ctx& ctx) {
  Tensor g = dy;  // [T, N, ...segment output]
  if (seg.checkpoint) {
    std::vector<KeptInput>& kept = memopt_state().kept(ctx.slot, segments_.size());
    Tensor h = kept[index].restore();  // [T, N, ...segment input]
    kept[index] = KeptInput();
    for (size_t i = seg.begin; i < seg.end; ++i) layers_[i]->reset_state();
    Ctx c = ctx;
    c.recompute = true;
    for (size_t i = seg.begin; i < seg.end; ++i) h = layers_[i]->forward(h, c);
  }
  for (size_t i = seg.end; i-- > seg.begin;) g = layers_[i]->backward_input(g, ctx);
  return g;  // [T, N, ...segment input]
}

std::vector<Sequential::KeptInput>& Sequential::MemoptState::kept(int slot, size_t segments) {
  if (slot >= static_cast<int>(by_slot.size())) by_slot.resize(slot + 1);
  std::vector<KeptInput>& v = by_slot[slot];
  if (v.size() != segments) v.resize(segments);
  return v;
}

Sequential::MemoptState& Sequential::memopt_state() {
  if (!memopt_state_) memopt_state_ = std::make_shared<MemoptState>();
  return *memopt_state_;
}

void Sequential::set_memopt(std::vector<MemoptSegment> segments) {
  size_t next = 0;
  for (const MemoptSegment& s : segments) {
    SM_CHECK(s.begin == next && s.end > s.begin && s.end <= layers_.size(),
             "memopt segments of '" << name_ << "' must cover its " << layers_.size() << " children in order");
    SM_CHECK(s.time_chunks >= 1 && s.batch_pieces >= 1 && (s.checkpoint || (s.time_chunks == 1 && s.batch_pieces == 1)),
             "memopt segment of '" << name_ << "': splits need a checkpoint");
    next = s.end;
  }
  SM_CHECK(segments.empty() || next == layers_.size(),
           "memopt segments of '" << name_ << "' must cover its " << layers_.size() << " children");
  segments_ = std::move(segments);
  memopt_state_.reset();
}

}  // namespace sm
