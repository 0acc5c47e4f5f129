// gradient_check.h — finite-difference gradient checking of any Layer in double precision
// (Caffe's test_gradient_check_util in spirit). loss(x, θ) = Σ y ⊙ R for a fixed random R;
// analytic dx and parameter gradients from backward are compared with central differences,
// and the split B-then-W path must give the same gradients as the fused backward.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include "spikemesh/core/rng.h"
#include "spikemesh/layers/unit.h"

namespace sm::test {

struct GradCheckOptions {
  double eps = 1e-6;
  double rtol = 1e-5;      // relative to the largest |gradient| of the tensor checked
  double atol = 1e-8;
  bool smooth_spikes = false;
  bool training = true;
  int max_checks = 48;     // finite differences per tensor (random subset when larger)
  uint64_t seed = 7;
  bool check_split = true; // B with split_wgrad then W == fused backward
};

// The elements of t as doubles (for element-wise comparisons in tests).
inline std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

inline Tensor random_tensor(const Shape& shape, DType dt, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(shape, dt);
  CounterRng rng(seed, "test/random_tensor");
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = lo + (hi - lo) * rng.uniform(i);
    if (dt == DType::F32) t.data<float>()[i] = static_cast<float>(v);
    else t.data<double>()[i] = v;
  }
  return t;
}

// A unit named "" holding one layer, finalised (parameters bound and initialised).
inline std::unique_ptr<Unit> wrap(LayerPtr layer, DType dt = DType::F64, uint64_t seed = 1) {
  auto u = std::make_unique<Unit>("");
  u->add(std::move(layer));
  u->finalize(dt, Device::cpu(), seed);
  return u;
}

// The tolerance measure of docs/semantics.md §9: the largest difference over the largest
// magnitude of the reference b (1e300 when the sizes differ).
inline double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e300;
  double d = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return d / std::max(scale, 1e-300);
}

namespace detail {
inline double dot(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) s += a.at(i) * b.at(i);
  return s;
}
inline void set(Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::F32) t.data<float>()[i] = static_cast<float>(v);
  else t.data<double>()[i] = v;
}
inline double max_abs(const Tensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.at(i)));
  return m;
}
inline std::vector<int64_t> sample(int64_t n, int max_checks, uint64_t seed) {
  std::vector<int64_t> idx;
  if (n <= max_checks) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  CounterRng rng(seed, "test/sample");
  for (int k = 0; k < max_checks; ++k) idx.push_back(static_cast<int64_t>(rng.uniform(k) * n) % n);
  return idx;
}
}  // namespace detail

inline ::testing::AssertionResult check_layer_gradients(Layer& layer, const Tensor& x_in,
                                                        const GradCheckOptions& o = {}) {
  Ctx ctx;
  ctx.training = o.training;
  ctx.smooth_spikes = o.smooth_spikes;
  Tensor x = x_in.clone();
  auto run = [&](const Tensor& xx) {
    layer.reset_state();
    return layer.forward(xx, ctx);
  };
  Tensor y0 = run(x);
  Tensor R = random_tensor(y0.shape(), y0.dtype(), o.seed + 1000);
  auto loss = [&]() { return detail::dot(run(x), R); };

  std::vector<Param*> ps = layer.params();
  for (Param* p : ps) p->grad.zero();
  run(x);
  ctx.split_wgrad = false;
  Tensor dx = layer.backward_input(R, ctx).clone();
  std::vector<Tensor> grads;
  for (Param* p : ps) grads.push_back(p->grad.clone());

  std::ostringstream err;
  if (o.check_split) {
    for (Param* p : ps) p->grad.zero();
    run(x);
    ctx.split_wgrad = true;
    Tensor dx2 = layer.backward_input(R, ctx);
    layer.backward_weight(ctx);
    ctx.split_wgrad = false;
    for (int64_t i = 0; i < dx.numel(); ++i)
      if (std::fabs(dx.at(i) - dx2.at(i)) > 1e-12 * (1 + std::fabs(dx.at(i))))
        return ::testing::AssertionFailure() << "split B gives a different dx at " << i << ": " << dx2.at(i)
                                             << " vs " << dx.at(i);
    for (size_t k = 0; k < ps.size(); ++k)
      for (int64_t i = 0; i < grads[k].numel(); ++i)
        if (std::fabs(grads[k].at(i) - ps[k]->grad.at(i)) > 1e-12 * (1 + std::fabs(grads[k].at(i))))
          return ::testing::AssertionFailure() << "B/W split gives a different grad of " << ps[k]->name << "["
                                               << i << "]: " << ps[k]->grad.at(i) << " vs " << grads[k].at(i);
  }

  auto compare = [&](const std::string& what, Tensor& target, const Tensor& analytic) -> bool {
    double scale = detail::max_abs(analytic);
    for (int64_t i : detail::sample(target.numel(), o.max_checks, o.seed)) {
      double orig = target.at(i);
      detail::set(target, i, orig + o.eps);
      double lp = loss();
      detail::set(target, i, orig - o.eps);
      double lm = loss();
      detail::set(target, i, orig);
      double fd = (lp - lm) / (2 * o.eps);
      double a = analytic.at(i);
      if (std::fabs(a - fd) > o.atol + o.rtol * std::max(scale, std::fabs(fd))) {
        err << what << "[" << i << "]: analytic " << a << " vs finite difference " << fd
            << " (scale " << scale << ")";
        return false;
      }
    }
    return true;
  };
  if (!compare("dx", x, dx)) return ::testing::AssertionFailure() << err.str();
  for (size_t k = 0; k < ps.size(); ++k)
    if (!compare("d " + ps[k]->name, ps[k]->value, grads[k])) return ::testing::AssertionFailure() << err.str();
  return ::testing::AssertionSuccess();
}

}  // namespace sm::test
