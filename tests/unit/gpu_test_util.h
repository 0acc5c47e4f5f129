// gpu_test_util.h — shared pieces of the *Gpu* unit tests: skipping without a GPU, a CPU
// unit and a GPU unit holding the same layer with the same initial weights, relative errors
// of device results against the CPU reference, and a one-layer forward/backward comparison.
// The CPU layers are the reference (themselves tested against naive double references and
// finite differences in test_<layer>.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "spikemesh/core/device.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/layers/unit.h"

#define SKIP_WITHOUT_GPU()                                                   \
  do {                                                                       \
    if (::sm::cuda_device_count() == 0) GTEST_SKIP() << "no GPU";            \
  } while (0)

namespace sm::gputest {

inline Device gpu() { return Device::cuda(0); }

// Host f64 copy of any tensor (device tensors are converted on the device, then copied).
inline Tensor host_f64(const Tensor& t) {
  const Tensor c = t.device().is_cuda() ? t.to_dtype(DType::F32).to(Device::cpu()) : t;
  return c.to_dtype(DType::F64);
}

// max |got - ref| / max |ref| (0 when both are all zero; infinite on a shape mismatch).
inline double rel_err(const Tensor& got, const Tensor& ref) {
  if (got.numel() != ref.numel()) return INFINITY;
  const Tensor g = host_f64(got), r = host_f64(ref);
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const double a = g.data<double>()[i], b = r.data<double>()[i];
    if (std::isnan(a) != std::isnan(b)) return INFINITY;
    diff = std::max(diff, std::fabs(a - b));
    scale = std::max(scale, std::fabs(b));
  }
  return scale > 0 ? diff / scale : diff;
}

// ||got - ref||₂ / ||ref||₂ (for whole-model gradients, robust to a rare spike flip).
inline double rel_l2(const Tensor& got, const Tensor& ref) {
  if (got.numel() != ref.numel()) return INFINITY;
  const Tensor g = host_f64(got), r = host_f64(ref);
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    const double d = g.data<double>()[i] - r.data<double>()[i];
    num += d * d;
    den += r.data<double>()[i] * r.data<double>()[i];
  }
  if (std::isnan(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// A gradient that is zero in exact arithmetic (a conv bias followed by a batch-statistics
// BatchNorm: BN's dx sums to zero per channel) holds only rounding noise on either device, and
// its relative error is noise over noise. Such a gradient (reference under kVanishingGrad of
// the largest reference gradient, same norm) is measured against that largest gradient
// instead; every other gradient against itself.
constexpr double kVanishingGrad = 1e-4;

inline double max_abs(const Tensor& t) {
  const Tensor h = host_f64(t);
  double m = 0.0;
  for (int64_t i = 0; i < h.numel(); ++i) m = std::max(m, std::fabs(h.data<double>()[i]));
  return m;
}

inline double norm_l2(const Tensor& t) {
  const Tensor h = host_f64(t);
  double s = 0.0;
  for (int64_t i = 0; i < h.numel(); ++i) s += h.data<double>()[i] * h.data<double>()[i];
  return std::sqrt(s);
}

// rel_err of one gradient; `largest` = the largest max_abs among the reference gradients.
inline double grad_rel_err(const Tensor& got, const Tensor& ref, double largest) {
  const double own = max_abs(ref), e = rel_err(got, ref);
  if (own >= kVanishingGrad * largest || largest <= 0) return e;
  return (own > 0 ? e * own : e) / largest;
}

// rel_l2 of one gradient; `largest` = the largest norm_l2 among the reference gradients.
inline double grad_rel_l2(const Tensor& got, const Tensor& ref, double largest) {
  const double own = norm_l2(ref), e = rel_l2(got, ref);
  if (own >= kVanishingGrad * largest || largest <= 0) return e;
  return (own > 0 ? e * own : e) / largest;
}

// Host f32 tensor, uniform in [lo, hi), or exactly 0/1 (flagged binary) when `binary`.
inline Tensor random_input(const Shape& s, uint64_t seed, bool binary = false, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(s, DType::F32);
  CounterRng rng(seed, "gputest/input");
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double u = rng.uniform(i);
    t.data<float>()[i] = binary ? (u < 0.3 ? 1.0f : 0.0f) : static_cast<float>(lo + (hi - lo) * u);
  }
  t.set_binary(binary);
  return t;
}

// The same layer in a CPU unit and a GPU unit, both f32 masters from the same seed.
struct UnitPair {
  std::unique_ptr<Unit> cpu, gpu;
};
inline UnitPair make_units(const std::function<LayerPtr()>& make, uint64_t seed = 11) {
  UnitPair p;
  p.cpu = std::make_unique<Unit>("");
  p.cpu->add(make());
  p.cpu->finalize(DType::F32, Device::cpu(), seed);
  p.gpu = std::make_unique<Unit>("");
  p.gpu->add(make());
  p.gpu->finalize(DType::F32, gpu(), seed);
  return p;
}

struct LayerCheck {
  DType gpu_dtype = DType::F32;  // activations on the GPU
  double tol = 1e-5;             // rel_err bound for y, dx and every gradient
  bool binary_input = false;
  bool training = true;
  bool check_split = true;       // split B then W on the GPU == fused B
  uint64_t seed = 21;
  double lo = -1.0, hi = 1.0;    // input range (non-binary)
};

// Forward + backward of the CPU unit (f32) and the GPU unit (gpu_dtype) on the same input
// and upstream gradient (both rounded to gpu_dtype first, so both sides see the same
// numbers); compares y, dx and every parameter gradient. Returns "" or what failed.
inline std::string compare_layer(UnitPair& u, const Shape& x_shape, const LayerCheck& c) {
  std::ostringstream err;
  Tensor x = random_input(x_shape, c.seed, c.binary_input, c.lo, c.hi);
  Tensor x_rounded = x.to_dtype(c.gpu_dtype).to_dtype(DType::F32);
  x_rounded.set_binary(c.binary_input);
  Tensor xg = x.to(gpu()).to_dtype(c.gpu_dtype);
  xg.set_binary(c.binary_input);
  Ctx ctx;
  ctx.training = c.training;
  ctx.seed = 5;
  u.cpu->reset_state();
  u.gpu->reset_state();
  u.cpu->zero_grad();
  u.gpu->zero_grad();
  const Tensor y_cpu = u.cpu->forward(x_rounded, ctx);
  const Tensor y_gpu = u.gpu->forward(xg, ctx);
  if (y_gpu.dtype() != c.gpu_dtype || !y_gpu.device().is_cuda())
    err << "GPU output is " << dtype_name(y_gpu.dtype()) << " on " << y_gpu.device().str() << "; ";
  const double ey = rel_err(y_gpu, y_cpu);
  if (!(ey <= c.tol)) err << "y rel err " << ey << "; ";
  Tensor dy = random_input(y_cpu.shape(), c.seed + 1).to_dtype(c.gpu_dtype);
  const Tensor dx_cpu = u.cpu->backward_input(dy.to_dtype(DType::F32), ctx);
  const Tensor dx_gpu = u.gpu->backward_input(dy.to(gpu()), ctx);
  const double ex = rel_err(dx_gpu, dx_cpu);
  if (!(ex <= c.tol)) err << "dx rel err " << ex << "; ";
  std::vector<Param*> pc = u.cpu->params(), pg = u.gpu->params();
  std::vector<Tensor> fused;
  double largest = 0.0;
  for (Param* p : pc) largest = std::max(largest, max_abs(p->grad));
  for (size_t k = 0; k < pc.size(); ++k) {
    const double eg = grad_rel_err(pg[k]->grad, pc[k]->grad, largest);
    if (!(eg <= c.tol)) err << "grad " << pc[k]->name << " rel err " << eg << "; ";
    fused.push_back(pg[k]->grad.clone());
  }
  if (c.check_split && !pg.empty()) {
    // The second forward must not leave a trace: its running statistics are put back, so the
    // caller compares the GPU's buffers after exactly one forward with the CPU's.
    std::vector<Tensor> kept;
    for (Buffer* b : u.gpu->buffers()) kept.push_back(b->value.clone());
    u.gpu->reset_state();
    u.gpu->zero_grad();
    u.gpu->forward(xg, ctx);
    ctx.split_wgrad = true;
    const Tensor dx2 = u.gpu->backward_input(dy.to(gpu()), ctx);
    u.gpu->backward_weight(ctx);
    ctx.split_wgrad = false;
    if (rel_err(dx2, dx_gpu) > 1e-6) err << "split B changes dx; ";
    for (size_t k = 0; k < pg.size(); ++k)
      if (rel_err(pg[k]->grad, fused[k]) > 1e-6) err << "split B/W changes grad " << pg[k]->name << "; ";
    std::vector<Buffer*> bufs = u.gpu->buffers();
    for (size_t k = 0; k < bufs.size(); ++k) bufs[k]->value.copy_from(kept[k]);
  }
  return err.str();
}

}  // namespace sm::gputest
