// neuron.h (kernels/cpu) — fused multi-step LIF / PLIF / IF kernels over T (docs/semantics.md §5).
//
// Layout: x, spikes, grad_* are time-major [T, M] (M = neurons = N·features); the
// membrane state is [M]. Forward makes ONE pass over T per neuron and stores only the
// spikes (and the final membrane). Backward needs only the forward's input x and initial
// membrane: per block of neurons it first recomputes the pre-spike membranes h_t over T
// into a small per-thread scratch — the forward's arithmetic, bitwise the same h — then
// makes ONE pass from t = T-1 down to 0, recomputing s_t = fire(h_t) and
// v_t = reset(h_t, s_t) from h (v_{-1} = the initial membrane).
// IF is the LIF recurrence with r = 0 and decay_input = false (H = V + X).
// Surrogate math runs in the kernel's scalar (f32 for float, f64 for double).
// Determinism: the PLIF rate gradient is summed per fixed block of neurons and the block
// sums are added in block order, so it does not depend on the thread count.
#pragma once
#include <cstdint>
#include <vector>

namespace sm {
namespace cpu {

enum class SurrogateFn { Sigmoid, ATan };

struct NeuronKernelConfig {
  double r = 0.5;             // decay rate 1/tau (LIF), sigmoid(w) (PLIF), 0 (IF)
  bool decay_input = true;    // H = V + r(X - (V - V_r)); else H = V - r(V - V_r) + X
  double v_threshold = 1.0;
  bool hard_reset = true;     // false: soft reset V' = H - S·v_th (V_r = 0 in the charge)
  double v_reset = 0.0;       // V_r of a hard reset
  bool detach_reset = false;  // no gradient through S inside the reset term
  SurrogateFn surrogate = SurrogateFn::Sigmoid;
  double alpha = 4.0;
  bool smooth = false;        // S = surrogate primitive(h - v_th) instead of the step
  // The membrane a neuron rests at (reset_state): v_reset for hard reset, else 0.
  double rest() const { return hard_reset ? v_reset : 0.0; }
};

// Batch norm's normalisation applied to the input as the kernels read it (the fused
// BN → neuron epilogue, layers/batchnorm.cpp BatchNorm::forward_into): neuron m of [T, M]
// belongs to channel (m / inner) % channels and its input is
// fma(x - center[c], scale[c], offset[c]) in the kernel's scalar (each [C] value rounded to
// it first) — bitwise what bn_normalize (kernels/cpu/batchnorm.h) writes, so the fused
// forward fires exactly as normalise-then-neuron, and backward recomputes the same h_t
// from the unnormalised x. grad_x is then the gradient of the NORMALISED input.
struct NeuronInputAffine {
  std::vector<double> center, scale, offset;  // [channels]
  int64_t channels = 1, inner = 1;            // M = N·channels·inner
};

// Batch norm's backward sums made by neuron_backward in its own pass (the fused epilogue's
// backward, with a NeuronInputAffine): per channel Σ grad_x and Σ grad_x·(x - center[c]), in
// double, x unnormalised — what bn_backward_moments would read back from memory. Summed per
// neuron over t, per block by channel, blocks in order: the same for any thread count.
struct NeuronBnGradSums {
  std::vector<double> dy, dy_xc;  // [channels]
  const void* of = nullptr;       // the grad_x they sum (set by neuron_backward)
};

// Forward over T steps. v: [M] membrane in/out (in: v_{-1}; out: v_{T-1}); nullptr means
// "start at rest" (and the final membrane is not returned). x, spikes: [T, M].
// Returns how many h_t ≥ v_th (step firings, also in smooth mode), for the firing rate.
// affine (nullable): x is normalised as it is read (NeuronInputAffine).
template <typename T>
int64_t neuron_forward(const NeuronKernelConfig& c, const T* x, int64_t steps, int64_t M, T* v,
                       T* spikes, const NeuronInputAffine* affine = nullptr);

// BPTT from the forward's input. grad_s, x: [T, M] (x exactly as given to neuron_forward);
// v_init: [M] membrane the forward started from, or nullptr (= rest). Writes grad_x [T, M].
// When grad_r is non-null also returns d(loss)/dr summed over all neurons and steps (PLIF;
// chain through sigmoid in the caller): per step
// grad_h · (x_t - (v_{t-1} - V_r)) = grad_h · (h_t - v_{t-1}) / r  (decay_input), or
// grad_h · (V_r - v_{t-1}) (not decay_input).
// Time chunks (memopt): grad_v_in [M] (nullable = 0) is d(loss)/d v_{T-1} coming from the steps
// after this call's last one; grad_v_out [M] (nullable) receives d(loss)/d v_init, what flows
// into the steps before its first. Without them no gradient flows out through v_init.
// affine: the forward's (then grad_x is d loss / d normalised input); bn_sums (needs affine,
// nullable) receives batch norm's backward sums over grad_x.
template <typename T>
void neuron_backward(const NeuronKernelConfig& c, const T* grad_s, const T* x, const T* v_init,
                     int64_t steps, int64_t M, T* grad_x, double* grad_r, const T* grad_v_in = nullptr,
                     T* grad_v_out = nullptr, const NeuronInputAffine* affine = nullptr,
                     NeuronBnGradSums* bn_sums = nullptr);

}  // namespace cpu
}  // namespace sm
