// linear.cpp — the Linear layer on the last dimension: [T, N, ..., Fin] -> [T, N, ..., Fout],
// computed on rows x [M, Fin] (M = all leading dims); float via oneDNN matmul, double via
// the own deterministic GEMM.
//
// Saved per slot: the input as a SavedActivation (bits for spikes) and, for split B/W, a
// reference to dy. Tensor parallelism (ctx.tp set and the weight TP-sharded): colwise
// (weight dim 0, bias sharded alike) all-reduces dx; rowwise (weight dim 1, input holds the
// local feature shard, bias replicated) all-reduces the partial output, then adds the bias.
#include "spikemesh/layers/linear.h"

#include "spikemesh/core/bitpack.h"
#include "spikemesh/kernels/cpu/gemm.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct Saved {
  SavedActivation input;  // [T, N, ..., Fin]
  Tensor dy;              // [T, N, ..., Fout], kept between split B and W
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

template <typename T>
void add_row_bias(const T* bias, int64_t rows, int64_t cols, T* y) {
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
}

}  // namespace

Linear::Linear(const LinearConfig& c) : cfg_(c) {
  if (c.in_features < 1 || c.out_features < 1)
    SM_INPUT_ERROR("linear needs in_features and out_features >= 1 (got " << c.in_features << " and "
                                                                          << c.out_features << ")");
  add_param("weight", {c.out_features, c.in_features},
            weight_init_spec(c.init, c.in_features, c.out_features));
  if (c.bias) add_param("bias", {c.out_features}, bias_init_spec(c.init, c.in_features));
  impl_ = std::make_shared<SlotStore<Saved>>();
}

Shape Linear::output_shape(const Shape& in) const {
  if (in.empty()) SM_INPUT_ERROR("linear expects a per-sample input [..., features], got a scalar");
  if (in.back() != cfg_.in_features)
    SM_INPUT_ERROR("linear expects " << cfg_.in_features << " input features, got " << in.back()
                                     << " (input " << shape_str(in) << ")");
  Shape out = in;
  out.back() = cfg_.out_features;
  return out;
}

Tensor Linear::forward_cpu(const Tensor& x, Ctx& ctx) {
  const Tensor& w = param(0).value;  // [Fout_local, Fin_local]
  const int64_t fout = w.dim(0), fin = w.dim(1);
  if (x.ndim() < 3) SM_INPUT_ERROR("linear expects input [T, N, ..., F], got " << shape_str(x.shape()));
  if (x.dim(-1) != fin)
    SM_INPUT_ERROR("linear expects " << fin << " input features, got " << x.dim(-1));
  SM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
           "linear supports f32/f64, got " << dtype_name(x.dtype()));
  SM_CHECK(w.dtype() == x.dtype(), "linear weight is " << dtype_name(w.dtype()) << ", input is "
                                                       << dtype_name(x.dtype()));
  const int64_t M = x.numel() / fin;
  const TpMode tp = tp_mode(param(0), ctx);
  const bool bias_in_kernel = cfg_.bias && tp != TpMode::Rowwise;
  Shape out_shape = x.shape();
  out_shape.back() = fout;
  Tensor y = Tensor::empty(out_shape, x.dtype());
  if (x.dtype() == DType::F32)
    cpu::linear_forward<float>(M, fin, fout, x.data<float>(), w.data<float>(),
                               bias_in_kernel ? param(1).value.data<float>() : nullptr, y.data<float>());
  else
    cpu::linear_forward<double>(M, fin, fout, x.data<double>(), w.data<double>(),
                                bias_in_kernel ? param(1).value.data<double>() : nullptr,
                                y.data<double>());
  if (tp == TpMode::Rowwise) {
    ctx.tp->all_reduce_sum(y);
    if (cfg_.bias) {
      if (x.dtype() == DType::F32)
        add_row_bias(param(1).value.data<float>(), M, fout, y.data<float>());
      else
        add_row_bias(param(1).value.data<double>(), M, fout, y.data<double>());
    }
  }
  Saved& sv = slots_of(impl_).fresh(ctx.slot);
  sv.input = SavedActivation::save(x);
  return y;
}

Tensor Linear::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  Saved& sv = slots_of(impl_).get(ctx.slot);
  const Tensor& w = param(0).value;
  const int64_t fout = w.dim(0), fin = w.dim(1);
  const int64_t M = shape_numel(sv.input.shape()) / fin;
  SM_CHECK(dy.numel() == M * fout && dy.dtype() == w.dtype(),
           "linear backward got dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()));
  Tensor dx = Tensor::empty(sv.input.shape(), dy.dtype());
  if (dy.dtype() == DType::F32)
    cpu::linear_backward_data<float>(M, fin, fout, dy.data<float>(), w.data<float>(), dx.data<float>());
  else
    cpu::linear_backward_data<double>(M, fin, fout, dy.data<double>(), w.data<double>(), dx.data<double>());
  if (tp_mode(param(0), ctx) == TpMode::Colwise) ctx.tp->all_reduce_sum(dx);
  sv.dy = dy;  // a reference (no copy): W reads it, or we do it now
  if (!ctx.split_wgrad) backward_weight_cpu(ctx);
  return dx;
}

void Linear::backward_weight_cpu(Ctx& ctx) {
  auto& slots = slots_of(impl_);
  Saved& sv = slots.get(ctx.slot);
  SM_CHECK(sv.dy.defined(), "linear backward_weight without a kept dy (B not run with split_wgrad?)");
  const Tensor x = sv.input.restore();  // [T, N, ..., Fin]
  Param& w = param(0);
  const int64_t fout = w.value.dim(0), fin = w.value.dim(1), M = x.numel() / fin;
  Param* b = cfg_.bias ? &param(1) : nullptr;
  if (x.dtype() == DType::F32)
    cpu::linear_backward_weights<float>(M, fin, fout, x.data<float>(), sv.dy.data<float>(),
                                        w.grad.data<float>(), b ? b->grad.data<float>() : nullptr);
  else
    cpu::linear_backward_weights<double>(M, fin, fout, x.data<double>(), sv.dy.data<double>(),
                                         w.grad.data<double>(), b ? b->grad.data<double>() : nullptr);
  slots.release(ctx.slot);
}

}  // namespace sm
