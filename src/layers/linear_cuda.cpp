// linear_cuda.cpp — Linear's CUDA hooks: cuBLAS GEMMs on rows x [M, Fin] (M = all leading
// dims; kernels/cuda/gemm_cublas.h) plus the bias epilogues. Same contract as linear.cpp
// (slots, split B/W, tensor parallelism); activations f32, bf16 or f16 with f32
// accumulation, master weight and gradients f32. bf16/f16 runs use a compute copy of the
// weight in the activation dtype; the weight gradient GEMM writes f32 straight into the
// master gradient (beta = 1), the bias gradient is summed in double.
#ifdef SPIKEMESH_HAVE_CUDA
#include "cuda_layer_util.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/linear.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct CudaSaved {
  cuda_layer::DeviceSaved input;  // [T, N, ..., Fin] (bits for spikes)
  Tensor dy;                      // [T, N, ..., Fout], kept between split B and W
};

struct CudaImpl {
  SlotStore<CudaSaved> slots;
  Tensor weight_copy;  // [Fout, Fin] in the activation dtype (bf16/f16 runs)
};

CudaImpl& impl(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<CudaImpl>();
  return *static_cast<CudaImpl*>(p.get());
}

enum class TpMode { None, Colwise, Rowwise };

TpMode tp_mode(const Param& weight, const Ctx& ctx) {
  const auto g = weight.shard.group;
  if (!ctx.tp || !weight.shard.sharded() || (g != ShardSpec::Group::TP && g != ShardSpec::Group::TPxDP))
    return TpMode::None;
  return weight.shard.dim == 0 ? TpMode::Colwise : TpMode::Rowwise;
}

}  // namespace

Tensor Linear::forward_cuda(const Tensor& x, Ctx& ctx) {
  const Tensor& w = param(0).value;  // [Fout_local, Fin_local] f32
  const int64_t fout = w.dim(0), fin = w.dim(1);
  if (x.ndim() < 3) SM_INPUT_ERROR("linear expects input [T, N, ..., F], got " << shape_str(x.shape()));
  if (x.dim(-1) != fin) SM_INPUT_ERROR("linear expects " << fin << " input features, got " << x.dim(-1));
  cuda_layer::check_activation(x, "linear", name());
  cuda_layer::check_master(w, x, "linear", name());
  CudaAllocLabel label("linear forward", &name_);
  CudaImpl& im = impl(cuda_impl_);
  const DType dt = x.dtype();
  const int64_t M = x.numel() / fin;
  const Tensor& wc = cuda_layer::compute_weight(w, dt, im.weight_copy);
  Shape out_shape = x.shape();
  out_shape.back() = fout;
  Tensor y = Tensor::empty(out_shape, dt, x.device());  // [T, N, ..., Fout]
  cuda::linear_forward(x.device().ordinal, M, fin, fout, x.raw(), wc.raw(), y.raw(), dt);
  if (tp_mode(param(0), ctx) == TpMode::Rowwise) ctx.tp->all_reduce_sum(y);  // partial sums over Fin shards
  if (cfg_.bias)  // after the reduction, so it is added once
    cuda::add_channel_bias(y.raw(), dt, param(1).value.raw(), DType::F32, M, fout, 1, cuda_layer::stream_of(y));
  CudaSaved& sv = im.slots.fresh(ctx.slot);
  sv.input = cuda_layer::DeviceSaved::save(x);
  return y;
}

Tensor Linear::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& sv = im.slots.get(ctx.slot);
  const Tensor& w = param(0).value;
  const int64_t fout = w.dim(0), fin = w.dim(1);
  const int64_t M = shape_numel(sv.input.shape()) / fin;
  SM_CHECK(dy.numel() == M * fout && dy.dtype() == sv.input.dtype() && dy.device().is_cuda(),
           "linear backward got dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()) << " on "
                                     << dy.device().str());
  CudaAllocLabel label("linear backward", &name_);
  const DType dt = dy.dtype();
  const Tensor& wc = cuda_layer::compute_weight(w, dt, im.weight_copy);
  Tensor dx = Tensor::empty(sv.input.shape(), dt, dy.device());  // [T, N, ..., Fin]
  cuda::linear_backward_data(dy.device().ordinal, M, fin, fout, dy.raw(), wc.raw(), dx.raw(), dt);
  if (tp_mode(param(0), ctx) == TpMode::Colwise) ctx.tp->all_reduce_sum(dx);
  sv.dy = dy;  // a reference: W reads it, or we do it now
  if (!ctx.split_wgrad) backward_weight_cuda(ctx);
  return dx;
}

void Linear::backward_weight_cuda(Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& sv = im.slots.get(ctx.slot);
  SM_CHECK(sv.dy.defined(), "linear backward_weight without a kept dy (B not run with split_wgrad?)");
  CudaAllocLabel label("linear weight gradient", &name_);
  const Tensor x = sv.input.restore();  // [T, N, ..., Fin]
  Param& w = param(0);
  const int64_t fout = w.value.dim(0), fin = w.value.dim(1), M = x.numel() / fin;
  const DType dt = x.dtype();
  // dW [Fout, Fin] += dyᵀ·x, accumulated in f32 straight into the master gradient.
  cuda::linear_backward_weight(x.device().ordinal, M, fin, fout, x.raw(), sv.dy.raw(), dt, w.grad.raw(), DType::F32,
                               1.0);
  if (cfg_.bias)
    cuda::channel_bias_grad(sv.dy.raw(), dt, M, fout, 1, param(1).grad.raw(), DType::F32, cuda_layer::stream_of(x));
  im.slots.release(ctx.slot);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
