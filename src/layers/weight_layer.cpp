// weight_layer.cpp — WeightLayer's CPU hooks: the flow of weight_layer_flow.h with the CPU
// kernels (kernels/cpu/conv.h, gemm.h): float through oneDNN, double through the own
// deterministic kernels. The input is kept as a SavedActivation (bits for spikes); the
// forward kernel adds the bias itself unless the rowwise reduction must come first.
#include "spikemesh/core/bitpack.h"
#include "spikemesh/kernels/cpu/gemm.h"
#include "weight_layer_flow.h"

namespace sm {
namespace {

using Family = WeightLayer::KernelFamily;
using Geometry = cpu::Conv2dGeometry;

// Calls f(T{}) with T = float or double for dt.
template <typename F>
void dispatch_real(DType dt, F&& f) {
  if (dt == DType::F32)
    f(float{});
  else
    f(double{});
}

template <typename T>
const T* data_or_null(const Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

struct CpuKernels {
  using Act = SavedActivation;
  static constexpr bool kKernelAddsBias = true;
  SlotStore<WeightSaved<Act>>& store;

  SlotStore<WeightSaved<Act>>& slots() { return store; }

  void check(const Tensor& x, const Tensor& w, const std::string& what) {
    SM_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64,
             what << " supports f32/f64, got " << dtype_name(x.dtype()));
    SM_CHECK(w.dtype() == x.dtype(), what << " weight is " << dtype_name(w.dtype()) << ", input is "
                                           << dtype_name(x.dtype()));
  }

  void forward(Family k, const Geometry& g, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
    dispatch_real(x.dtype(), [&](auto t) {
      using T = decltype(t);
      const T *px = x.data<T>(), *pw = w.data<T>(), *pb = data_or_null<T>(bias);
      T* py = y.data<T>();
      if (k == Family::Conv) cpu::conv2d_forward<T>(g, px, pw, pb, py);
      if (k == Family::Conv1x1)
        cpu::conv1x1_forward<T>(g.batch, g.in_channels, g.out_channels, g.height, px, pw, pb, py);
      if (k == Family::Matmul) cpu::linear_forward<T>(g.batch, g.in_channels, g.out_channels, px, pw, pb, py);
    });
  }

  void backward_data(Family k, const Geometry& g, const Tensor& dy, const Tensor& w, Tensor& dx) {
    dispatch_real(dy.dtype(), [&](auto t) {
      using T = decltype(t);
      const T *pdy = dy.data<T>(), *pw = w.data<T>();
      T* pdx = dx.data<T>();
      if (k == Family::Conv) cpu::conv2d_backward_data<T>(g, pdy, pw, pdx);
      if (k == Family::Conv1x1)
        cpu::conv1x1_backward_data<T>(g.batch, g.in_channels, g.out_channels, g.height, pdy, pw, pdx);
      if (k == Family::Matmul) cpu::linear_backward_data<T>(g.batch, g.in_channels, g.out_channels, pdy, pw, pdx);
    });
  }

  void backward_weights(Family k, const Geometry& g, const Tensor& x, const Tensor& dy, Param& w, Param* b) {
    dispatch_real(x.dtype(), [&](auto t) {
      using T = decltype(t);
      const T *px = x.data<T>(), *pdy = dy.data<T>();
      T *pdw = w.grad.data<T>(), *pdb = b ? b->grad.data<T>() : nullptr;
      if (k == Family::Conv) cpu::conv2d_backward_weights<T>(g, px, pdy, pdw, pdb);
      if (k == Family::Conv1x1)
        cpu::conv1x1_backward_weights<T>(g.batch, g.in_channels, g.out_channels, g.height, px, pdy, pdw, pdb);
      if (k == Family::Matmul)
        cpu::linear_backward_weights<T>(g.batch, g.in_channels, g.out_channels, px, pdy, pdw, pdb);
    });
  }
};

CpuKernels cpu_kernels(std::shared_ptr<void>& impl) {
  if (!impl) impl = std::make_shared<SlotStore<WeightSaved<SavedActivation>>>();
  return CpuKernels{*static_cast<SlotStore<WeightSaved<SavedActivation>>*>(impl.get())};
}

}  // namespace

Shape WeightLayer::gathered_shape(Shape local, int tp) const {
  // channels: dim 2 of a convolution's [T, N, C, ...], the last dim of a linear's [..., F]
  local[kernels() == KernelFamily::Matmul ? local.size() - 1 : 2] *= tp;
  return local;
}

Tensor WeightLayer::forward_cpu(const Tensor& x, Ctx& ctx) {
  CpuKernels k = cpu_kernels(impl_);
  return forward_on(k, x, ctx);
}

Tensor WeightLayer::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  CpuKernels k = cpu_kernels(impl_);
  return backward_input_on(k, dy, ctx);
}

void WeightLayer::backward_weight_cpu(Ctx& ctx) {
  CpuKernels k = cpu_kernels(impl_);
  backward_weight_on(k, ctx);
}

}  // namespace sm
