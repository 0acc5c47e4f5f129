// split_add_nodes.h — parameter-free multi-input / multi-output nodes for
// layers/dataflow_graph.h:
//  ChannelSplit  one input [T, N, C, ...] -> k outputs [T, N, c_i, ...] (Σ c_i = C), channel
//                blocks in order (q, k, v from one projection); backward concatenates the
//                gradients. Outputs keep the input's binary flag. Saves the input shape.
//  Add           k >= 1 inputs of one shape -> their sum (left to right, in the tensors'
//                dtype); backward hands dy to every input. The sum of spikes is not binary.
//                Saves nothing.
// Both run on either device (copies and adds of src/layers/device_ops.h).
#pragma once
#include "spikemesh/layers/dataflow_node.h"

namespace sm {

class ChannelSplit : public GraphOp {
 public:
  explicit ChannelSplit(std::vector<int64_t> sizes);  // every size >= 1
  int num_inputs() const override { return 1; }
  int num_outputs() const override { return static_cast<int>(sizes_.size()); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override;
  std::string type() const override { return "channel_split"; }
  const std::vector<int64_t>& sizes() const { return sizes_; }

 protected:
  std::vector<Tensor> forward_all(const std::vector<Tensor>& xs, Ctx& ctx) override;
  std::vector<Tensor> backward_all(const std::vector<Tensor>& dys, Ctx& ctx) override;

 private:
  std::vector<int64_t> sizes_;
};

class Add : public GraphOp {
 public:
  explicit Add(int inputs = 2);  // >= 1
  int num_inputs() const override { return inputs_; }
  int num_outputs() const override { return 1; }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override;
  std::string type() const override { return "add"; }

 protected:
  std::vector<Tensor> forward_all(const std::vector<Tensor>& xs, Ctx& ctx) override;
  std::vector<Tensor> backward_all(const std::vector<Tensor>& dys, Ctx& ctx) override;

 private:
  int inputs_;
};

}  // namespace sm
