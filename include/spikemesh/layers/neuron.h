// neuron.h — multi-step LIF / PLIF / IF neurons over time-major input [T, N, ...]
// (docs/semantics.md §5). One fused pass over T forward and one backward (BPTT). Forward saves only
// a reference to its input x (bits if x is binary) and, when it did not start at rest, the
// initial membrane; backward recomputes h_t (then s_t, v_t) from them. Output spikes are
// flagged binary. PLIF has one learnable scalar "w" (r = sigmoid(w), w0 = -ln(tau - 1)).
// reset_state() zeroes the membrane (v = v_reset, or 0 for soft reset). CPU and CUDA runs
// keep separate membranes and firing counters; reset_state() and collect_stats() reach both.
// In ctx.smooth_spikes mode (tests only) S = surrogate primitive(h - v_th) instead of the
// step, so finite differences of the forward match the surrogate backward exactly.
#pragma once
#include "spikemesh/layers/layer.h"

namespace sm {
#ifdef SPIKEMESH_HAVE_CUDA
namespace cuda_layer {
struct FusedBnApply;
}
#endif
namespace cpu {
struct NeuronInputAffine;  // kernels/cpu/neuron.h
struct NeuronBnGradSums;
}

enum class NeuronKind { LIF, PLIF, IF };
enum class SurrogateKind { Sigmoid, ATan };

struct NeuronConfig {
  NeuronKind kind = NeuronKind::LIF;
  double tau = 2.0;            // LIF tau; PLIF initial tau
  bool decay_input = true;
  double v_threshold = 1.0;
  bool hard_reset = true;      // false: soft reset (v_reset = None)
  double v_reset = 0.0;        // used when hard_reset
  bool detach_reset = false;
  SurrogateKind surrogate = SurrogateKind::Sigmoid;
  double alpha = 4.0;          // Sigmoid default 4, ATan default 2
};

NeuronKind neuron_kind_from_name(const std::string& s);        // "lif" | "plif" | "if"; throws Input
SurrogateKind surrogate_from_name(const std::string& s);       // "sigmoid" | "atan"; throws Input

class Neuron : public Layer {
 public:
  explicit Neuron(const NeuronConfig& c);
  Shape output_shape(const Shape& in) const override { return in; }
  std::string type() const override;  // "lif" | "plif" | "if"
  bool emits_spikes() const override { return true; }
  const NeuronConfig& config() const { return cfg_; }
  void reset_state() override;
  // firing_rate: spikes / (T·N·features) of the last training/eval forward.
  void collect_stats(std::vector<LayerStat>& out) const override;
  // memopt time chunks (layers/memopt_segment.h): the membrane the next forward starts from
  // (a copy; undefined at rest), setting it (undefined: at rest), and forgetting the membrane
  // gradient a chunked backward carries between chunks (ctx.time_grad_carry).
  Tensor membrane();
  void set_membrane(const Tensor& v);
  void clear_time_grad();
  // The fused batch-norm → neuron epilogue (CPU; BatchNorm::forward_into calls it): the
  // forward of x [T, N, C, ...] normalised per channel by `in` as the kernel reads it, the
  // normalised tensor never written. The slot keeps x (a reference) and `in`; backward
  // recomputes from them and returns, as unfused, the gradient of the normalised input —
  // and, in the same pass, batch norm's two backward sums over it into bn_sums (nullable).
  Tensor forward_normalized_cpu(const Tensor& x, std::shared_ptr<const cpu::NeuronInputAffine> in,
                                std::shared_ptr<cpu::NeuronBnGradSums> bn_sums, Ctx& ctx);
#ifdef SPIKEMESH_HAVE_CUDA
  // The same epilogue on the GPU (BatchNorm::forward_cuda_then calls it): the kernels read x
  // through `in` (kernels/cuda/neuron.h NeuronAffineCuda); backward returns the gradient of
  // the normalised input, from which batch norm's own backward continues with its saved x.
  Tensor forward_normalized_cuda(const Tensor& x, std::shared_ptr<const cuda_layer::FusedBnApply> in, Ctx& ctx);
#endif

 protected:
  SM_LEAF_HOOKS
  SM_LEAF_WEIGHT_HOOKS

 private:
  SM_DEVICE_FLOW  // src/layers/neuron_flow.h

  NeuronConfig cfg_;
};

}  // namespace sm
