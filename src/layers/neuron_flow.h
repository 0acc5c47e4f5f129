// neuron_flow.h — the LIF / PLIF / IF layer's forward / B / W flow (layers/neuron.h,
// docs/semantics.md §5), written once for both devices and instantiated with the device's kernels
// in neuron.cpp (CPU) and neuron_cuda.cpp (CUDA). Also what both share: the kernel configuration,
// the decay rate, the saved slot and the membrane state. A Dev provides:
//   using Act     how the input is kept (SavedActivation / cuda_layer::DeviceSaved)
//   using Count   firings of the last forward (int64_t / device i64 [1])
//   using GradR   PLIF's d loss / d r of one slot (double / device f64 [1])
//   NeuronState<Dev>& state()
//   static DType membrane_dtype(DType x)                 CPU: x's dtype; CUDA: f32
//   void check(const Tensor& x, const Param* w)          device/dtype checks (w: PLIF's)
//   void forward(kc, x, steps, M, Tensor& v, Tensor& y, Count& fired)
//   void backward(kc, dy, const NeuronSaved<Dev>& s, steps, M, Tensor& dx, GradR* grad_r,
//                 const Tensor* grad_v_in, Tensor* grad_v_out)   (memopt time chunks; nullable)
//   void add_grad_w(Tensor& w_grad, const GradR& grad_r, double r)   w.grad += grad_r·r(1-r)
//   static double count(const Count&)
//   static void add_count(Count& total, const Count& more)               (memopt pieces)
// Invariants:
//  * per slot only the input x is saved — a reference, no copy (layers never write their
//    inputs; after a BatchNorm that is the very tensor BN keeps), or bits when x is a spike
//    tensor — plus, only when the forward did not start at rest, the initial membrane v_init
//    [M]. Backward recomputes h_t from them;
//  * the membrane after the last forward is kept as layer state (v); reset marks it at rest
//    (v_reset for hard reset, 0 for soft) and the next forward starts there;
//  * PLIF's rate r = sigmoid(w) is read at forward time and saved with the slot. Its
//    gradient is computed by B in the same BPTT pass; with ctx.split_wgrad B keeps that
//    scalar (and releases x) and W adds it to w's gradient. Other kinds have no W work.
#pragma once
#include <cmath>
#include <vector>

#include "device_ops.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {

template <class Dev>
struct NeuronSaved {
  typename Dev::Act x;       // [T, N, ...] the forward's input (reference, or bits for spikes)
  Tensor v_init;             // [M] when the forward started away from rest
  Shape shape;               // shape of x (and y)
  DType dtype = DType::F32;  // dtype of x (and y)
  double r = 0.0;            // decay rate used by the forward
  bool smooth = false;
  bool has_grad_w = false;   // split: B computed grad_r, W adds it
  typename Dev::GradR grad_r{};
  // CPU, fused batch norm (Neuron::forward_normalized_cpu): x is the unnormalised input and
  // this its normalisation; null otherwise.
  std::shared_ptr<const cpu::NeuronInputAffine> affine;
  // ... and batch norm's backward sums, which this layer's backward makes for it.
  std::shared_ptr<cpu::NeuronBnGradSums> bn_sums;
#ifdef SPIKEMESH_HAVE_CUDA
  // CUDA, fused batch norm (Neuron::forward_normalized_cuda): x is unnormalised and this the
  // kernels' apply; null otherwise.
  std::shared_ptr<const cuda_layer::FusedBnApply> device_affine;
#endif
};

template <class Dev>
struct NeuronState {
  SlotStore<NeuronSaved<Dev>> slots;
  Tensor v;                        // [M] membrane after the last forward
  bool at_rest = true;             // v holds no state: the next forward starts at rest
  typename Dev::Count fired{};     // step firings in the last forward
  int64_t seen = 0;                // T·N·features of the last forward
  Tensor grad_v;                   // [M] memopt time chunks: d loss / d membrane left by the later chunk
};

// memopt time chunks: the membrane the next forward starts from (undefined: at rest) and
// setting it (a copy; undefined: at rest).
template <class Dev>
Tensor membrane_of(const NeuronState<Dev>& st) {
  return st.at_rest || !st.v.defined() ? Tensor() : st.v.clone();
}
template <class Dev>
void set_membrane_of(NeuronState<Dev>& st, const Tensor& v) {
  st.at_rest = !v.defined();
  if (v.defined()) st.v = v.clone();
}

// The kernel's view of a configuration at decay rate r (IF: r = 0, input not decayed).
inline cpu::NeuronKernelConfig neuron_kernel_config(const NeuronConfig& c, double r, bool smooth) {
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

// firing_rate of the state's last forward (nothing before the first).
template <class Dev>
void neuron_report(const NeuronState<Dev>& st, const std::string& name, std::vector<LayerStat>& out) {
  if (st.seen > 0) out.push_back({name, "firing_rate", Dev::count(st.fired) / static_cast<double>(st.seen)});
}

#ifdef SPIKEMESH_HAVE_CUDA
// The CUDA side's state (neuron_cuda.cpp; empty before the first CUDA forward): mark it at
// rest / report its firing rate (pooled counters: one copy per device per report).
void neuron_cuda_reset(std::shared_ptr<void>& cuda_state);
void neuron_cuda_stats(const std::shared_ptr<void>& cuda_state, const std::string& name, std::vector<LayerStat>& out);
// memopt time chunks on the CUDA side: Neuron::membrane / set_membrane / clear_time_grad.
Tensor neuron_cuda_membrane(std::shared_ptr<void>& cuda_state);
void neuron_cuda_set_membrane(std::shared_ptr<void>& cuda_state, const Tensor& v);
void neuron_cuda_clear_time_grad(std::shared_ptr<void>& cuda_state);
#endif

template <class Dev>
Tensor Neuron::forward_on(Dev& dev, const Tensor& x, Ctx& ctx) {
  NeuronState<Dev>& im = dev.state();
  SM_CHECK(x.ndim() >= 2, type() << " '" << name() << "' expects [T, N, ...], got " << shape_str(x.shape()));
  layer_ops::check_activation(x, type().c_str(), name());
  const bool plif = cfg_.kind == NeuronKind::PLIF;
  SM_CHECK(!plif || param(0).value.defined(),
           "plif '" << name() << "': parameter w is not bound (finalize the owning Unit first)");
  dev.check(x, plif ? &param(0) : nullptr);
  const int64_t steps = x.dim(0), M = steps > 0 ? x.numel() / steps : 0;
  const double r = cfg_.kind == NeuronKind::LIF ? 1.0 / cfg_.tau
                   : plif                       ? 1.0 / (1.0 + std::exp(-param(0).value.item()))  // sigmoid(w)
                                                : 0.0;
  const cpu::NeuronKernelConfig kc = neuron_kernel_config(cfg_, r, ctx.smooth_spikes);

  // Membrane state: continue from the last forward unless at rest.
  const DType mdt = Dev::membrane_dtype(x.dtype());
  if (im.at_rest) {
    if (!im.v.defined() || im.v.numel() != M || im.v.dtype() != mdt || im.v.device() != x.device())
      im.v = Tensor::empty({M}, mdt, x.device());
    im.v.fill(kc.rest());
  } else {
    SM_CHECK(im.v.numel() == M && im.v.dtype() == mdt && im.v.device() == x.device(),
             type() << " '" << name() << "': input " << shape_str(x.shape()) << " " << dtype_name(x.dtype())
                    << " does not continue the membrane of the previous forward (" << im.v.numel() << " neurons, "
                    << dtype_name(im.v.dtype()) << " on " << im.v.device().str() << "); call reset_state() first");
  }

  NeuronSaved<Dev>& s = im.slots.fresh(ctx.slot);
  s.shape = x.shape();
  s.r = kc.r;
  s.smooth = kc.smooth;
  s.dtype = x.dtype();
  s.x = Dev::Act::save(x);
  if (!im.at_rest) s.v_init = im.v.clone();  // [M]
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());  // [T, N, ...]
  if (ctx.recompute) {  // memopt: the same spikes again; the firing statistics stay the first forward's
    typename Dev::Count scratch{};
    dev.forward(kc, x, steps, M, im.v, y, scratch);
  } else if (ctx.accumulate_stats) {  // memopt: a later piece of the same forward
    typename Dev::Count more{};
    dev.forward(kc, x, steps, M, im.v, y, more);
    Dev::add_count(im.fired, more);
    im.seen += x.numel();
  } else {
    dev.forward(kc, x, steps, M, im.v, y, im.fired);
    im.seen = x.numel();
  }
  im.at_rest = false;
  y.set_binary(!kc.smooth);
  return y;
}

template <class Dev>
Tensor Neuron::backward_input_on(Dev& dev, const Tensor& dy, Ctx& ctx) {
  NeuronState<Dev>& im = dev.state();
  NeuronSaved<Dev>& s = im.slots.get(ctx.slot);
  SM_CHECK(s.x.defined(), type() << " '" << name() << "': backward_input ran twice for slot " << ctx.slot);
  SM_CHECK(dy.shape() == s.shape && dy.dtype() == s.dtype,
           type() << " '" << name() << "': gradient " << shape_str(dy.shape()) << " " << dtype_name(dy.dtype())
                  << " does not match the forward output " << shape_str(s.shape) << " " << dtype_name(s.dtype));
  const int64_t steps = s.shape[0], M = steps > 0 ? dy.numel() / steps : 0;
  const cpu::NeuronKernelConfig kc = neuron_kernel_config(cfg_, s.r, s.smooth);
  const bool plif = cfg_.kind == NeuronKind::PLIF;
  // [T, N, ...]; on the CPU over dy when the caller's loop owns it and holds the only handle
  // (layers/layer.h): the BPTT reads each step's gradient before it writes that step's result
  Tensor dx = dy.device().is_cpu() && ctx.dy_owned && dy.sole_handle()
                  ? Tensor(dy).set_binary(false)
                  : Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  if (ctx.time_grad_carry) {  // memopt: this chunk's BPTT continues the later chunk's
    Tensor carried = Tensor::empty({M}, Dev::membrane_dtype(dy.dtype()), dy.device());
    dev.backward(kc, dy, s, steps, M, dx, plif ? &s.grad_r : nullptr, im.grad_v.defined() ? &im.grad_v : nullptr,
                 &carried);
    im.grad_v = carried;
  } else {
    dev.backward(kc, dy, s, steps, M, dx, plif ? &s.grad_r : nullptr, nullptr, nullptr);
  }
  if (plif) {
    if (ctx.split_wgrad) {
      s.has_grad_w = true;
      s.x = typename Dev::Act();  // W needs only the scalar
      s.v_init = Tensor();
      return dx;
    }
    dev.add_grad_w(param(0).grad, s.grad_r, s.r);
  }
  im.slots.release(ctx.slot);
  return dx;
}

template <class Dev>
void Neuron::backward_weight_on(Dev& dev, Ctx& ctx) {
  if (cfg_.kind != NeuronKind::PLIF) return;  // no parameters: B already released the slot
  NeuronState<Dev>& im = dev.state();
  NeuronSaved<Dev>& s = im.slots.get(ctx.slot);
  SM_CHECK(s.has_grad_w, "plif '" << name() << "': backward_weight without a split backward_input for slot "
                                  << ctx.slot);
  dev.add_grad_w(param(0).grad, s.grad_r, s.r);
  im.slots.release(ctx.slot);
}

}  // namespace sm
