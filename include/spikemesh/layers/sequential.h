// sequential.h — composite layers: Sequential (children in order) and Residual
// (y = x + body(x)). Backward runs children in reverse; W of a composite runs every
// child's W. Names: a child's path is "<parent>.<child name>". Composites hold no saved state
// of their own: each child keeps its slots (layers/dataflow_graph.h: composites with several
// inputs) — except a Sequential under memopt, which keeps each checkpointed segment's input
// per slot (layers/memopt_segment.h) until that segment's backward.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/core/bitpack.h"
#include "spikemesh/layers/layer.h"
#include "spikemesh/layers/memopt_segment.h"

namespace sm {

class BatchNorm;

class Sequential : public Layer {
 public:
  void add(LayerPtr l) { layers_.push_back(std::move(l)); }
  size_t size() const { return layers_.size(); }
  Layer& at(size_t i) { return *layers_[i]; }

  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "sequential"; }
  // Its last child that does not merely preserve spikes emits them.
  bool emits_spikes() const override;
  std::vector<Layer*> children() override;

  // memopt: the segments covering the children (empty: none, the default). Training forwards
  // of checkpointed segments keep only their input; see layers/memopt_segment.h.
  void set_memopt(std::vector<MemoptSegment> segments);
  const std::vector<MemoptSegment>& memopt() const { return segments_; }

  // A link of a memopt piece chain (models/piece_chain.h; every segment checkpointed): the
  // chain's input kept as its first segment's (slot; as bits when binary and that segment
  // compresses), rows [b, e) of the samples its first segment kept, its children's forward on a
  // piece (neurons from rest), their backward, its kept inputs dropped, and every batch norm
  // below it (forward order).
  size_t chain_keep_input(int slot, const Tensor& x);  // the bytes kept
  Tensor chain_input_piece(int slot, int64_t b, int64_t e);
  Tensor chain_piece_forward(const Tensor& x, Ctx& ctx);
  Tensor chain_backward(const Tensor& dy, Ctx& ctx) { return backward_children(0, layers_.size(), dy, ctx); }
  void chain_release(int slot);
  std::vector<BatchNorm*> batch_norms();

 protected:
  // Composites route by child, whatever the device.
  SM_ANY_DEVICE_HOOKS  // W: every child's in reverse, but those of split memopt segments
  void backward_weight_cpu(Ctx& ctx) override;

  // Children [begin, end) forward in order, a batch norm and the neuron or max pooling after
  // it fused where they qualify (layers/fused_epilogue.h). An undefined tensor stops it (a
  // memopt moments pass: the batch norm it was for returns none), and so does it stop the
  // children's backward (a sums pass); a Residual passes the undefined tensor on.
  Tensor forward_children(size_t begin, size_t end, Tensor h, Ctx& ctx);
  // Children [end, begin) backward in reverse: the first gets dy as the caller marked it
  // (ctx.dy_owned: it may be written over when no other handle shares it), each after it the
  // previous one's result as the loop's own; stops at an undefined gradient.
  Tensor backward_children(size_t begin, size_t end, const Tensor& dy, Ctx& ctx);

  std::vector<LayerPtr> layers_;

 private:
  // A checkpointed segment's input: bits (host or device) or the tensor by reference.
  struct KeptInput {
    Tensor kept;
    SavedActivation host_bits;
    std::shared_ptr<void> device_bits;  // cuda_layer::DeviceSaved (CUDA builds)
    Shape shape;
    DType dtype = DType::F32;
    bool binary = false;
    static KeptInput keep(const Tensor& x, bool compress);
    Tensor restore() const;  // [T, N, ...] flagged binary as it was
    // Rows [b, e) along the axis (unpacked from the bits alone when they are on the host).
    Tensor restore_piece(SplitAxis axis, int64_t b, int64_t e) const;
    size_t bytes() const;  // what the checkpoint holds
  };
  struct KeptSegment {
    KeptInput input;
    std::vector<std::vector<Tensor>> membranes;  // time pieces: [piece][neuron] membrane at its start
  };
  struct MemoptState {
    std::vector<std::vector<KeptSegment>> by_slot;  // [slot][segment]
    std::vector<KeptSegment>& kept(int slot, size_t segments);
  };
  MemoptState& memopt_state();
  KeptSegment& chain_input(int slot);  // its first segment's, where a chain keeps its input
  Tensor segment_forward(const MemoptSegment& seg, size_t index, const Tensor& x, Ctx& ctx);
  Tensor segment_backward(const MemoptSegment& seg, size_t index, const Tensor& dy, Ctx& ctx);
  Tensor split_forward(const MemoptSegment& seg, KeptSegment& kept, const Tensor& x, const Ctx& ctx, size_t* dropped);
  Tensor split_backward(const MemoptSegment& seg, KeptSegment& kept, const Tensor& dy, const Ctx& ctx);
  void split_pass(const MemoptSegment& seg, const KeptSegment& kept, const Tensor& dy, const Ctx& c, Tensor* dx);
  void start_piece(const MemoptSegment& seg, const KeptSegment& kept, int p, Ctx& c, int64_t b);

  // Without memopt segments: every child in order, those before the first neuron on one time
  // step where `merge` (the stage's ctx.merge_repeated_steps, taken on entry) allows it and the
  // input repeats it (layers/time_invariant_prefix.h; prefix_by_slot_ records how many per
  // slot for backward, 0: none).
  Tensor forward_whole(const Tensor& x, Ctx& ctx, bool merge);
  Tensor backward_whole(const Tensor& dy, Ctx& ctx);

  std::vector<MemoptSegment> segments_;
  std::shared_ptr<MemoptState> memopt_state_;
  std::vector<size_t> prefix_by_slot_;
};

class Residual : public Sequential {
 public:
  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "residual"; }
  bool emits_spikes() const override { return false; }  // x + body(x) is not binary

 protected:
  // The children route by device; the identity branch is added on the input's device.
  Tensor forward_cpu(const Tensor& x, Ctx& ctx) override;
  Tensor backward_input_cpu(const Tensor& dy, Ctx& ctx) override;
};

}  // namespace sm
