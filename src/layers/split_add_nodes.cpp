// split_add_nodes.cpp — ChannelSplit and Add (layers/split_add_nodes.h) over the
// device-dispatched copies and adds of device_ops.h. ChannelSplit keeps the input shape per slot (B releases it: no
// parameters); Add keeps nothing.
#include "spikemesh/layers/split_add_nodes.h"

#include <numeric>

#include "device_ops.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

SlotStore<Shape>& shapes_of(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<SlotStore<Shape>>();
  return *static_cast<SlotStore<Shape>*>(p.get());
}

// x [T, N, C, ...] as [outer = T·N, C, inner = Π spatial] channel blocks of `count` channels.
layer_ops::ChannelBlock block_of(const Shape& x, int64_t count) {
  layer_ops::ChannelBlock b;
  b.outer = x[0] * x[1];
  b.inner = 1;
  for (size_t d = 3; d < x.size(); ++d) b.inner *= x[d];
  b.count = count;
  return b;
}

}  // namespace

// ---- ChannelSplit ----------------------------------------------------------------------

ChannelSplit::ChannelSplit(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {
  if (sizes_.empty()) SM_INPUT_ERROR("channel_split needs at least one output size");
  for (int64_t s : sizes_)
    if (s < 1) SM_INPUT_ERROR("channel_split sizes must be >= 1, got " << s);
}

std::vector<Shape> ChannelSplit::output_shapes(const std::vector<Shape>& in) const {
  const int64_t total = std::accumulate(sizes_.begin(), sizes_.end(), int64_t{0});
  if (in.size() != 1 || in[0].empty() || in[0][0] != total)
    SM_INPUT_ERROR("channel_split into " << total << " channels expects one per-sample input [" << total
                                         << ", ...], got " << (in.size() == 1 ? shape_str(in[0]) : "several"));
  std::vector<Shape> out;
  for (int64_t s : sizes_) {
    Shape o = in[0];
    o[0] = s;
    out.push_back(o);
  }
  return out;
}

std::vector<Tensor> ChannelSplit::forward_all(const std::vector<Tensor>& xs, Ctx& ctx) {
  const Tensor& x = xs[0];  // [T, N, C, ...]
  SM_CHECK(x.ndim() >= 3, "channel_split '" << name() << "' expects [T, N, C, ...], got " << shape_str(x.shape()));
  output_shapes({Shape(x.shape().begin() + 2, x.shape().end())});
  CudaAllocLabel label("channel_split forward", &name_);
  shapes_of(impl_).fresh(ctx.slot) = x.shape();
  std::vector<Tensor> ys;
  int64_t c0 = 0;
  for (int64_t s : sizes_) {
    Shape ys_shape = x.shape();
    ys_shape[2] = s;
    Tensor y = Tensor::empty(ys_shape, x.dtype(), x.device());  // [T, N, c_i, ...]
    layer_ops::copy_channels(x, x.dim(2), c0, y, s, 0, block_of(x.shape(), s));
    y.set_binary(x.is_binary());
    ys.push_back(y);
    c0 += s;
  }
  return ys;
}

std::vector<Tensor> ChannelSplit::backward_all(const std::vector<Tensor>& dys, Ctx& ctx) {
  SlotStore<Shape>& store = shapes_of(impl_);
  const Shape in = store.get(ctx.slot);
  store.release(ctx.slot);  // no parameters: nothing is left for W
  CudaAllocLabel label("channel_split backward", &name_);
  Tensor dx = Tensor::empty(in, dys[0].dtype(), dys[0].device());  // [T, N, C, ...]
  int64_t c0 = 0;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    Shape want = in;
    want[2] = sizes_[i];
    SM_CHECK(dys[i].shape() == want && dys[i].dtype() == dx.dtype(),
             "channel_split '" << name() << "' backward: gradient " << i << " is " << shape_str(dys[i].shape())
                               << ", want " << shape_str(want));
    layer_ops::copy_channels(dys[i], sizes_[i], 0, dx, in[2], c0, block_of(in, sizes_[i]));
    c0 += sizes_[i];
  }
  return {dx};
}

// ---- Add -----------------------------------------------------------------------------------

Add::Add(int inputs) : inputs_(inputs) {
  if (inputs < 1) SM_INPUT_ERROR("add needs at least one input, got " << inputs);
}

std::vector<Shape> Add::output_shapes(const std::vector<Shape>& in) const {
  for (const Shape& s : in)
    if (s != in[0]) SM_INPUT_ERROR("add of " << shape_str(in[0]) << " and " << shape_str(s) << ": shapes differ");
  return {in[0]};
}

std::vector<Tensor> Add::forward_all(const std::vector<Tensor>& xs, Ctx&) {
  CudaAllocLabel label("add forward", &name_);
  Tensor y = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) y = layer_ops::add(y, xs[i], "add");  // ((x0 + x1) + x2) + ...
  return {y};
}

std::vector<Tensor> Add::backward_all(const std::vector<Tensor>& dys, Ctx&) {
  return std::vector<Tensor>(static_cast<size_t>(inputs_), dys[0]);  // d/dx_i Σ x = 1: dy itself
}

}  // namespace sm
