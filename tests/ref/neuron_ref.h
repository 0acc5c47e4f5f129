// neuron_ref.h — naive double-precision reference of the multi-step neurons (docs/semantics.md §5),
// written step by step from the equations (stores v, h, s of every step), for tests only.
// Deliberately independent of the production kernel: IF uses H = V + X directly and the
// PLIF gradient uses x_t itself.
#pragma once
#include <cstdint>
#include <vector>

#include "spikemesh/layers/neuron.h"

namespace sm {
namespace ref {

struct NeuronRefForward {
  std::vector<double> h;  // [T][M] membrane after charge
  std::vector<double> s;  // [T][M] spikes (step, or the surrogate primitive when smooth)
  std::vector<double> v;  // [T][M] membrane after reset
};

struct NeuronRefBackward {
  std::vector<double> grad_x;  // [T][M]
  double grad_w = 0.0;         // PLIF: d loss / d w (chained through r = sigmoid(w))
};

// r: decay rate (LIF 1/tau, PLIF sigmoid(w); ignored for IF). v0: [M] initial membrane,
// empty = rest (v_reset for hard reset, 0 for soft).
NeuronRefForward neuron_forward_ref(const NeuronConfig& c, double r, const std::vector<double>& x,
                                    int64_t T, int64_t M, const std::vector<double>& v0 = {},
                                    bool smooth = false);

NeuronRefBackward neuron_backward_ref(const NeuronConfig& c, double r, const std::vector<double>& x,
                                      const NeuronRefForward& fwd, const std::vector<double>& grad_s,
                                      int64_t T, int64_t M, const std::vector<double>& v0 = {},
                                      bool smooth = false);

}  // namespace ref
}  // namespace sm
