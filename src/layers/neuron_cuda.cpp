// neuron_cuda.cpp — the LIF / PLIF / IF layer's CUDA hooks over the fused kernels of
// kernels/cuda/neuron.h (the CPU f32 kernel's arithmetic bit for bit; membrane f32 whatever
// the activation dtype). Same contract as neuron.cpp: per slot only the input (bits for
// spikes — the backward kernel reads the packed words directly) and, when the forward did
// not start at rest, the initial membrane; backward recomputes h_t. The CUDA path keeps its
// own membrane and firing counters: reset_cuda_state() (called by Unit::reset_state) marks
// it at rest, collect_cuda_stats() reports the firing rate (one synchronisation).
// PLIF reads w on the host at forward time (one synchronisation) and adds its gradient to
// w.grad on the device (by W when split).
#ifdef SPIKEMESH_HAVE_CUDA
#include <cmath>

#include "cuda_layer_util.h"
#include "spikemesh/kernels/cuda/gemm_cublas.h"
#include "spikemesh/kernels/cuda/neuron.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

struct CudaSaved {
  cuda_layer::DeviceSaved x;  // [T, N, ...] the forward's input (reference, or bits for spikes)
  Tensor v_init;              // f32 [M] when the forward started away from rest
  Shape shape;                // shape of x (and y)
  DType dtype = DType::F32;   // dtype of x (and y)
  double r = 0.0;             // decay rate used by the forward
  bool smooth = false;
  bool has_grad_w = false;    // split: B computed d(loss)/dr into grad_r, W adds it
  Tensor grad_r;              // device double [1] (PLIF)
};

struct CudaImpl {
  SlotStore<CudaSaved> slots;
  Tensor v;             // f32 [M] membrane after the last forward
  bool at_rest = true;  // the next forward starts at rest
  Tensor fired;         // device i64 [1]: step firings of the last forward
  int64_t seen = 0;     // T·N·features of the last forward
};

CudaImpl& impl(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<CudaImpl>();
  return *static_cast<CudaImpl*>(p.get());
}

double sigmoid(double w) { return 1.0 / (1.0 + std::exp(-w)); }

// The kernel's view of a configuration at decay rate r (as neuron.cpp builds it).
cpu::NeuronKernelConfig kernel_config(const NeuronConfig& c, double r, bool smooth) {
  cpu::NeuronKernelConfig kc;
  kc.r = r;
  kc.decay_input = c.kind == NeuronKind::IF ? false : c.decay_input;
  kc.v_threshold = c.v_threshold;
  kc.hard_reset = c.hard_reset;
  kc.v_reset = c.v_reset;
  kc.detach_reset = c.detach_reset;
  kc.surrogate = c.surrogate == SurrogateKind::Sigmoid ? cpu::SurrogateFn::Sigmoid : cpu::SurrogateFn::ATan;
  kc.alpha = c.alpha;
  kc.smooth = smooth;
  return kc;
}

}  // namespace

void Neuron::reset_cuda_state() {
  if (cuda_impl_) impl(cuda_impl_).at_rest = true;
}

void Neuron::collect_cuda_stats(std::vector<LayerStat>& out) const {
  if (!cuda_impl_) return;
  const CudaImpl& im = *static_cast<const CudaImpl*>(cuda_impl_.get());
  if (im.seen > 0 && im.fired.defined())
    out.push_back({name(), "firing_rate", im.fired.item() / static_cast<double>(im.seen)});
}

Tensor Neuron::forward_cuda(const Tensor& x, Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  SM_CHECK(x.ndim() >= 2, type() << " '" << name() << "' expects [T, N, ...], got " << shape_str(x.shape()));
  cuda_layer::check_activation(x, type().c_str(), name());
  CudaAllocLabel label("neuron forward", &name_);
  const DType dt = x.dtype();
  const int64_t steps = x.dim(0), M = steps > 0 ? x.numel() / steps : 0;
  SM_CHECK(cfg_.kind != NeuronKind::PLIF || param(0).value.defined(),
           "plif '" << name() << "': parameter w is not bound (finalize the owning Unit first)");
  if (cfg_.kind == NeuronKind::PLIF) cuda_layer::check_master(param(0).value, x, "plif", name());
  const double r = cfg_.kind == NeuronKind::LIF    ? 1.0 / cfg_.tau
                   : cfg_.kind == NeuronKind::PLIF ? sigmoid(param(0).value.item())  // synchronises
                                                   : 0.0;
  const cpu::NeuronKernelConfig kc = kernel_config(cfg_, r, ctx.smooth_spikes);

  // Membrane state: continue from the last forward unless at rest.
  if (im.at_rest) {
    if (!im.v.defined() || im.v.numel() != M || im.v.device() != x.device())
      im.v = Tensor::empty({M}, DType::F32, x.device());
    im.v.fill(kc.rest());
  } else {
    SM_CHECK(im.v.numel() == M && im.v.device() == x.device(),
             type() << " '" << name() << "': input " << shape_str(x.shape()) << " does not continue the membrane of "
                    << "the previous forward (" << im.v.numel() << " neurons on " << im.v.device().str()
                    << "); call reset_state() first");
  }

  CudaSaved& s = im.slots.fresh(ctx.slot);
  s.shape = x.shape();
  s.r = kc.r;
  s.smooth = kc.smooth;
  s.dtype = dt;
  s.x = cuda_layer::DeviceSaved::save(x);
  if (!im.at_rest) s.v_init = im.v.clone();  // [M]
  if (!im.fired.defined() || im.fired.device() != x.device()) im.fired = Tensor::empty({1}, DType::I64, x.device());
  Tensor y = Tensor::empty(x.shape(), dt, x.device());  // [T, N, ...]
  cudaStream_t st = cuda_layer::stream_of(x);
  cuda_layer::dispatch_activation(dt, "neuron", [&](auto t) {
    using T = decltype(t);
    cuda::neuron_forward_cuda<T>(kc, static_cast<const T*>(x.raw()), steps, M, im.v.data<float>(),
                                 static_cast<T*>(y.raw()), nullptr, im.fired.data<int64_t>(), st);
  });
  im.seen = x.numel();
  im.at_rest = false;
  y.set_binary(!kc.smooth);
  return y;
}

Tensor Neuron::backward_input_cuda(const Tensor& dy, Ctx& ctx) {
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& s = im.slots.get(ctx.slot);
  SM_CHECK(s.x.defined(), type() << " '" << name() << "': backward_input ran twice for slot " << ctx.slot);
  SM_CHECK(dy.shape() == s.shape && dy.dtype() == s.dtype && dy.device().is_cuda(),
           type() << " '" << name() << "': gradient " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype())
                  << " does not match the forward output " << shape_str(s.shape) << " " << dtype_name(s.dtype));
  CudaAllocLabel label("neuron backward", &name_);
  const int64_t steps = s.shape[0], M = steps > 0 ? dy.numel() / steps : 0;
  const cpu::NeuronKernelConfig kc = kernel_config(cfg_, s.r, s.smooth);
  const bool plif = cfg_.kind == NeuronKind::PLIF;
  if (plif) s.grad_r = Tensor::empty({1}, DType::F64, dy.device());
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), dy.device());  // [T, N, ...]
  cudaStream_t st = cuda_layer::stream_of(dy);
  {
    const Tensor x = s.x.packed() ? Tensor() : s.x.restore();  // the forward's input when not bits
    const uint32_t* x_bits = s.x.packed() ? s.x.bits() : nullptr;
    const float* v_init = s.v_init.defined() ? s.v_init.data<float>() : nullptr;
    double* grad_r = plif ? s.grad_r.data<double>() : nullptr;
    cuda_layer::dispatch_activation(dy.dtype(), "neuron", [&](auto t) {
      using T = decltype(t);
      cuda::neuron_backward_cuda<T>(kc, static_cast<const T*>(dy.raw()),
                                    x.defined() ? static_cast<const T*>(x.raw()) : nullptr, x_bits, v_init, steps, M,
                                    static_cast<T*>(dx.raw()), grad_r, st);
    });
  }
  if (plif) {
    if (ctx.split_wgrad) {
      s.has_grad_w = true;
      s.x = cuda_layer::DeviceSaved();  // W needs only the scalar
      s.v_init = Tensor();
      return dx;
    }
    // w.grad += grad_r · r(1 - r)   (dr/dw of r = sigmoid(w))
    cuda::accumulate(param(0).grad.raw(), DType::F32, s.grad_r.raw(), DType::F64, 1, st, s.r * (1.0 - s.r));
  }
  im.slots.release(ctx.slot);
  return dx;
}

void Neuron::backward_weight_cuda(Ctx& ctx) {
  if (cfg_.kind != NeuronKind::PLIF) return;  // no parameters: B already released the slot
  CudaImpl& im = impl(cuda_impl_);
  CudaSaved& s = im.slots.get(ctx.slot);
  SM_CHECK(s.has_grad_w, "plif '" << name() << "': backward_weight without a split backward_input for slot "
                                  << ctx.slot);
  cuda::accumulate(param(0).grad.raw(), DType::F32, s.grad_r.raw(), DType::F64, 1, cuda_layer::stream_of(s.grad_r),
                   s.r * (1.0 - s.r));
  im.slots.release(ctx.slot);
}

}  // namespace sm
#endif  // SPIKEMESH_HAVE_CUDA
