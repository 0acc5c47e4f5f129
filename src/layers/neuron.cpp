// neuron.cpp — the multi-step LIF / PLIF / IF layer (spec §3) over the fused CPU kernels.
// Invariants:
//  * per slot only the input x is saved — a reference, no copy (layers never write their
//    inputs; after a BatchNorm that is the very tensor BN keeps, so the two share it), or
//    bits when x is a spike tensor — plus, only when the forward did not start at rest, the
//    initial membrane v_init [M]. Backward recomputes h_t from them (kernels/cpu/neuron.h);
//  * the membrane after the last forward is kept as layer state (v_); reset_state() marks
//    it at rest (v_reset for hard reset, 0 for soft) and the next forward starts there;
//  * PLIF's rate r = sigmoid(w) is read at forward time and saved with the slot. Its
//    gradient is computed by B in the same BPTT pass; with ctx.split_wgrad B keeps that
//    scalar (and releases x) and W adds it to w's gradient. Other kinds have no W work.
#include "spikemesh/layers/neuron.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "spikemesh/core/bitpack.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

struct NeuronSaved {
  SavedActivation x;         // [T, N, ...] the forward's input (reference, or bits for spikes)
  Tensor v_init;             // [M] when the forward started away from rest
  Shape shape;               // shape of x (and y)
  DType dtype = DType::F32;  // dtype of x (and y)
  double r = 0.0;            // decay rate used by the forward
  bool smooth = false;
  bool has_grad_w = false;  // split: B computed d(loss)/dw, W adds it
  double grad_w = 0.0;
};

struct NeuronImpl {
  SlotStore<NeuronSaved> slots;
  Tensor v;             // [M] membrane after the last forward
  bool at_rest = true;  // v holds no state: the next forward starts at rest
  int64_t fired = 0;    // step firings in the last forward
  int64_t seen = 0;     // T·N·features of the last forward
};

NeuronImpl& impl_of(const std::shared_ptr<void>& p) { return *static_cast<NeuronImpl*>(p.get()); }

double sigmoid(double w) { return 1.0 / (1.0 + std::exp(-w)); }

// The kernel's view of a configuration at decay rate r (IF: r = 0, input not decayed).
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

void add_to_scalar(Tensor& g, double value) {
  if (g.dtype() == DType::F32)
    g.data<float>()[0] += static_cast<float>(value);
  else
    g.data<double>()[0] += value;
}

}  // namespace

NeuronKind neuron_kind_from_name(const std::string& s) {
  const std::string l = lower(s);
  if (l == "lif") return NeuronKind::LIF;
  if (l == "plif") return NeuronKind::PLIF;
  if (l == "if") return NeuronKind::IF;
  SM_INPUT_ERROR("unknown neuron kind '" << s << "' (valid: lif, plif, if)");
}

SurrogateKind surrogate_from_name(const std::string& s) {
  const std::string l = lower(s);
  if (l == "sigmoid") return SurrogateKind::Sigmoid;
  if (l == "atan") return SurrogateKind::ATan;
  SM_INPUT_ERROR("unknown surrogate function '" << s << "' (valid: sigmoid, atan)");
}

Neuron::Neuron(const NeuronConfig& c) : cfg_(c), impl_(std::make_shared<NeuronImpl>()) {
  if (cfg_.kind != NeuronKind::IF && !(cfg_.tau > 1.0))
    SM_INPUT_ERROR(type() << " neuron needs tau > 1, got " << cfg_.tau);
  if (!(cfg_.alpha > 0.0)) SM_INPUT_ERROR("surrogate alpha must be > 0, got " << cfg_.alpha);
  if (cfg_.kind == NeuronKind::PLIF)
    add_param("w", {}, InitSpec::constant(-std::log(cfg_.tau - 1.0)));
}

std::string Neuron::type() const {
  switch (cfg_.kind) {
    case NeuronKind::LIF: return "lif";
    case NeuronKind::PLIF: return "plif";
    case NeuronKind::IF: return "if";
  }
  return "?";
}

void Neuron::reset_state() { impl_of(impl_).at_rest = true; }

void Neuron::collect_stats(std::vector<LayerStat>& out) const {
  const NeuronImpl& im = impl_of(impl_);
  if (im.seen > 0) out.push_back({name(), "firing_rate", double(im.fired) / double(im.seen)});
}

Tensor Neuron::forward_cpu(const Tensor& x, Ctx& ctx) {
  NeuronImpl& im = impl_of(impl_);
  SM_CHECK(x.ndim() >= 2, type() << " '" << name() << "' expects [T, N, ...], got "
                                 << shape_str(x.shape()));
  const DType dt = x.dtype();
  SM_CHECK(dt == DType::F32 || dt == DType::F64, type() << " runs in f32 or f64, got " << dtype_name(dt));
  const int64_t steps = x.dim(0), M = steps > 0 ? x.numel() / steps : 0;

  SM_CHECK(cfg_.kind != NeuronKind::PLIF || param(0).value.defined(),
           "plif '" << name() << "': parameter w is not bound (finalize the owning Unit first)");
  const double r = cfg_.kind == NeuronKind::LIF    ? 1.0 / cfg_.tau
                   : cfg_.kind == NeuronKind::PLIF ? sigmoid(param(0).value.item())
                                                   : 0.0;
  const cpu::NeuronKernelConfig kc = kernel_config(cfg_, r, ctx.smooth_spikes);

  // Membrane state: continue from the last forward unless at rest.
  if (im.at_rest) {
    if (!im.v.defined() || im.v.numel() != M || im.v.dtype() != dt) im.v = Tensor::empty({M}, dt);
    im.v.fill(kc.rest());
  } else {
    SM_CHECK(im.v.numel() == M && im.v.dtype() == dt,
             type() << " '" << name() << "': input " << shape_str(x.shape()) << " " << dtype_name(dt)
                    << " does not continue the membrane of the previous forward (" << im.v.numel()
                    << " neurons, " << dtype_name(im.v.dtype()) << "); call reset_state() first");
  }

  NeuronSaved& s = im.slots.fresh(ctx.slot);
  s.shape = x.shape();
  s.r = kc.r;
  s.smooth = kc.smooth;
  s.dtype = dt;
  s.x = SavedActivation::save(x);
  if (!im.at_rest) s.v_init = im.v.clone();  // [M]
  Tensor y = Tensor::empty(x.shape(), dt);  // [T, N, ...]
  if (dt == DType::F32)
    im.fired = cpu::neuron_forward<float>(kc, x.data<float>(), steps, M, im.v.data<float>(),
                                          y.data<float>());
  else
    im.fired = cpu::neuron_forward<double>(kc, x.data<double>(), steps, M, im.v.data<double>(),
                                           y.data<double>());
  im.seen = x.numel();
  im.at_rest = false;
  y.set_binary(!kc.smooth);
  return y;
}

Tensor Neuron::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  NeuronImpl& im = impl_of(impl_);
  NeuronSaved& s = im.slots.get(ctx.slot);
  SM_CHECK(s.x.defined(), type() << " '" << name() << "': backward_input ran twice for slot " << ctx.slot);
  SM_CHECK(dy.shape() == s.shape && dy.dtype() == s.dtype,
           type() << " '" << name() << "': gradient " << shape_str(dy.shape()) << " "
                  << dtype_name(dy.dtype()) << " does not match the forward output "
                  << shape_str(s.shape) << " " << dtype_name(s.dtype));
  const int64_t steps = s.shape[0], M = steps > 0 ? dy.numel() / steps : 0;

  const cpu::NeuronKernelConfig kc = kernel_config(cfg_, s.r, s.smooth);

  const bool plif = cfg_.kind == NeuronKind::PLIF;
  double grad_r = 0.0;
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype());  // [T, N, ...]
  {
    const Tensor x = s.x.restore();  // [T, N, ...] the forward's input (unpacked if bits)
    if (dy.dtype() == DType::F32)
      cpu::neuron_backward<float>(kc, dy.data<float>(), x.data<float>(),
                                  s.v_init.defined() ? s.v_init.data<float>() : nullptr, steps, M,
                                  dx.data<float>(), plif ? &grad_r : nullptr);
    else
      cpu::neuron_backward<double>(kc, dy.data<double>(), x.data<double>(),
                                   s.v_init.defined() ? s.v_init.data<double>() : nullptr, steps, M,
                                   dx.data<double>(), plif ? &grad_r : nullptr);
  }

  if (plif) {
    const double grad_w = grad_r * s.r * (1.0 - s.r);  // dr/dw = r(1 - r)
    if (ctx.split_wgrad) {
      s.grad_w = grad_w;
      s.has_grad_w = true;
      s.x = SavedActivation();  // W needs only the scalar
      s.v_init = Tensor();
      return dx;
    }
    add_to_scalar(param(0).grad, grad_w);
  }
  im.slots.release(ctx.slot);
  return dx;
}

void Neuron::backward_weight_cpu(Ctx& ctx) {
  if (cfg_.kind != NeuronKind::PLIF) return;  // no parameters: B already released the slot
  NeuronImpl& im = impl_of(impl_);
  NeuronSaved& s = im.slots.get(ctx.slot);
  SM_CHECK(s.has_grad_w, "plif '" << name() << "': backward_weight without a split backward_input for slot "
                                  << ctx.slot);
  add_to_scalar(param(0).grad, s.grad_w);
  im.slots.release(ctx.slot);
}

}  // namespace sm
