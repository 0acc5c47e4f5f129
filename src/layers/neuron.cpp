// neuron.cpp — the multi-step LIF / PLIF / IF layer (docs/semantics.md §5): names, construction,
// state and the CPU hooks — the flow of neuron_flow.h over the fused CPU kernels
// (kernels/cpu/neuron.h) in the input's dtype (membrane included).
#include "spikemesh/layers/neuron.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "neuron_flow.h"
#include "spikemesh/core/bitpack.h"

namespace sm {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

struct CpuNeuron {
  using Act = SavedActivation;
  using Count = int64_t;
  using GradR = double;
  NeuronState<CpuNeuron>& st;
  const cpu::NeuronInputAffine* affine = nullptr;  // forward: the fused batch norm's, if any

  NeuronState<CpuNeuron>& state() { return st; }
  static DType membrane_dtype(DType x) { return x; }
  static double count(const Count& c) { return static_cast<double>(c); }
  static void add_count(Count& total, const Count& more) { total += more; }
  void check(const Tensor&, const Param*) {}

  void forward(const cpu::NeuronKernelConfig& kc, const Tensor& x, int64_t steps, int64_t M, Tensor& v, Tensor& y,
               Count& fired) {
    if (x.dtype() == DType::F32)
      fired = cpu::neuron_forward<float>(kc, x.data<float>(), steps, M, v.data<float>(), y.data<float>(), affine);
    else
      fired = cpu::neuron_forward<double>(kc, x.data<double>(), steps, M, v.data<double>(), y.data<double>(), affine);
  }

  void backward(const cpu::NeuronKernelConfig& kc, const Tensor& dy, const NeuronSaved<CpuNeuron>& s, int64_t steps,
                int64_t M, Tensor& dx, GradR* grad_r, const Tensor* gv_in, Tensor* gv_out) {
    const Tensor x = s.x.restore();  // [T, N, ...] the forward's input (unpacked if bits)
    if (grad_r) *grad_r = 0.0;
    if (dy.dtype() == DType::F32)
      cpu::neuron_backward<float>(kc, dy.data<float>(), x.data<float>(),
                                  s.v_init.defined() ? s.v_init.data<float>() : nullptr, steps, M, dx.data<float>(),
                                  grad_r, gv_in ? gv_in->data<float>() : nullptr, gv_out ? gv_out->data<float>() : nullptr,
                                  s.affine.get(), s.bn_sums.get());
    else
      cpu::neuron_backward<double>(kc, dy.data<double>(), x.data<double>(),
                                   s.v_init.defined() ? s.v_init.data<double>() : nullptr, steps, M,
                                   dx.data<double>(), grad_r, gv_in ? gv_in->data<double>() : nullptr,
                                   gv_out ? gv_out->data<double>() : nullptr, s.affine.get(), s.bn_sums.get());
  }

  void add_grad_w(Tensor& g, const GradR& grad_r, double r) {
    const double grad_w = grad_r * r * (1.0 - r);  // dr/dw = r(1 - r)
    if (g.dtype() == DType::F32)
      g.data<float>()[0] += static_cast<float>(grad_w);
    else
      g.data<double>()[0] += grad_w;
  }
};

NeuronState<CpuNeuron>& cpu_state(std::shared_ptr<void>& p) {
  if (!p) p = std::make_shared<NeuronState<CpuNeuron>>();
  return *static_cast<NeuronState<CpuNeuron>*>(p.get());
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

Neuron::Neuron(const NeuronConfig& c) : cfg_(c) {
  if (cfg_.kind != NeuronKind::IF && !(cfg_.tau > 1.0))
    SM_INPUT_ERROR(type() << " neuron needs tau > 1, got " << cfg_.tau);
  if (!(cfg_.alpha > 0.0)) SM_INPUT_ERROR("surrogate alpha must be > 0, got " << cfg_.alpha);
  if (cfg_.kind == NeuronKind::PLIF) add_param("w", {}, InitSpec::constant(-std::log(cfg_.tau - 1.0)));
}

std::string Neuron::type() const {
  switch (cfg_.kind) {
    case NeuronKind::LIF: return "lif";
    case NeuronKind::PLIF: return "plif";
    case NeuronKind::IF: return "if";
  }
  return "?";
}

void Neuron::reset_state() {
  cpu_state(impl_).at_rest = true;
  cpu_state(impl_).grad_v = Tensor();
#ifdef SPIKEMESH_HAVE_CUDA
  neuron_cuda_reset(cuda_impl_);
#endif
}

Tensor Neuron::membrane() {
#ifdef SPIKEMESH_HAVE_CUDA
  if (last_device_.is_cuda()) return neuron_cuda_membrane(cuda_impl_);
#endif
  return membrane_of(cpu_state(impl_));
}

void Neuron::set_membrane(const Tensor& v) {
#ifdef SPIKEMESH_HAVE_CUDA
  if (v.defined() ? v.device().is_cuda() : last_device_.is_cuda()) return neuron_cuda_set_membrane(cuda_impl_, v);
#endif
  set_membrane_of(cpu_state(impl_), v);
}

void Neuron::clear_time_grad() {
  cpu_state(impl_).grad_v = Tensor();
#ifdef SPIKEMESH_HAVE_CUDA
  neuron_cuda_clear_time_grad(cuda_impl_);
#endif
}

void Neuron::collect_stats(std::vector<LayerStat>& out) const {
  if (impl_) neuron_report(*static_cast<const NeuronState<CpuNeuron>*>(impl_.get()), name(), out);
#ifdef SPIKEMESH_HAVE_CUDA
  neuron_cuda_stats(cuda_impl_, name(), out);
#endif
}

Tensor Neuron::forward_cpu(const Tensor& x, Ctx& ctx) {
  CpuNeuron dev{cpu_state(impl_)};
  return forward_on(dev, x, ctx);
}

Tensor Neuron::forward_normalized_cpu(const Tensor& x, std::shared_ptr<const cpu::NeuronInputAffine> in,
                                     std::shared_ptr<cpu::NeuronBnGradSums> bn_sums, Ctx& ctx) {
  SM_CHECK(x.device().is_cpu() && in, type() << " '" << name() << "': the fused normalisation runs on the CPU");
  last_device_ = x.device();
  CpuNeuron dev{cpu_state(impl_), in.get()};
  Tensor y = forward_on(dev, x, ctx);
  NeuronSaved<CpuNeuron>& s = cpu_state(impl_).slots.get(ctx.slot);
  s.affine = std::move(in);
  s.bn_sums = std::move(bn_sums);
  return y;
}

Tensor Neuron::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  CpuNeuron dev{cpu_state(impl_)};
  return backward_input_on(dev, dy, ctx);
}

void Neuron::backward_weight_cpu(Ctx& ctx) {
  CpuNeuron dev{cpu_state(impl_)};
  backward_weight_on(dev, ctx);
}

}  // namespace sm
