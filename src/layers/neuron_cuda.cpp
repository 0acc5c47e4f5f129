// neuron_cuda.cpp — the LIF / PLIF / IF layer's CUDA hooks: the flow of neuron_flow.h over
// the fused kernels of kernels/cuda/neuron.h (the CPU f32 kernel's arithmetic bit for bit;
// membrane f32 whatever the activation dtype). The backward kernel reads a spike input's
// packed bits directly. A training forward also writes its spikes' bits in the same pass and
// records them (core/spike_bits_cache.h): the next layer that keeps the spikes for backward
// (a convolution, a linear, a neuron) takes them instead of packing again. The CUDA path
// keeps its own membrane and firing counter (device i64, one slot of a pool that a report
// reads with one copy per device: firing_counters_cuda.h);
// Neuron::reset_state / collect_stats reach them through neuron_cuda_reset / _stats.
// Fused after a batch norm (forward_normalized_cuda, layers/fused_epilogue.h) the kernels read
// the unnormalised x through batch norm's per-channel apply and the slot keeps that apply.
// PLIF reads w on the host at forward time (one synchronisation) and adds its gradient to
// w.grad on the device (by W when split). PLIF refuses a CUDA graph capture (that read).
#ifdef SPIKEMESH_HAVE_CUDA
#include "firing_counters_cuda.h"
#include "layer_util_cuda.h"
#include "neuron_flow.h"
#include "spikemesh/core/graph_capture_cuda.h"
#include "spikemesh/core/spike_bits_cache.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#include "spikemesh/kernels/cuda/neuron.h"

namespace sm {
namespace {

struct CudaNeuron {
  using Act = cuda_layer::DeviceSaved;
  using Count = Tensor;  // device i64 [1]
  using GradR = Tensor;  // device f64 [1]
  NeuronState<CudaNeuron>& st;
  const std::string& name;
  bool emit_bits = false;  // training: write the spikes' bits for the layers that keep them
  const cuda::NeuronAffineCuda* affine = nullptr;  // forward: the fused batch norm's apply, if any

  NeuronState<CudaNeuron>& state() { return st; }
  static DType membrane_dtype(DType) { return DType::F32; }
  // A pooled counter (the layer's own) is read through the pool's mirror: one copy per device
  // per report (firing_counters_cuda.h); any other synchronises on its own.
  static double count(const Count& c) {
    int64_t v = 0;
    if (firing_counter_read(c, v)) return static_cast<double>(v);
    return c.defined() ? c.item() : 0.0;
  }
  static void add_count(Count& total, const Count& more) {  // memopt pieces; synchronises
    Tensor host = Tensor::empty({1}, DType::I64);
    host.data<int64_t>()[0] = static_cast<int64_t>(count(total) + count(more));
    if (total.defined() && total.device() == more.device()) {
      total.copy_from(host);  // stays the layer's pooled slot
      firing_counters_written(total.device());
    } else {
      total = host.to(more.device());
    }
  }

  void check(const Tensor& x, const Param* w) {
    if (w) cuda_layer::check_master(w->value, x, "plif", name);
    if (w && active_graph_capture())  // sigmoid(w) would be frozen into the graph
      refuse_graph_capture("plif '" + name + "' reads its w on the host every forward");
  }

  void forward(const cpu::NeuronKernelConfig& kc, const Tensor& x, int64_t steps, int64_t M, Tensor& v, Tensor& y,
               Count& fired) {
    if (!fired.defined() || fired.device() != x.device())  // the layer's own counter lives in the pool
      fired = &fired == &this->st.fired ? firing_counter_slot(x.device()) : Tensor::empty({1}, DType::I64, x.device());
    cudaStream_t st = cuda_layer::stream_of(x);
    Tensor bits;  // [spike_words(T·M)] uint32 words, found again by the next layer's save
    if (emit_bits && !kc.smooth && steps * M > 0)
      bits = Tensor::empty({cuda::spike_words(steps * M)}, DType::I32, x.device());
    uint32_t* words = bits.defined() ? static_cast<uint32_t*>(bits.raw()) : nullptr;
    cuda_layer::dispatch_activation(x.dtype(), "neuron", [&](auto t) {
      using T = decltype(t);
      cuda::neuron_forward_cuda<T>(kc, static_cast<const T*>(x.raw()), steps, M, v.data<float>(),
                                   static_cast<T*>(y.raw()), words, fired.data<int64_t>(), st, affine);
    });
    if (bits.defined()) spike_bits_remember(y, bits);
    firing_counters_written(x.device());
  }

  void backward(const cpu::NeuronKernelConfig& kc, const Tensor& dy, const NeuronSaved<CudaNeuron>& s, int64_t steps,
                int64_t M, Tensor& dx, GradR* grad_r, const Tensor* gv_in, Tensor* gv_out) {
    if (grad_r) *grad_r = Tensor::empty({1}, DType::F64, dy.device());
    const Tensor x = s.x.packed() ? Tensor() : s.x.restore();  // the forward's input when not bits
    const uint32_t* x_bits = s.x.packed() ? s.x.bits() : nullptr;
    const float* v_init = s.v_init.defined() ? s.v_init.data<float>() : nullptr;
    double* gr = grad_r ? grad_r->data<double>() : nullptr;
    const cuda::NeuronAffineCuda* in = s.device_affine ? &s.device_affine->kernel : nullptr;
    cudaStream_t st = cuda_layer::stream_of(dy);
    cuda_layer::dispatch_activation(dy.dtype(), "neuron", [&](auto t) {
      using T = decltype(t);
      cuda::neuron_backward_cuda<T>(kc, static_cast<const T*>(dy.raw()),
                                    x.defined() ? static_cast<const T*>(x.raw()) : nullptr, x_bits, v_init, steps, M,
                                    static_cast<T*>(dx.raw()), gr, st, gv_in ? gv_in->data<float>() : nullptr,
                                    gv_out ? gv_out->data<float>() : nullptr, in);
    });
  }

  // w.grad += grad_r · r(1 - r)   (dr/dw of r = sigmoid(w))
  void add_grad_w(Tensor& g, const GradR& grad_r, double r) {
    cuda::accumulate(g.raw(), DType::F32, grad_r.raw(), DType::F64, 1, cuda_layer::stream_of(grad_r), r * (1.0 - r));
  }
};

NeuronState<CudaNeuron>& cuda_state(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<NeuronState<CudaNeuron>>();
  return *static_cast<NeuronState<CudaNeuron>*>(p.get());
}

}  // namespace

void neuron_cuda_reset(std::shared_ptr<void>& cuda_state_ptr) {
  if (!cuda_state_ptr) return;
  cuda_state(cuda_state_ptr).at_rest = true;
  cuda_state(cuda_state_ptr).grad_v = Tensor();
}

Tensor neuron_cuda_membrane(std::shared_ptr<void>& cuda_state_ptr) { return membrane_of(cuda_state(cuda_state_ptr)); }

void neuron_cuda_set_membrane(std::shared_ptr<void>& cuda_state_ptr, const Tensor& v) {
  set_membrane_of(cuda_state(cuda_state_ptr), v);
}

void neuron_cuda_clear_time_grad(std::shared_ptr<void>& cuda_state_ptr) {
  if (cuda_state_ptr) cuda_state(cuda_state_ptr).grad_v = Tensor();
}

void neuron_cuda_stats(const std::shared_ptr<void>& cuda_state_ptr, const std::string& name,
                       std::vector<LayerStat>& out) {
  if (cuda_state_ptr) neuron_report(*static_cast<const NeuronState<CudaNeuron>*>(cuda_state_ptr.get()), name, out);
}

Tensor Neuron::forward_cuda(const Tensor& x, Ctx& ctx) {
  CudaAllocLabel label("neuron forward", &name_);
  CudaNeuron dev{cuda_state(cuda_impl_), name_};
  dev.emit_bits = ctx.training;
  return forward_on(dev, x, ctx);
}

Tensor Neuron::forward_normalized_cuda(const Tensor& x, std::shared_ptr<const cuda_layer::FusedBnApply> in, Ctx& ctx) {
  SM_CHECK(x.device().is_cuda() && in, type() << " '" << name() << "': the fused normalisation needs a CUDA input");
  CudaAllocLabel label("neuron forward (fused batch norm)", &name_);
  last_device_ = x.device();
  CudaNeuron dev{cuda_state(cuda_impl_), name_};
  dev.emit_bits = ctx.training;
  dev.affine = &in->kernel;
  Tensor y = forward_on(dev, x, ctx);
  cuda_state(cuda_impl_).slots.get(ctx.slot).device_affine = std::move(in);
  return y;
}

Tensor Neuron::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaAllocLabel label("neuron backward", &name_);
  CudaNeuron dev{cuda_state(cuda_impl_), name_};
  return backward_input_on(dev, dy, ctx);
}

void Neuron::backward_weight_cuda(Ctx& ctx) {
  CudaNeuron dev{cuda_state(cuda_impl_), name_};
  backward_weight_on(dev, ctx);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
