// conv1d_cuda.cpp — Conv1d's CUDA hooks: the 1×1 convolution over channels of tokens
// [T·N, Cin, L] runs as a cuDNN 2-D convolution of [T·N, Cin, L, 1] with a 1×1 kernel
// (kernels/cuda/conv_cudnn.h; the weight [Cout, Cin, 1] is the filter [Cout, Cin, 1, 1]), plus
// the bias epilogues of gemm_cublas.h.
// Same contract as conv1d.cpp (slots, split B/W, tensor parallelism); activations f32,
// bf16 or f16, master weight and gradients f32. For bf16/f16 the forward and backward use a
// compute copy of the weight in the activation dtype; the weight gradient is computed in the
// activation dtype (cuDNN's filter gradient has the data's type) and added to the f32
// master gradient; the bias gradient is summed in double straight into the f32 gradient.
#ifdef SPIKEMESH_HAVE_CUDA
#include "cuda_layer_util.h"
#include "spikemesh/kernels/cuda/conv_cudnn.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct CudaSaved {
  cuda_layer::DeviceSaved input;  // [T, N, Cin, L] (bits for spikes)
  Tensor dy;                      // [T, N, Cout, L], kept between split B and W
};

struct CudaImpl {
  SlotStore<CudaSaved> slots;
  Tensor weight_copy;  // [Cout, Cin, 1] in the activation dtype (bf16/f16 runs)
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

// [T, N, Cin, L] with weight [Cout, Cin, 1] as a 2-D convolution of [T·N, Cin, L, 1].
cpu::Conv2dGeometry geometry(const Shape& x, const Tensor& weight) {
  cpu::Conv2dGeometry g;
  g.batch = x[0] * x[1];
  g.in_channels = x[2];
  g.height = x[3];
  g.width = 1;
  g.out_channels = weight.dim(0);
  g.kernel = 1;
  g.stride = 1;
  g.padding = 0;
  return g;
}

}  // namespace

Tensor Conv1d::forward_cuda(const Tensor& x, Ctx& ctx) {
  const Tensor& w = param(0).value;  // [Cout_local, Cin_local, 1] f32
  if (x.ndim() != 4) SM_INPUT_ERROR("conv1d expects input [T, N, C, L], got " << shape_str(x.shape()));
  if (x.dim(2) != w.dim(1))
    SM_INPUT_ERROR("conv1d expects " << w.dim(1) << " input channels, got " << x.dim(2));
  cuda_layer::check_activation(x, "conv1d", name());
  cuda_layer::check_master(w, x, "conv1d", name());
  CudaAllocLabel label("conv1d forward", &name_);
  const cpu::Conv2dGeometry g = geometry(x.shape(), w);
  CudaImpl& im = impl(cuda_impl_);
  const DType dt = x.dtype();
  const Tensor& wc = cuda_layer::compute_weight(w, dt, im.weight_copy);
  Tensor y = Tensor::empty({x.dim(0), x.dim(1), g.out_channels, g.height}, dt, x.device());  // [T, N, Cout, L]
  cuda::conv2d_forward_cudnn(x.device().ordinal, g, dt, x.raw(), wc.raw(), y.raw());
  const TpMode tp = tp_mode(param(0), ctx);
  if (tp == TpMode::Rowwise) ctx.tp->all_reduce_sum(y);  // partial sums over the input-channel shards
  if (cfg_.bias)  // after the reduction, so it is added once
    cuda::add_channel_bias(y.raw(), dt, param(1).value.raw(), DType::F32, g.batch, g.out_channels, g.height,
                           cuda_layer::stream_of(y));
  CudaSaved& sv = im.slots.fresh(ctx.slot);
  sv.input = cuda_layer::DeviceSaved::save(x);
  return y;
}

Tensor Conv1d::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& sv = im.slots.get(ctx.slot);
  const Tensor& w = param(0).value;
  const cpu::Conv2dGeometry g = geometry(sv.input.shape(), w);
  SM_CHECK(dy.numel() == g.output_numel() && dy.dtype() == sv.input.dtype() && dy.device().is_cuda(),
           "conv1d backward got dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()) << " on "
                                     << dy.device().str());
  CudaAllocLabel label("conv1d backward", &name_);
  const DType dt = dy.dtype();
  const Tensor& wc = cuda_layer::compute_weight(w, dt, im.weight_copy);
  Tensor dx = Tensor::empty(sv.input.shape(), dt, dy.device());  // [T, N, Cin, L]
  cuda::conv2d_backward_data_cudnn(dy.device().ordinal, g, dt, dy.raw(), wc.raw(), dx.raw());
  if (tp_mode(param(0), ctx) == TpMode::Colwise) ctx.tp->all_reduce_sum(dx);
  sv.dy = dy;  // a reference: W reads it, or we do it now
  if (!ctx.split_wgrad) backward_weight_cuda(ctx);
  return dx;
}

void Conv1d::backward_weight_cuda(Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& sv = im.slots.get(ctx.slot);
  SM_CHECK(sv.dy.defined(), "conv1d backward_weight without a kept dy (B not run with split_wgrad?)");
  CudaAllocLabel label("conv1d weight gradient", &name_);
  const Tensor x = sv.input.restore();  // [T, N, Cin, L]
  Param& w = param(0);
  const cpu::Conv2dGeometry g = geometry(x.shape(), w.value);
  const DType dt = x.dtype();
  const int dev = x.device().ordinal;
  cudaStream_t s = cuda_layer::stream_of(x);
  if (dt == DType::F32) {
    cuda::conv2d_backward_filter_cudnn(dev, g, dt, x.raw(), sv.dy.raw(), w.grad.raw(), 1.0);  // accumulates
  } else {
    Tensor dw = Tensor::empty(w.value.shape(), dt, x.device());  // [Cout, Cin, 1] in dt
    cuda::conv2d_backward_filter_cudnn(dev, g, dt, x.raw(), sv.dy.raw(), dw.raw(), 0.0);
    cuda::accumulate(w.grad.raw(), DType::F32, dw.raw(), dt, dw.numel(), s);
  }
  if (cfg_.bias)
    cuda::channel_bias_grad(sv.dy.raw(), dt, g.batch, g.out_channels, g.height, param(1).grad.raw(), DType::F32, s);
  im.slots.release(ctx.slot);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
