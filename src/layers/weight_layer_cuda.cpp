// weight_layer_cuda.cpp — WeightLayer's CUDA hooks: the flow of weight_layer_flow.h with
// cuDNN convolutions (Conv, Conv1x1: kernels/cuda/conv_cudnn.h) or cuBLAS GEMMs (Matmul:
// kernels/cuda/gemm_cublas.h) and the bias epilogues of gemm_cublas.h. Activations f32, bf16
// or f16; master weight and gradients f32. bf16/f16 runs use a compute copy of the weight in
// the activation dtype. Weight gradients: the GEMM writes f32 straight into the master
// gradient (beta = 1); cuDNN's filter gradient has the data's type, so bf16/f16 runs compute
// it in that type and add it to the f32 master gradient. Bias gradients are summed in double
// straight into the f32 gradient. The bias is always added after the (rowwise) reduction.
#ifdef SPIKEMESH_HAVE_CUDA
#include "layer_util_cuda.h"
#include "spikemesh/kernels/cuda/conv_cudnn.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#include "weight_layer_flow.h"

namespace sm {
namespace {

using Family = WeightLayer::KernelFamily;
using Geometry = cpu::Conv2dGeometry;

struct CudaImpl {
  SlotStore<WeightSaved<cuda_layer::DeviceSaved>> slots;
  Tensor weight_copy;  // the weight in the activation dtype (bf16/f16 runs)
};

struct CudaKernels {
  using Act = cuda_layer::DeviceSaved;
  static constexpr bool kKernelAddsBias = false;
  CudaImpl& im;
  const std::string& name;

  SlotStore<WeightSaved<Act>>& slots() { return im.slots; }
  Act save_input(const Tensor& x) { return Act::save(x); }

  void check(const Tensor& x, const Tensor& w, const std::string& what) {
    cuda_layer::check_activation(x, what.c_str(), name);
    cuda_layer::check_master(w, x, what.c_str(), name);
  }

  // forward: out = in ⊛ w; else (backward data): out = in ⊛ wᵀ — in the activation dtype.
  void data_pass(bool forward, Family k, const Geometry& g, const Tensor& in, const Tensor& w, Tensor& out) {
    const DType dt = in.dtype();
    const Tensor& wc = cuda_layer::compute_weight(w, dt, im.weight_copy);
    const int dev = in.device().ordinal;
    if (k == Family::Matmul)
      (forward ? cuda::linear_forward : cuda::linear_backward_data)(dev, g.batch, g.in_channels, g.out_channels,
                                                                    in.raw(), wc.raw(), out.raw(), dt, {});
    else
      (forward ? cuda::conv2d_forward_cudnn : cuda::conv2d_backward_data_cudnn)(dev, g, dt, in.raw(), wc.raw(),
                                                                                out.raw(),
                                                                                cuda::default_conv_options());
  }
  void forward(Family k, const Geometry& g, const Tensor& x, const Tensor& w, const Tensor*, Tensor& y) {
    data_pass(true, k, g, x, w, y);  // the bias follows in tp_finish_forward
  }
  void backward_data(Family k, const Geometry& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
    data_pass(false, k, g, dy, w, dx);
  }

  void backward_weights_saved(Family k, const Geometry& g, const Act& in, const Tensor& dy, Param& w, Param* b) {
    backward_weights(k, g, in.restore(), dy, w, b);
  }
  void backward_weights(Family k, const Geometry& g, const Tensor& x, const Tensor& dy, Param& w, Param* b) {
    const DType dt = x.dtype();
    const int dev = x.device().ordinal;
    cudaStream_t s = cuda_layer::stream_of(x);
    if (k == Family::Matmul) {  // dW [Fout, Fin] += dyᵀ·x in f32
      cuda::linear_backward_weight(dev, g.batch, g.in_channels, g.out_channels, x.raw(), dy.raw(), dt, w.grad.raw(),
                                   DType::F32, 1.0);
    } else if (dt == DType::F32) {
      cuda::conv2d_backward_filter_cudnn(dev, g, dt, x.raw(), dy.raw(), w.grad.raw(), 1.0,
                                         cuda::default_conv_options());  // accumulates
    } else {
      Tensor dw = Tensor::empty(w.value.shape(), dt, x.device());  // [Cout, Cin, ...] in dt
      cuda::conv2d_backward_filter_cudnn(dev, g, dt, x.raw(), dy.raw(), dw.raw(), 0.0, cuda::default_conv_options());
      cuda::accumulate(w.grad.raw(), DType::F32, dw.raw(), dt, dw.numel(), s);
    }
    if (b) {
      const ChannelLayout l = channel_layout(g);
      cuda::channel_bias_grad(dy.raw(), dt, l.outer, l.channels, l.inner, b->grad.raw(), DType::F32, s);
    }
  }
};

CudaKernels cuda_kernels(std::shared_ptr<void>& impl, const std::string& name) {
  if (!impl) impl = std::make_shared<CudaImpl>();
  return CudaKernels{*static_cast<CudaImpl*>(impl.get()), name};
}

}  // namespace

Tensor WeightLayer::forward_cuda(const Tensor& x, Ctx& ctx) {
  const std::string what = type() + " forward";
  CudaAllocLabel label(what.c_str(), &name_);
  CudaKernels k = cuda_kernels(cuda_impl_, name_);
  return forward_on(k, x, ctx);
}

Tensor WeightLayer::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  const std::string what = type() + " backward";
  CudaAllocLabel label(what.c_str(), &name_);
  CudaKernels k = cuda_kernels(cuda_impl_, name_);
  return backward_input_on(k, dy, ctx);
}

void WeightLayer::backward_weight_cuda(Ctx& ctx) {
  const std::string what = type() + " weight gradient";
  CudaAllocLabel label(what.c_str(), &name_);
  CudaKernels k = cuda_kernels(cuda_impl_, name_);
  backward_weight_on(k, ctx);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
