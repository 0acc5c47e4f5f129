// dataflow_graph.h — a dataflow composite (class Graph): a Layer whose nodes are layers (one
// input, one output) or GraphOps (several inputs and/or outputs, layers/dataflow_node.h), each
// node naming its inputs by the graph's input or earlier nodes' outputs — e.g. a Spikformer
// block: q, k, v from one projection (a ChannelSplit), attention over the three, residual
// branches (Add).
//
//   Graph g;
//   GraphValue qkv = g.add("qkv", std::make_unique<Conv1d>(...), Graph::input());
//   auto parts = g.add_op("split", std::make_unique<ChannelSplit>({C, C, C}), {qkv});
//   ...
//   g.add_op("res", std::make_unique<Add>(2), {Graph::input(), branch});  // last node: output
//
// Contract (layer.h): forward runs the nodes in the order added, each in ctx.slot (every node
// keeps its own slots; the graph keeps, per slot, only the outputs' shapes, dtypes and devices).
// backward_input walks the nodes in reverse and ACCUMULATES (out of place, in reverse node
// order) the gradients of values used more than once (fan-out); an output no later node uses
// gets a zero gradient; B releases the graph's slot. backward_weight runs every node's W in
// reverse; ctx.split_wgrad passes through to the nodes. params()/buffers()/children() list the
// nodes in order; a node's state-dict path is "<graph path>.<node name>".
// Invariants: a node reads only the graph input and outputs of nodes added before it (so the
// graph is acyclic by construction); node names are unique; intermediate outputs are dropped
// after their last use in forward.
#pragma once
#include <string>
#include <vector>

#include "spikemesh/layers/dataflow_node.h"

namespace sm {

// A value flowing in a graph: output `output` of node `node`; node -1 is the graph's input.
struct GraphValue {
  int node = -1;
  int output = 0;
  bool operator==(const GraphValue& o) const { return node == o.node && output == o.output; }
};

class Graph : public Layer {
 public:
  static GraphValue input() { return {}; }
  // Adds `layer` as node `name` reading `in`; returns its output.
  GraphValue add(const std::string& name, LayerPtr layer, GraphValue in);
  // Adds a multi-input / multi-output node; `ins`: one value per op input. Returns its outputs.
  std::vector<GraphValue> add_op(const std::string& name, GraphOpPtr op, const std::vector<GraphValue>& ins);
  // The graph's result (default: output 0 of the last node added).
  void set_output(GraphValue v);
  size_t size() const { return nodes_.size(); }

  Shape output_shape(const Shape& in) const override;
  std::string type() const override { return "graph"; }
  std::vector<Layer*> children() override;

 protected:
  // Nodes route by device themselves; fan-out sums run on the gradients' device.
  SM_ANY_DEVICE_HOOKS  // W: every node's in reverse (Layer's default)

 private:
  struct Node {
    LayerPtr layer;   // the node (a GraphOp when op != nullptr)
    GraphOp* op = nullptr;
    std::vector<GraphValue> ins;
    int outputs = 1;
    std::vector<int> last_use;  // per output: the last node reading it (-1: none)
  };
  void check_value(GraphValue v, const std::string& who) const;
  int append(const std::string& name, Node n);  // checks, names and stores n; returns its index
  GraphValue output() const;

  std::vector<Node> nodes_;
  GraphValue output_{-1, 0};
  bool output_set_ = false;
};

}  // namespace sm
