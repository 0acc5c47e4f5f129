// dataflow_node.cpp — GraphOp's entry points (layers/dataflow_node.h): argument counts and
// devices checked once here, then the op's own forward_all / backward_all; the single-tensor Layer
// interface for ops with one input and one output.
#include "spikemesh/layers/dataflow_node.h"

namespace sm {
namespace {

// All n tensors defined and on the device of the first.
void check_args(const std::vector<Tensor>& ts, size_t n, const char* what, const GraphOp& op) {
  SM_CHECK(ts.size() == n, op.type() << " '" << op.name() << "' takes " << n << " " << what << ", got " << ts.size());
  for (size_t i = 0; i < ts.size(); ++i)
    SM_CHECK(ts[i].defined() && ts[i].device() == ts[0].device(),
             op.type() << " '" << op.name() << "': " << what << " " << i << " is "
                       << (ts[i].defined() ? "on " + ts[i].device().str() : std::string("missing")) << ", "
                       << what << " 0 on " << ts[0].device().str());
}

// The single-tensor interface needs one input and one output.
void check_one_to_one(const GraphOp& op) {
  if (op.num_inputs() != 1 || op.num_outputs() != 1)
    SM_INPUT_ERROR(op.type() << " '" << op.name() << "' has " << op.num_inputs() << " inputs and "
                             << op.num_outputs() << " outputs: use it inside a graph (layers/dataflow_graph.h)");
}

}  // namespace

std::vector<Tensor> GraphOp::forward_multi(const std::vector<Tensor>& xs, Ctx& ctx) {
  check_args(xs, static_cast<size_t>(num_inputs()), "inputs", *this);
  last_device_ = xs[0].device();
  std::vector<Tensor> ys = forward_all(xs, ctx);
  SM_CHECK(ys.size() == static_cast<size_t>(num_outputs()), type() << " produced " << ys.size() << " outputs");
  return ys;
}

std::vector<Tensor> GraphOp::backward_multi(const std::vector<Tensor>& dys, Ctx& ctx) {
  check_args(dys, static_cast<size_t>(num_outputs()), "output gradients", *this);
  std::vector<Tensor> dxs = backward_all(dys, ctx);
  SM_CHECK(dxs.size() == static_cast<size_t>(num_inputs()), type() << " produced " << dxs.size() << " input gradients");
  return dxs;
}

Shape GraphOp::output_shape(const Shape& in) const {
  check_one_to_one(*this);
  return output_shapes({in})[0];
}

Tensor GraphOp::forward_cpu(const Tensor& x, Ctx& ctx) {  // both devices
  check_one_to_one(*this);
  return forward_multi({x}, ctx)[0];
}

Tensor GraphOp::backward_input_cpu(const Tensor& dy, Ctx& ctx) {  // both devices
  check_one_to_one(*this);
  return backward_multi({dy}, ctx)[0];
}

}  // namespace sm
