// conv2d.cpp — the Conv2d layer over time-major input [T, N, Cin, H, W] (kernels see
// [T·N, Cin, H, W]); float runs on oneDNN, double on the own deterministic im2col kernels.
//
// Saved per slot: the input as a SavedActivation (bits when it is a spike tensor) and, when
// B runs with split_wgrad, a reference to dy for W. B without the split computes dx, dW and
// db at once and releases the slot; otherwise W does dW/db and releases it.
//
// Tensor parallelism (only when ctx.tp is set and the weight is TP-sharded): colwise (weight
// split on dim 0, bias sharded alike) all-reduces dx; rowwise (weight split on dim 1, input
// holds the local channel shard, bias replicated) all-reduces the partial output before
// adding the bias once. The kernels always use this rank's local weight shape.
#include "spikemesh/layers/conv2d.h"

#include "spikemesh/core/bitpack.h"
#include "spikemesh/kernels/cpu/conv.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {

struct Conv2d::Saved {
  SavedActivation input;  // [T, N, Cin, H, W]
  Tensor dy;              // [T, N, Cout, Ho, Wo], kept between split B and W
};

namespace {

template <class S>
SlotStore<S>& slots_of(const std::shared_ptr<void>& impl) {
  return *static_cast<SlotStore<S>*>(impl.get());
}

enum class TpMode { None, Colwise, Rowwise };

TpMode tp_mode(const Param& weight, const Ctx& ctx) {
  const auto g = weight.shard.group;
  if (!ctx.tp || !weight.shard.sharded() || (g != ShardSpec::Group::TP && g != ShardSpec::Group::TPxDP))
    return TpMode::None;
  return weight.shard.dim == 0 ? TpMode::Colwise : TpMode::Rowwise;
}

template <typename T>
void add_channel_bias(const T* bias, int64_t batch, int64_t channels, int64_t plane, T* y) {
#pragma omp parallel for schedule(static) if (batch * channels * plane > 32768)
  for (int64_t bc = 0; bc < batch * channels; ++bc) {
    const T b = bias[bc % channels];
    T* p = y + bc * plane;
    for (int64_t i = 0; i < plane; ++i) p[i] += b;
  }
}

}  // namespace

Conv2d::Conv2d(const Conv2dConfig& c) : cfg_(c) {
  if (c.in_channels < 1 || c.out_channels < 1)
    SM_INPUT_ERROR("conv2d needs in_channels and out_channels >= 1 (got " << c.in_channels << " and "
                                                                          << c.out_channels << ")");
  if (c.kernel < 1) SM_INPUT_ERROR("conv2d kernel must be >= 1 (got " << c.kernel << ")");
  if (c.stride < 1) SM_INPUT_ERROR("conv2d stride must be >= 1 (got " << c.stride << ")");
  if (c.padding < 0) SM_INPUT_ERROR("conv2d padding must be >= 0 (got " << c.padding << ")");
  const int64_t kk = int64_t{c.kernel} * c.kernel;
  add_param("weight", {c.out_channels, c.in_channels, c.kernel, c.kernel},
            weight_init_spec(c.init, c.in_channels * kk, c.out_channels * kk));
  if (c.bias) add_param("bias", {c.out_channels}, bias_init_spec(c.init, c.in_channels * kk));
  impl_ = std::make_shared<SlotStore<Saved>>();
}

Shape Conv2d::output_shape(const Shape& in) const {
  if (in.size() != 3)
    SM_INPUT_ERROR("conv2d expects a per-sample input [C, H, W], got " << shape_str(in));
  if (in[0] != cfg_.in_channels)
    SM_INPUT_ERROR("conv2d expects " << cfg_.in_channels << " input channels, got " << in[0]);
  const int64_t ho = (in[1] + 2 * cfg_.padding - cfg_.kernel) / cfg_.stride + 1;
  const int64_t wo = (in[2] + 2 * cfg_.padding - cfg_.kernel) / cfg_.stride + 1;
  if (in[1] + 2 * cfg_.padding < cfg_.kernel || in[2] + 2 * cfg_.padding < cfg_.kernel || ho < 1 || wo < 1)
    SM_INPUT_ERROR("conv2d kernel " << cfg_.kernel << " (padding " << cfg_.padding
                                    << ") does not fit an input of " << in[1] << "x" << in[2]);
  return {cfg_.out_channels, ho, wo};
}

namespace {

// Kernel geometry of input x [T, N, Cin, H, W] with this rank's weight [Cout, Cin, K, K].
cpu::Conv2dGeometry geometry(const Shape& x, const Tensor& weight, const Conv2dConfig& c) {
  cpu::Conv2dGeometry g;
  g.batch = x[0] * x[1];
  g.in_channels = x[2];
  g.height = x[3];
  g.width = x[4];
  g.out_channels = weight.dim(0);
  g.kernel = c.kernel;
  g.stride = c.stride;
  g.padding = c.padding;
  return g;
}

template <typename T>
void weight_grads(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& dy, Param& w,
                  Param* b) {
  cpu::conv2d_backward_weights<T>(g, x.data<T>(), dy.data<T>(), w.grad.data<T>(),
                                  b ? b->grad.data<T>() : nullptr);
}

}  // namespace

Tensor Conv2d::forward_cpu(const Tensor& x, Ctx& ctx) {
  const Tensor& w = param(0).value;  // [Cout_local, Cin_local, K, K]
  if (x.ndim() != 5)
    SM_INPUT_ERROR("conv2d expects input [T, N, C, H, W], got " << shape_str(x.shape()));
  if (x.dim(2) != w.dim(1))
    SM_INPUT_ERROR("conv2d expects " << w.dim(1) << " input channels, got " << x.dim(2));
  SM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
           "conv2d supports f32/f64, got " << dtype_name(x.dtype()));
  SM_CHECK(w.dtype() == x.dtype(), "conv2d weight is " << dtype_name(w.dtype()) << ", input is "
                                                       << dtype_name(x.dtype()));
  const cpu::Conv2dGeometry g = geometry(x.shape(), w, cfg_);
  SM_CHECK(g.out_height() >= 1 && g.out_width() >= 1 && g.height + 2 * g.padding >= g.kernel &&
               g.width + 2 * g.padding >= g.kernel,
           "conv2d kernel " << g.kernel << " does not fit input " << shape_str(x.shape()));
  const TpMode tp = tp_mode(param(0), ctx);
  const bool bias_in_kernel = cfg_.bias && tp != TpMode::Rowwise;
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), g.out_channels, g.out_height(), g.out_width()},
                           x.dtype());
  if (x.dtype() == DType::F32)
    cpu::conv2d_forward<float>(g, x.data<float>(), w.data<float>(),
                               bias_in_kernel ? param(1).value.data<float>() : nullptr, y.data<float>());
  else
    cpu::conv2d_forward<double>(g, x.data<double>(), w.data<double>(),
                                bias_in_kernel ? param(1).value.data<double>() : nullptr,
                                y.data<double>());
  if (tp == TpMode::Rowwise) {
    ctx.tp->all_reduce_sum(y);
    if (cfg_.bias) {
      const int64_t plane = g.out_height() * g.out_width();
      if (x.dtype() == DType::F32)
        add_channel_bias(param(1).value.data<float>(), g.batch, g.out_channels, plane, y.data<float>());
      else
        add_channel_bias(param(1).value.data<double>(), g.batch, g.out_channels, plane, y.data<double>());
    }
  }
  Saved& sv = slots_of<Saved>(impl_).fresh(ctx.slot);
  sv.input = SavedActivation::save(x);
  return y;
}

Tensor Conv2d::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  auto& slots = slots_of<Saved>(impl_);
  Saved& sv = slots.get(ctx.slot);
  const Tensor& w = param(0).value;
  const cpu::Conv2dGeometry g = geometry(sv.input.shape(), w, cfg_);
  SM_CHECK(dy.numel() == g.output_numel() && dy.dtype() == w.dtype(),
           "conv2d backward got dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()));
  Tensor dx = Tensor::empty(sv.input.shape(), dy.dtype());
  if (dy.dtype() == DType::F32)
    cpu::conv2d_backward_data<float>(g, dy.data<float>(), w.data<float>(), dx.data<float>());
  else
    cpu::conv2d_backward_data<double>(g, dy.data<double>(), w.data<double>(), dx.data<double>());
  if (tp_mode(param(0), ctx) == TpMode::Colwise) ctx.tp->all_reduce_sum(dx);
  sv.dy = dy;  // a reference (no copy): W reads it, or we do it now
  if (!ctx.split_wgrad) backward_weight_cpu(ctx);
  return dx;
}

void Conv2d::backward_weight_cpu(Ctx& ctx) {
  auto& slots = slots_of<Saved>(impl_);
  Saved& sv = slots.get(ctx.slot);
  SM_CHECK(sv.dy.defined(), "conv2d backward_weight without a kept dy (B not run with split_wgrad?)");
  const Tensor x = sv.input.restore();  // [T, N, Cin, H, W]
  const cpu::Conv2dGeometry g = geometry(x.shape(), param(0).value, cfg_);
  Param* b = cfg_.bias ? &param(1) : nullptr;
  if (x.dtype() == DType::F32)
    weight_grads<float>(g, x, sv.dy, param(0), b);
  else
    weight_grads<double>(g, x, sv.dy, param(0), b);
  slots.release(ctx.slot);
}

}  // namespace sm
