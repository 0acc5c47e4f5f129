// conv1d.cpp — the Conv1d layer (1×1 over channels of tokens): [T, N, Cin, L] -> [T, N, Cout, L].
// Per sample y[b] = W[Cout, Cin] · x[b][Cin, L] + bias, through the conv1x1 kernels of
// kernels/cpu/conv.h (float: oneDNN batched matmul / 1×1 convolution; double: own GEMM).
//
// Saved per slot: the input as a SavedActivation (bits for spikes) and, for split B/W, a
// reference to dy. Tensor parallelism as in Conv2d: colwise (weight dim 0) all-reduces dx,
// rowwise (weight dim 1) all-reduces the partial output, then adds the bias once.
#include "spikemesh/layers/conv1d.h"

#include "spikemesh/core/bitpack.h"
#include "spikemesh/kernels/cpu/conv.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct Saved {
  SavedActivation input;  // [T, N, Cin, L]
  Tensor dy;              // [T, N, Cout, L], kept between split B and W
};

SlotStore<Saved>& slots_of(const std::shared_ptr<void>& impl) {
  return *static_cast<SlotStore<Saved>*>(impl.get());
}

enum class TpMode { None, Colwise, Rowwise };

TpMode tp_mode(const Param& weight, const Ctx& ctx) {
  const auto g = weight.shard.group;
  if (!ctx.tp || !weight.shard.sharded() || (g != ShardSpec::Group::TP && g != ShardSpec::Group::TPxDP))
    return TpMode::None;
  return weight.shard.dim == 0 ? TpMode::Colwise : TpMode::Rowwise;
}

// Kernel dimensions of input [T, N, Cin, L] with this rank's weight [Cout, Cin, 1].
struct Dims {
  int64_t batch, cin, cout, len;
  Dims(const Shape& x, const Tensor& weight)
      : batch(x[0] * x[1]), cin(x[2]), cout(weight.dim(0)), len(x[3]) {}
};

template <typename T>
void add_channel_bias(const T* bias, int64_t batch, int64_t channels, int64_t len, T* y) {
#pragma omp parallel for schedule(static) if (batch * channels * len > 32768)
  for (int64_t bc = 0; bc < batch * channels; ++bc) {
    const T b = bias[bc % channels];
    T* p = y + bc * len;
    for (int64_t i = 0; i < len; ++i) p[i] += b;
  }
}

template <typename T>
void forward_typed(const Dims& d, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  cpu::conv1x1_forward<T>(d.batch, d.cin, d.cout, d.len, x.data<T>(), w.data<T>(),
                          bias ? bias->data<T>() : nullptr, y.data<T>());
}

template <typename T>
void backward_data_typed(const Dims& d, const Tensor& dy, const Tensor& w, Tensor& dx) {
  cpu::conv1x1_backward_data<T>(d.batch, d.cin, d.cout, d.len, dy.data<T>(), w.data<T>(), dx.data<T>());
}

template <typename T>
void weight_grads(const Dims& d, const Tensor& x, const Tensor& dy, Param& w, Param* b) {
  cpu::conv1x1_backward_weights<T>(d.batch, d.cin, d.cout, d.len, x.data<T>(), dy.data<T>(),
                                   w.grad.data<T>(), b ? b->grad.data<T>() : nullptr);
}

}  // namespace

Conv1d::Conv1d(const Conv1dConfig& c) : cfg_(c) {
  if (c.in_channels < 1 || c.out_channels < 1)
    SM_INPUT_ERROR("conv1d needs in_channels and out_channels >= 1 (got " << c.in_channels << " and "
                                                                          << c.out_channels << ")");
  add_param("weight", {c.out_channels, c.in_channels, 1},
            weight_init_spec(c.init, c.in_channels, c.out_channels));
  if (c.bias) add_param("bias", {c.out_channels}, bias_init_spec(c.init, c.in_channels));
  impl_ = std::make_shared<SlotStore<Saved>>();
}

Shape Conv1d::output_shape(const Shape& in) const {
  if (in.size() != 2) SM_INPUT_ERROR("conv1d expects a per-sample input [C, L], got " << shape_str(in));
  if (in[0] != cfg_.in_channels)
    SM_INPUT_ERROR("conv1d expects " << cfg_.in_channels << " input channels, got " << in[0]);
  if (in[1] < 1) SM_INPUT_ERROR("conv1d expects at least one token, got " << shape_str(in));
  return {cfg_.out_channels, in[1]};
}

Tensor Conv1d::forward_cpu(const Tensor& x, Ctx& ctx) {
  const Tensor& w = param(0).value;  // [Cout_local, Cin_local, 1]
  if (x.ndim() != 4) SM_INPUT_ERROR("conv1d expects input [T, N, C, L], got " << shape_str(x.shape()));
  if (x.dim(2) != w.dim(1))
    SM_INPUT_ERROR("conv1d expects " << w.dim(1) << " input channels, got " << x.dim(2));
  SM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
           "conv1d supports f32/f64, got " << dtype_name(x.dtype()));
  SM_CHECK(w.dtype() == x.dtype(), "conv1d weight is " << dtype_name(w.dtype()) << ", input is "
                                                       << dtype_name(x.dtype()));
  const Dims d(x.shape(), w);
  const TpMode tp = tp_mode(param(0), ctx);
  const Tensor* bias = cfg_.bias && tp != TpMode::Rowwise ? &param(1).value : nullptr;
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), d.cout, d.len}, x.dtype());
  if (x.dtype() == DType::F32)
    forward_typed<float>(d, x, w, bias, y);
  else
    forward_typed<double>(d, x, w, bias, y);
  if (tp == TpMode::Rowwise) {
    ctx.tp->all_reduce_sum(y);
    if (cfg_.bias) {
      if (x.dtype() == DType::F32)
        add_channel_bias(param(1).value.data<float>(), d.batch, d.cout, d.len, y.data<float>());
      else
        add_channel_bias(param(1).value.data<double>(), d.batch, d.cout, d.len, y.data<double>());
    }
  }
  Saved& sv = slots_of(impl_).fresh(ctx.slot);
  sv.input = SavedActivation::save(x);
  return y;
}

Tensor Conv1d::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  Saved& sv = slots_of(impl_).get(ctx.slot);
  const Tensor& w = param(0).value;
  const Dims d(sv.input.shape(), w);
  SM_CHECK(dy.numel() == d.batch * d.cout * d.len && dy.dtype() == w.dtype(),
           "conv1d backward got dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()));
  Tensor dx = Tensor::empty(sv.input.shape(), dy.dtype());
  if (dy.dtype() == DType::F32)
    backward_data_typed<float>(d, dy, w, dx);
  else
    backward_data_typed<double>(d, dy, w, dx);
  if (tp_mode(param(0), ctx) == TpMode::Colwise) ctx.tp->all_reduce_sum(dx);
  sv.dy = dy;  // a reference (no copy): W reads it, or we do it now
  if (!ctx.split_wgrad) backward_weight_cpu(ctx);
  return dx;
}

void Conv1d::backward_weight_cpu(Ctx& ctx) {
  auto& slots = slots_of(impl_);
  Saved& sv = slots.get(ctx.slot);
  SM_CHECK(sv.dy.defined(), "conv1d backward_weight without a kept dy (B not run with split_wgrad?)");
  const Tensor x = sv.input.restore();  // [T, N, Cin, L]
  const Dims d(x.shape(), param(0).value);
  Param* b = cfg_.bias ? &param(1) : nullptr;
  if (x.dtype() == DType::F32)
    weight_grads<float>(d, x, sv.dy, param(0), b);
  else
    weight_grads<double>(d, x, sv.dy, param(0), b);
  slots.release(ctx.slot);
}

}  // namespace sm
