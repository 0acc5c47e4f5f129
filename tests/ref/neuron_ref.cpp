// neuron_ref.cpp — literal transcription of docs/semantics.md §5 (charge, fire, reset; BPTT from
// t = T-1 down to 0 with g_v = 0 after the last step). Tests only; clarity over speed.
#include "neuron_ref.h"

#include <cmath>

namespace sm {
namespace ref {

namespace {

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

double surrogate_primitive(const NeuronConfig& c, double u) {
  if (c.surrogate == SurrogateKind::Sigmoid) return sigmoid(c.alpha * u);
  return std::atan(M_PI / 2.0 * c.alpha * u) / M_PI + 0.5;
}

double surrogate_derivative(const NeuronConfig& c, double u) {
  if (c.surrogate == SurrogateKind::Sigmoid) {
    double sg = sigmoid(c.alpha * u);
    return c.alpha * sg * (1.0 - sg);
  }
  double z = M_PI * c.alpha * u / 2.0;
  return (c.alpha / 2.0) / (1.0 + z * z);
}

// V_r as it appears in the charge step (0 for soft reset).
double charge_v_r(const NeuronConfig& c) { return c.hard_reset ? c.v_reset : 0.0; }

double initial_v(const NeuronConfig& c, const std::vector<double>& v0, int64_t i) {
  return v0.empty() ? (c.hard_reset ? c.v_reset : 0.0) : v0[i];
}

}  // namespace

NeuronRefForward neuron_forward_ref(const NeuronConfig& c, double r, const std::vector<double>& x,
                                    int64_t T, int64_t M, const std::vector<double>& v0, bool smooth) {
  NeuronRefForward f;
  f.h.assign(T * M, 0.0);
  f.s.assign(T * M, 0.0);
  f.v.assign(T * M, 0.0);
  const double Vr = charge_v_r(c);
  for (int64_t i = 0; i < M; ++i) {
    double V = initial_v(c, v0, i);
    for (int64_t t = 0; t < T; ++t) {
      const double X = x[t * M + i];
      double H;
      if (c.kind == NeuronKind::IF)
        H = V + X;
      else if (c.decay_input)
        H = V + r * (X - (V - Vr));
      else
        H = V - r * (V - Vr) + X;
      double S = smooth ? surrogate_primitive(c, H - c.v_threshold) : (H >= c.v_threshold ? 1.0 : 0.0);
      double Vnext = c.hard_reset ? S * c.v_reset + (1.0 - S) * H : H - S * c.v_threshold;
      f.h[t * M + i] = H;
      f.s[t * M + i] = S;
      f.v[t * M + i] = Vnext;
      V = Vnext;
    }
  }
  return f;
}

NeuronRefBackward neuron_backward_ref(const NeuronConfig& c, double r, const std::vector<double>& x,
                                      const NeuronRefForward& f, const std::vector<double>& grad_s,
                                      int64_t T, int64_t M, const std::vector<double>& v0, bool smooth) {
  (void)smooth;  // the surrogate derivative is the derivative of the smooth spike too
  NeuronRefBackward b;
  b.grad_x.assign(T * M, 0.0);
  const double Vr = charge_v_r(c);
  const bool is_if = c.kind == NeuronKind::IF;
  double grad_r = 0.0;
  for (int64_t i = 0; i < M; ++i) {
    double g_v = 0.0;
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t k = t * M + i;
      const double h = f.h[k], s = f.s[k];
      const double sg = surrogate_derivative(c, h - c.v_threshold);
      double dv_dh;
      if (c.hard_reset)
        dv_dh = (1.0 - s) + (c.detach_reset ? 0.0 : (c.v_reset - h) * sg);
      else
        dv_dh = 1.0 - (c.detach_reset ? 0.0 : c.v_threshold * sg);
      const double grad_h = grad_s[k] * sg + g_v * dv_dh;
      if (is_if) {
        b.grad_x[k] = grad_h;
        g_v = grad_h;
      } else {
        b.grad_x[k] = grad_h * (c.decay_input ? r : 1.0);
        g_v = grad_h * (1.0 - r);
      }
      if (c.kind == NeuronKind::PLIF) {
        const double v_prev = t > 0 ? f.v[k - M] : initial_v(c, v0, i);
        grad_r += c.decay_input ? grad_h * (x[k] - (v_prev - Vr)) : grad_h * (Vr - v_prev);
      }
    }
  }
  b.grad_w = grad_r * r * (1.0 - r);  // dr/dw of r = sigmoid(w)
  return b;
}

}  // namespace ref
}  // namespace sm
