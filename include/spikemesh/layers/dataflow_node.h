// dataflow_node.h — a node with several inputs and/or outputs (e.g. a channel split into q, k, v,
// an element-wise add of branches, attention over q, k, v), for the dataflow composite
// layers/dataflow_graph.h. A GraphOp is a Layer, so a Unit owns, names and walks it like any layer
// (params(), buffers(), reset_state(), collect_stats()), with a multi-tensor interface:
//
//  forward_multi(xs, ctx)      xs: num_inputs() tensors [T, N, ...]; returns num_outputs()
//                              tensors; saves what backward needs in the slot ctx.slot.
//  backward_multi(dys, ctx)    dys: one DEFINED gradient per output (the graph passes zeros for
//                              an unused output); returns one dx per input. Same contract as
//                              Layer::backward_input: without ctx.split_wgrad it also
//                              accumulates parameter gradients and releases the slot, else W
//                              (backward_weight) does that later.
//
// Invariants: ops never write their inputs or the dys they are given, and may return them (or
// views of them) as results — consumers accumulate out of place. Ops run on the device of
// their inputs (all inputs on one device). The single-tensor Layer entry points serve ops with
// one input and one output only.
#pragma once
#include <vector>

#include "spikemesh/layers/layer.h"

namespace sm {

class GraphOp : public Layer {
 public:
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  // Per-sample output shapes for per-sample input shapes (Input errors when they do not fit).
  virtual std::vector<Shape> output_shapes(const std::vector<Shape>& in) const = 0;

  std::vector<Tensor> forward_multi(const std::vector<Tensor>& xs, Ctx& ctx);
  std::vector<Tensor> backward_multi(const std::vector<Tensor>& dys, Ctx& ctx);

  // Layer's single-tensor interface (one input, one output).
  Shape output_shape(const Shape& in) const override;

 protected:
  // The op itself, on any device (xs / dys already counted and on one device).
  virtual std::vector<Tensor> forward_all(const std::vector<Tensor>& xs, Ctx& ctx) = 0;
  virtual std::vector<Tensor> backward_all(const std::vector<Tensor>& dys, Ctx& ctx) = 0;

  SM_ANY_DEVICE_HOOKS
};

using GraphOpPtr = std::unique_ptr<GraphOp>;

}  // namespace sm
