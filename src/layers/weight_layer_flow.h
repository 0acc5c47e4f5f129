// weight_layer_flow.h — WeightLayer's forward / B / W flow, written once for both devices
// (layers/weight_layer.h) and instantiated with the device's kernels in weight_layer.cpp and
// weight_layer_cuda.cpp. A Dev provides:
//   using Act                         how an input is kept (SavedActivation / DeviceSaved)
//   static constexpr bool kKernelAddsBias
//   SlotStore<WeightSaved<Act>>& slots()
//   void check(const Tensor& x, const Tensor& w, const std::string& what)   dtypes, devices
//   void forward(KernelFamily, const Geometry&, const Tensor& x, const Tensor& w,
//                const Tensor* bias, Tensor& y)
//   void backward_data(KernelFamily, const Geometry&, const Tensor& dy, const Tensor& w, Tensor& dx)
//   void backward_weights(KernelFamily, const Geometry&, const Tensor& x, const Tensor& dy,
//                         Param& w, Param* b)                               accumulate (+=)
// Invariant: a slot exists from forward until W (or B without the split) releases it.
#pragma once
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/memopt_probe.h"
#include "spikemesh/layers/sequence_parallel.h"
#include "spikemesh/layers/slot_store.h"
#include "spikemesh/layers/tensor_parallel.h"
#include "spikemesh/layers/weight_layer.h"

namespace sm {

template <class Act>
struct WeightSaved {
  Act input;                 // [T, N, ...] the forward's input (bits for spikes); this rank's
                             // samples [T, N/tp, ...] when rows_only (re-gathered for W)
  bool rows_only = false;    // a colwise layer after a sample-sharded region (sequence_parallel.h)
  Shape shape;               // the whole input's shape
  DType dtype = DType::F32;  // the input's dtype (dy's must match)
  Tensor dy;                 // the output's gradient, kept between split B and W
};

inline ChannelLayout channel_layout(const cpu::Conv2dGeometry& g) {
  return {g.batch, g.out_channels, g.out_height() * g.out_width()};
}

template <class Dev>
Tensor WeightLayer::forward_on(Dev& dev, const Tensor& x, Ctx& ctx) {
  const Param& w = param(0);  // [Cout_local, Cin_local, ...]
  check_input(x);
  dev.check(x, w.value, type());
  const cpu::Conv2dGeometry g = geometry(x.shape());
  TpForward tp = tp_forward_plan(w, bias_param(), ctx, Dev::kKernelAddsBias);
  Tensor y;
  if (sp_.role == SpRole::Start && sp_.sharded(ctx.slot)) {
    // A sample-sharded region follows (layers/sequence_parallel.h): one time step at a time,
    // the step's partial sums [1, N, Cout, ...] reduce-scattered into this rank's samples, so
    // no whole [T, N, Cout, ...] output ever exists here.
    const int p = ctx.tp->size();
    Shape x1 = x.shape();
    x1[0] = 1;
    const cpu::Conv2dGeometry g1 = geometry(x1);
    Shape ys = output_of(x.shape(), g);
    ys[1] /= p;
    y = Tensor::empty(ys, x.dtype(), x.device());                              // [T, N/tp, Cout, ...]
    Tensor part = Tensor::empty(output_of(x1, g1), x.dtype(), x.device());  // [1, N, Cout, ...]
    tp_debug_note(ctx, w, "forward", y.nbytes() * p, "reduce_scatter");
    for (int64_t t = 0; t < x.dim(0); ++t) {
      dev.forward(kernels(), g1, sp_step(x, t), w.value, nullptr, part);
      Tensor yt = sp_step(y, t).view({part.numel() / p});
      ctx.tp->reduce_scatter_sum(part.view({part.numel()}), yt);  // collective over tp
    }
    ChannelLayout layout = channel_layout(g);
    layout.outer /= p;
    if (tp.late_bias) add_channel_bias(y, *tp.late_bias, layout);  // once, after the reduction
  } else {
    y = Tensor::empty(output_of(x.shape(), g), x.dtype(), x.device());  // [T, N, Cout_local, ...]
    {
      ProbeWorkspace ws(x.device(), x.nbytes() + y.nbytes());  // memopt's search: the kernel's own workspace
      dev.forward(kernels(), g, x, w.value, tp.kernel_bias, y);
    }
    tp_finish_forward(tp, ctx, y, channel_layout(g));
    if (gather_output_)  // colwise/ag: [T, N, Cout, ...] (collective over tp)
      y = tp_gather_channels(ctx, w, y, gathered_shape(y.shape(), ctx.tp ? ctx.tp->size() : 1), channel_layout(g));
  }
  WeightSaved<typename Dev::Act>& sv = dev.slots().fresh(ctx.slot);
  // After a sample-sharded region the input was all-gathered: keep only this rank's samples
  // and gather them again for the weight gradient (the region's memory cut reaches this input).
  sv.rows_only = sp_.role == SpRole::DeferColwise && sp_.sharded(ctx.slot);
  sv.input = dev.save_input(sv.rows_only ? sp_rows_of(x, ctx.tp->rank(), ctx.tp->size()) : x);
  sv.shape = x.shape();
  sv.dtype = x.dtype();
  return y;
}

template <class Dev>
Tensor WeightLayer::backward_input_on(Dev& dev, const Tensor& dy_in, Ctx& ctx) {
  WeightSaved<typename Dev::Act>& sv = dev.slots().get(ctx.slot);
  Tensor dy = dy_in;
  if (sp_.role == SpRole::Start && sp_.sharded(ctx.slot)) {  // dy holds this rank's samples
    if (!ctx.split_wgrad) {
      // step by step: gather the step's gradient [1, N, Cout, ...], its input gradient and its
      // weight gradient (accumulated), so no whole [T, N, Cout, ...] gradient exists here
      const Tensor x = sv.input.restore();  // [T, N, Cin_local, ...]
      Shape x1 = sv.shape;
      x1[0] = 1;
      const cpu::Conv2dGeometry g1 = geometry(x1);
      Tensor dx = Tensor::empty(sv.shape, dy.dtype(), dy.device());  // [T, N, Cin_local, ...]
      for (int64_t t = 0; t < dx.dim(0); ++t) {
        const Tensor dyt = sp_all_gather_rows(sp_step(dy, t), *ctx.tp);  // collective over tp
        Tensor dxt = sp_step(dx, t);
        dev.backward_data(kernels(), g1, dyt, param(0).value, dxt);
        dev.backward_weights(kernels(), g1, sp_step(x, t), dyt, param(0), bias_param());
      }
      dev.slots().release(ctx.slot);
      return dx;
    }
    dy = sp_all_gather_rows(dy, *ctx.tp);  // W later needs it whole (collective over tp)
  }
  const cpu::Conv2dGeometry g = geometry(sv.shape);
  if (gather_output_) dy = tp_channel_block(ctx, dy, output_of(sv.shape, g), channel_layout(g));  // [T, N, Cout_local, ...]
  SM_CHECK(dy.numel() == g.output_numel() && dy.dtype() == sv.dtype,
           type() << " backward got dy " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype()) << " on "
                  << dy.device().str());
  Tensor dx;  // [T, N, Cin_local, ...]; none for the model's input (ctx.input_grad_unused)
  if (!ctx.input_grad_unused || tp_mode(param(0), ctx) == TpMode::Colwise) {
    dx = Tensor::empty(sv.shape, dy.dtype(), dy.device());
    {
      ProbeWorkspace ws(dy.device(), dy.nbytes() + dx.nbytes());
      dev.backward_data(kernels(), g, dy, param(0).value, dx);
    }
    tp_finish_backward_input(param(0), ctx, dx, sp_.role == SpRole::DeferColwise && sp_.sharded(ctx.slot));
  }
  sv.dy = dy;  // a reference (no copy): W reads it, or we do it now
  if (!ctx.split_wgrad) backward_weight_on(dev, ctx);
  return dx;
}

template <class Dev>
void WeightLayer::backward_weight_on(Dev& dev, Ctx& ctx) {
  WeightSaved<typename Dev::Act>& sv = dev.slots().get(ctx.slot);
  SM_CHECK(sv.dy.defined(), type() << " backward_weight without a kept dy (B not run with split_wgrad?)");
  if (!sv.rows_only) {  // from what was kept (the CPU reads a spike input's bits)
    ProbeWorkspace ws(sv.dy.device(), static_cast<size_t>(shape_numel(sv.shape)) * dtype_size(sv.dtype) + sv.dy.nbytes());
    dev.backward_weights_saved(kernels(), geometry(sv.shape), sv.input, sv.dy, param(0), bias_param());
    dev.slots().release(ctx.slot);
    return;
  }
  Tensor x = sp_all_gather_rows(sv.input.restore(), *ctx.tp);  // [T, N, Cin_local, ...]; collective over tp
  {
    ProbeWorkspace ws(x.device(), x.nbytes() + sv.dy.nbytes());
    dev.backward_weights(kernels(), geometry(x.shape()), x, sv.dy, param(0), bias_param());
  }
  dev.slots().release(ctx.slot);
}

}  // namespace sm
