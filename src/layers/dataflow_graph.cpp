// dataflow_graph.cpp — the dataflow composite of layers/dataflow_graph.h: building (value
// checks, last uses), shapes, forward in node order, backward in reverse with fan-out accumulation.
#include "spikemesh/layers/dataflow_graph.h"

#include "device_ops.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct ValueMeta {
  Shape shape;
  DType dtype = DType::F32;
  Device device;
};

struct Saved {
  ValueMeta input;                           // the graph input
  std::vector<std::vector<ValueMeta>> outs;  // [node][output]
};

ValueMeta meta_of(const Tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

SlotStore<Saved>& slots_of(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<SlotStore<Saved>>();
  return *static_cast<SlotStore<Saved>*>(p.get());
}

}  // namespace

void Graph::check_value(GraphValue v, const std::string& who) const {
  if (v.node < -1 || v.node >= static_cast<int>(nodes_.size()))
    SM_INPUT_ERROR("graph '" << name() << "': " << who << " reads node " << v.node << ", but only "
                             << nodes_.size() << " nodes come before it");
  const int outs = v.node < 0 ? 1 : nodes_[v.node].outputs;
  if (v.output < 0 || v.output >= outs) {
    const std::string of = v.node < 0 ? std::string("the graph input") : "node '" + nodes_[v.node].layer->name() + "'";
    SM_INPUT_ERROR("graph '" << name() << "': " << who << " reads output " << v.output << " of " << of << ", which has "
                             << outs);
  }
}

int Graph::append(const std::string& name, Node n) {
  for (GraphValue v : n.ins) check_value(v, "node '" + name + "'");
  for (const Node& o : nodes_)
    if (o.layer->name() == name) SM_INPUT_ERROR("graph '" << this->name() << "': two nodes are named '" << name << "'");
  n.layer->set_name(name);
  n.last_use.assign(static_cast<size_t>(n.outputs), -1);
  const int self = static_cast<int>(nodes_.size());
  for (GraphValue v : n.ins)
    if (v.node >= 0) nodes_[v.node].last_use[v.output] = self;
  nodes_.push_back(std::move(n));
  return self;
}

GraphValue Graph::add(const std::string& name, LayerPtr layer, GraphValue in) {
  SM_CHECK(layer, "graph '" << this->name() << "': node '" << name << "' is null");
  if (auto* op = dynamic_cast<GraphOp*>(layer.get())) {  // a one-to-one op added as a layer
    layer.release();
    return add_op(name, GraphOpPtr(op), {in})[0];
  }
  Node n;
  n.layer = std::move(layer);
  n.ins = {in};
  return {append(name, std::move(n)), 0};
}

std::vector<GraphValue> Graph::add_op(const std::string& name, GraphOpPtr op, const std::vector<GraphValue>& ins) {
  SM_CHECK(op, "graph '" << this->name() << "': node '" << name << "' is null");
  if (static_cast<int>(ins.size()) != op->num_inputs())
    SM_INPUT_ERROR("graph '" << this->name() << "': node '" << name << "' (" << op->type() << ") takes "
                             << op->num_inputs() << " inputs, given " << ins.size());
  Node n;
  n.op = op.get();
  n.outputs = op->num_outputs();
  n.layer = std::move(op);
  n.ins = ins;
  const int self = append(name, std::move(n));
  std::vector<GraphValue> outs;
  for (int k = 0; k < nodes_[self].outputs; ++k) outs.push_back({self, k});
  return outs;
}

void Graph::set_output(GraphValue v) {
  check_value(v, "the graph output");
  output_ = v;
  output_set_ = true;
}

GraphValue Graph::output() const {
  SM_CHECK(!nodes_.empty(), "graph '" << name() << "' has no nodes");
  return output_set_ ? output_ : GraphValue{static_cast<int>(nodes_.size()) - 1, 0};
}

std::vector<Layer*> Graph::children() {
  std::vector<Layer*> out;
  for (Node& n : nodes_) out.push_back(n.layer.get());
  return out;
}

Shape Graph::output_shape(const Shape& in) const {
  std::vector<std::vector<Shape>> shapes(nodes_.size());  // per-sample shapes [node][output]
  auto shape = [&](GraphValue v) -> const Shape& { return v.node < 0 ? in : shapes[v.node][v.output]; };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    std::vector<Shape> ins;
    for (GraphValue v : n.ins) ins.push_back(shape(v));
    shapes[i] = n.op ? n.op->output_shapes(ins) : std::vector<Shape>{n.layer->output_shape(ins[0])};
  }
  return shape(output());
}

Tensor Graph::forward_cpu(const Tensor& x, Ctx& ctx) {  // both devices
  const GraphValue result = output();
  std::vector<std::vector<Tensor>> vals(nodes_.size());  // [node][output] until its last use
  auto value = [&](GraphValue v) -> const Tensor& { return v.node < 0 ? x : vals[v.node][v.output]; };
  Saved& sv = slots_of(impl_).fresh(ctx.slot);
  sv.input = meta_of(x);
  sv.outs.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = nodes_[i];
    std::vector<Tensor> ins;
    for (GraphValue v : n.ins) ins.push_back(value(v));
    vals[i] = n.op ? n.op->forward_multi(ins, ctx) : std::vector<Tensor>{n.layer->forward(ins[0], ctx)};
    for (const Tensor& t : vals[i]) sv.outs[i].push_back(meta_of(t));
    for (GraphValue v : n.ins)  // drop intermediate values read for the last time
      if (v.node >= 0 && nodes_[v.node].last_use[v.output] == static_cast<int>(i) && !(v == result))
        vals[v.node][v.output] = Tensor();
  }
  return value(result);
}

Tensor Graph::backward_input_cpu(const Tensor& dy, Ctx& ctx) {  // both devices
  SlotStore<Saved>& slots = slots_of(impl_);
  const Saved sv = std::move(slots.get(ctx.slot));
  slots.release(ctx.slot);  // W needs nothing of the graph's own
  CudaAllocLabel label("graph backward", &name_);
  const bool owned = ctx.dy_owned;  // its nodes' gradients are never written over (layers/layer.h)
  const bool unused = ctx.input_grad_unused;  // and its nodes' input gradients are all made
  ctx.dy_owned = false;
  ctx.input_grad_unused = false;
  struct Restore {
    Ctx& c;
    bool v, u;
    ~Restore() { c.dy_owned = v, c.input_grad_unused = u; }
  } restore{ctx, owned, unused};
  std::vector<std::vector<Tensor>> grads(nodes_.size());  // [node][output], summed over uses
  for (size_t i = 0; i < nodes_.size(); ++i) grads[i].resize(static_cast<size_t>(nodes_[i].outputs));
  Tensor dinput;
  auto accumulate = [&](GraphValue v, const Tensor& g) {
    Tensor& t = v.node < 0 ? dinput : grads[v.node][v.output];
    t = t.defined() ? layer_ops::add(t, g, "graph fan-out gradient") : g;  // out of place: g may be shared
  };
  accumulate(output(), dy);
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node& n = nodes_[i];
    std::vector<Tensor> dys = std::move(grads[i]);
    for (size_t k = 0; k < dys.size(); ++k)
      if (!dys[k].defined()) {  // an output nothing used: zero gradient
        const ValueMeta& m = sv.outs[i][k];
        dys[k] = Tensor::zeros(m.shape, m.dtype, m.device);
      }
    const std::vector<Tensor> dxs =
        n.op ? n.op->backward_multi(dys, ctx) : std::vector<Tensor>{n.layer->backward_input(dys[0], ctx)};
    for (size_t k = 0; k < n.ins.size(); ++k) accumulate(n.ins[k], dxs[k]);
  }
  return dinput.defined() ? dinput : Tensor::zeros(sv.input.shape, sv.input.dtype, sv.input.device);
}

}  // namespace sm
