// batchnorm.cpp — BatchNorm1d/2d layer (PyTorch semantics) over [T, N, C, ...spatial].
//
// Training: per-channel batch mean and biased variance over count = T·N·spatial elements
// (summed over the group when ctx.bn_sync is set); running_mean/var move by `momentum`
// towards the batch mean and the UNBIASED variance (var·n/(n-1)). With n = 1 PyTorch
// refuses to train; we do not divide by zero: the correction factor is taken as 1, so the
// running variance moves towards the (zero) biased variance. Eval: running statistics.
//
// Saved per slot: a reference to ONE full-size tensor, per-channel mean and 1/std, the
// global count, and whether batch statistics were used. With split_wgrad, B releases the
// tensor and keeps only dγ = Σdy·x̂ and dβ = Σdy (local sums: the data-parallel reduction
// sums them later).
//
// Which tensor: normally the OUTPUT y = (x - μ)·a + β' (a = float(γ·istd) and β' = float(β)
// in the tensor's scalar), from which backward recovers x - μ = (y - β')/a per channel.
// y is the next layer's input (a neuron keeps that same tensor), so the conv output x can
// be freed right after this forward: a Conv → BN → LIF block holds one full-size tensor
// instead of two (this relies on the contract that no layer writes its input in place).
// Recovery costs accuracy only through the rounding of y: with y = (γ·x̂ + β)(1 + ε),
// |ε| ≤ u (unit roundoff of the scalar), the recovered x̂ is off by u·(|x̂| + |β/γ|) — i.e.
// it is the exact x̂ of an output perturbed by one rounding, the same size as the forward's
// own error in y. The forward's x̂ (μ rounded to the scalar) is already off by about
// u·(|x̂| + |μ|/σ), so while |β| ≤ kMaxBetaOverGamma·|γ| the recovery adds at most a few
// units of rounding on x̂'s scale (f32, measured: dx within 1 ulp; dγ relative differences
// ~1e-7 at |β/γ| = 1, ~8e-7 at |β/γ| = 8). Otherwise — γ = 0 (y carries no x at all),
// |β/γ| larger (the low bits of γ·x̂ are lost to β), a non-finite γ or β, or a scale that is
// not a normal number in the scalar — the forward saves the INPUT x as before. The choice
// is made per forward call for the whole layer (one channel failing suffices).
//
// Fused with the neuron or max pooling after it (forward_into, CPU): the statistics as above,
// then the next layer normalises x as it reads it (kernels/cpu/neuron.h NeuronInputAffine,
// bitwise this layer's y) — y is never written; this layer saves the input x, the next layer
// a reference to x and the normalisation, so the block still holds one full-size tensor. The
// next layer's backward also makes Σdy, Σdy·(x-μ) for this layer's backward (fused_sums: the
// neuron in its own pass, max pooling from its pooled gradient), which then reads dy and x
// once instead of twice.
//
// The sums use the running mean as a shift (identical on all ranks of a synced group) so
// that the single-pass Σ(x-k), Σ(x-k)² stays accurate in one all-reduce.
#include "spikemesh/layers/batchnorm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "batchnorm_common.h"
#include "device_ops.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/layers/fused_epilogue.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/slot_store.h"

namespace sm {
namespace {

// Largest |β/γ| for which backward recovers x̂ from the saved output (see the top comment).
constexpr double kMaxBetaOverGamma = 8.0;

struct Saved : bn_detail::SavedBase {
  std::vector<double> y_scale, y_offset;  // [C] a and β' exactly as the forward applied them
  std::vector<double> mean;    // [C] centre used in forward
  std::vector<double> invstd;  // [C]
  std::vector<double> scale;   // [C] γ·istd (the a of the input gradient)
  std::vector<double> dgamma, dbeta;  // [C], kept between B and W
  // Fused with the neuron after it: the backward sums that neuron's backward made (over the
  // dy this backward gets; kernels/cpu/neuron.h NeuronBnGradSums).
  std::shared_ptr<cpu::NeuronBnGradSums> fused_sums;
};

// The batch statistics of a checkpointed forward, kept for its recompute (memopt).
struct KeptStats {
  std::vector<double> mean, var;  // [C]
  double count = 0.0;
};

// memopt splits: the sums the pieces of one segment add up (per slot).
struct SplitSums {
  std::vector<double> sum, sumsq;  // [C] forward moments, shifted by the running mean
  double count = 0.0;
  std::vector<double> dy, dy_xc;   // [C] backward Σdy, Σdy·(x-μ); whole group's once finished
};

struct Impl {
  SlotStore<Saved> slots;
  SlotStore<KeptStats> kept;   // written with keep(): no SlotCapture drops it
  SlotStore<SplitSums> split;  // likewise
  SplitSums& split_of(int slot, size_t C) {
    if (!split.has(slot)) {
      SplitSums& a = split.keep(slot);
      a.sum.assign(C, 0.0), a.sumsq.assign(C, 0.0), a.dy.assign(C, 0.0), a.dy_xc.assign(C, 0.0);
    }
    return split.get(slot);
  }
};

Impl& impl_of(const std::shared_ptr<void>& p) { return *static_cast<Impl*>(p.get()); }

std::vector<double> as_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::F64) {
    const double* p = t.data<double>();
    v.assign(p, p + t.numel());
  } else {
    const float* p = t.data<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  }
  return v;
}

void store_doubles(Tensor& t, const std::vector<double>& v) {
  if (t.dtype() == DType::F64) {
    std::copy(v.begin(), v.end(), t.data<double>());
  } else {
    float* p = t.data<float>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  }
}

void add_doubles(Tensor& t, const std::vector<double>& v) {
  if (t.dtype() == DType::F64) {
    double* p = t.data<double>();
    for (size_t i = 0; i < v.size(); ++i) p[i] += v[i];
  } else {
    float* p = t.data<float>();
    for (size_t i = 0; i < v.size(); ++i) p[i] += static_cast<float>(v[i]);
  }
}

// All-reduces the concatenation of the given [C] vectors (and optional extra scalars).
void all_reduce_vectors(Collectives& coll, std::vector<std::vector<double>*> vecs,
                        double* extra) {
  int64_t n = extra ? 1 : 0;
  for (auto* v : vecs) n += static_cast<int64_t>(v->size());
  Tensor buf = Tensor::empty({n}, DType::F64);  // [Σ C (+1)]
  double* p = buf.data<double>();
  int64_t o = 0;
  for (auto* v : vecs)
    for (double e : *v) p[o++] = e;
  if (extra) p[o++] = *extra;
  coll.all_reduce_sum(buf);
  p = buf.data<double>();
  o = 0;
  for (auto* v : vecs)
    for (double& e : *v) e = p[o++];
  if (extra) *extra = p[o++];
}

// The per-channel scale and offset the forward kernel applies in scalar T, as doubles.
// Returns false when x̂ cannot be recovered accurately from y for some channel.
template <typename T>
bool output_recoverable(const std::vector<double>& gamma, const std::vector<double>& beta,
                        const std::vector<double>& scale, std::vector<double>& y_scale,
                        std::vector<double>& y_offset) {
  const size_t C = gamma.size();
  y_scale.resize(C);
  y_offset.resize(C);
  for (size_t c = 0; c < C; ++c) {
    y_scale[c] = static_cast<double>(static_cast<T>(scale[c]));
    y_offset[c] = static_cast<double>(static_cast<T>(beta[c]));
    const bool ok = std::isfinite(gamma[c]) && std::isfinite(y_offset[c]) && gamma[c] != 0.0 &&
                    std::isfinite(y_scale[c]) &&
                    std::fabs(y_scale[c]) >= static_cast<double>(std::numeric_limits<T>::min()) &&
                    std::fabs(beta[c]) <= kMaxBetaOverGamma * std::fabs(gamma[c]);
    if (!ok) return false;
  }
  return true;
}

}  // namespace

namespace bn_detail {

cpu::BnShape bn_shape(const Tensor& x) {
  cpu::BnShape s;
  s.outer = x.dim(0) * x.dim(1);
  s.channels = x.dim(2);
  s.inner = 1;
  for (int i = 3; i < x.ndim(); ++i) s.inner *= x.dim(i);
  return s;
}

void check_input(const BatchNorm& bn, const Tensor& x) {
  SM_CHECK(x.ndim() >= 2, "batchnorm input needs [T, N, ...], got " << shape_str(x.shape()));
  bn.output_shape(Shape(x.shape().begin() + 2, x.shape().end()));
  layer_ops::check_activation(x, "batchnorm", bn.name());
}

void begin_saved(SavedBase& sv, const Ctx& ctx) {
  sv.batch_stats = ctx.training;
  sv.synced = ctx.training && ctx.bn_sync != nullptr;
  sv.time_repeat = static_cast<double>(ctx.time_repeat);
}

void check_backward(const SavedBase& sv, const Tensor& dy, const Ctx& ctx) {
  SM_CHECK(sv.act.defined(), "batchnorm backward_input ran twice for slot " << ctx.slot);
  SM_CHECK(dy.shape() == sv.act.shape(), "batchnorm backward: dy " << shape_str(dy.shape()) << " vs forward "
                                                                   << shape_str(sv.act.shape()));
  SM_CHECK(dy.dtype() == sv.act.dtype() && dy.device() == sv.act.device(), "batchnorm backward: dtype/device mismatch");
  SM_CHECK(sv.synced == (sv.batch_stats && ctx.bn_sync != nullptr),
           "batchnorm backward: synced-BN setting differs from forward");
}

}  // namespace bn_detail

using bn_detail::bn_shape;

BatchNorm::BatchNorm(const BatchNormConfig& c) : cfg_(c) {
  if (c.num_features < 1)
    SM_INPUT_ERROR("batchnorm: num_features must be >= 1 (got " << c.num_features << ")");
  if (c.spatial_dims != 1 && c.spatial_dims != 2)
    SM_INPUT_ERROR("batchnorm: spatial_dims must be 1 (BatchNorm1d) or 2 (BatchNorm2d), got "
                   << c.spatial_dims);
  if (!(c.eps > 0)) SM_INPUT_ERROR("batchnorm: eps must be > 0 (got " << c.eps << ")");
  if (!(c.momentum >= 0 && c.momentum <= 1))
    SM_INPUT_ERROR("batchnorm: momentum must be in [0, 1] (got " << c.momentum << ")");
  const Shape cs{c.num_features};
  add_param("weight", cs, InitSpec::constant(1.0));
  add_param("bias", cs, InitSpec::constant(0.0));
  add_buffer("running_mean", cs, 0.0);
  add_buffer("running_var", cs, 1.0);
  add_buffer("num_batches_tracked", {}, 0.0, /*integer=*/true);
  impl_ = std::make_shared<Impl>();
}

Shape BatchNorm::output_shape(const Shape& in) const {
  const bool ok_rank = cfg_.spatial_dims == 1 ? (in.size() == 1 || in.size() == 2) : in.size() == 3;
  if (!ok_rank)
    SM_INPUT_ERROR(type() << " expects per-sample input "
                          << (cfg_.spatial_dims == 1 ? "[C] or [C, L]" : "[C, H, W]") << ", got "
                          << shape_str(in));
  const int64_t C = own_params_[0]->local_shape[0];  // num_features, or its tp channel shard
  if (in[0] != C)
    SM_INPUT_ERROR(type() << " has " << C << " channels" << (C != cfg_.num_features ? " (its tensor-parallel shard)" : "")
                          << " but its input " << shape_str(in) << " has " << in[0]);
  return in;
}

template <typename T>
static Tensor bn_forward_typed(const Tensor& x, const cpu::BnShape& s, const std::vector<double>& mean,
                               const std::vector<double>& scale, const std::vector<double>& offset) {
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  cpu::bn_normalize<T>(x.data<T>(), s, mean.data(), scale.data(), offset.data(), y.data<T>());
  return y;
}

namespace {

// Σ(x - rm), Σ(x - rm)² per channel (shifted by the running mean rm).
void shifted_moments(const Tensor& x, const cpu::BnShape& s, const std::vector<double>& rm, std::vector<double>& sum,
                     std::vector<double>& sumsq) {
  if (x.dtype() == DType::F64)
    cpu::bn_shifted_moments<double>(x.data<double>(), s, rm.data(), sum.data(), sumsq.data());
  else
    cpu::bn_shifted_moments<float>(x.data<float>(), s, rm.data(), sum.data(), sumsq.data());
}

// A piece of a memopt split (ctx.bn_moments_for): its moments added to the slot's sums.
void add_piece_moments(SplitSums& a, const Tensor& x, const cpu::BnShape& s, const std::vector<double>& rm) {
  const size_t C = static_cast<size_t>(s.channels);
  std::vector<double> sum(C), sumsq(C);
  shifted_moments(x, s, rm, sum, sumsq);
  for (size_t c = 0; c < C; ++c) a.sum[c] += sum[c], a.sumsq[c] += sumsq[c];
  a.count += static_cast<double>(s.count());
}

// The running statistics a training forward moves (buffers running_mean, running_var,
// num_batches_tracked) and its momentum.
struct RunningStats {
  Buffer& mean;
  Buffer& var;
  Buffer& tracked;
  double momentum;
};

// Training: the batch statistics (all-reduced when synced) into mean and var, the running
// statistics moved towards them (rm: running_mean as doubles), sv.count the group's count.
void batch_statistics(const Tensor& x, const cpu::BnShape& s, const Ctx& ctx, std::vector<double>& rm, RunningStats run,
                      Saved& sv, std::vector<double>& mean, std::vector<double>& var) {
  const size_t C = static_cast<size_t>(s.channels);
  std::vector<double> sum(C), sumsq(C);
  double count = static_cast<double>(s.count());
  shifted_moments(x, s, rm, sum, sumsq);
  if (sv.time_repeat != 1.0) {  // one step standing for time_repeat identical ones
    for (size_t c = 0; c < C; ++c) sum[c] *= sv.time_repeat, sumsq[c] *= sv.time_repeat;
    count *= sv.time_repeat;
  }
  if (sv.synced) all_reduce_vectors(*ctx.bn_sync, {&sum, &sumsq}, &count);
  SM_CHECK(count > 0, "batchnorm over an empty batch");
  // n = 1: PyTorch raises; we skip Bessel's correction instead of dividing by zero.
  const double bessel = count > 1 ? count / (count - 1) : 1.0;
  std::vector<double> rv = as_doubles(run.var.value);
  const double m = run.momentum;
  for (size_t c = 0; c < C; ++c) {
    const double d = sum[c] / count;
    mean[c] = rm[c] + d;
    var[c] = std::max(0.0, sumsq[c] / count - d * d);
    rm[c] = (1 - m) * rm[c] + m * mean[c];
    rv[c] = (1 - m) * rv[c] + m * var[c] * bessel;
  }
  store_doubles(run.mean.value, rm);
  store_doubles(run.var.value, rv);
  run.tracked.value.data<int64_t>()[0] += 1;
  sv.count = count;
}

// Fused with `next` (a Neuron or max pooling): it normalises as it reads x; the slot keeps x
// (backward works from the saved input) and the normalisation.
Tensor forward_fused(Saved& sv, const Tensor& x, const cpu::BnShape& s, std::vector<double> mean,
                     std::vector<double> invstd, std::vector<double> scale, const std::vector<double>& beta, Layer* next,
                     Ctx& ctx) {
  auto in = std::make_shared<cpu::NeuronInputAffine>();
  in->center = mean;
  in->scale = scale;
  in->offset = beta;
  in->channels = s.channels;
  in->inner = s.inner;
  sv.saved_output = false;
  sv.act = x;
  sv.mean = std::move(mean);
  sv.invstd = std::move(invstd);
  sv.scale = std::move(scale);
  sv.fused_sums = std::make_shared<cpu::NeuronBnGradSums>();
  if (auto* neuron = dynamic_cast<Neuron*>(next)) return neuron->forward_normalized_cpu(x, std::move(in), sv.fused_sums, ctx);
  return static_cast<Pool2d*>(next)->forward_normalized_cpu(x, std::move(in), sv.fused_sums, ctx);
}

// Unfused: y = (x - μ)·scale + β written; the slot keeps y when x is recoverable from it
// (output_recoverable), else x; and the normalisation.
Tensor normalize_and_save(Saved& sv, const Tensor& x, const cpu::BnShape& s, std::vector<double> mean,
                          std::vector<double> invstd, std::vector<double> scale, const std::vector<double>& gamma,
                          const std::vector<double>& beta) {
  Tensor y = x.dtype() == DType::F64 ? bn_forward_typed<double>(x, s, mean, scale, beta)
                                     : bn_forward_typed<float>(x, s, mean, scale, beta);
  sv.saved_output = x.dtype() == DType::F64
                        ? output_recoverable<double>(gamma, beta, scale, sv.y_scale, sv.y_offset)
                        : output_recoverable<float>(gamma, beta, scale, sv.y_scale, sv.y_offset);
  if (sv.saved_output) {
    sv.act = y;  // shared with the next layer; x is no longer referenced here
  } else {
    sv.act = x;
    sv.y_scale.clear();
    sv.y_offset.clear();
  }
  sv.mean = std::move(mean);
  sv.invstd = std::move(invstd);
  sv.scale = std::move(scale);
  return y;
}

}  // namespace

Tensor BatchNorm::forward_cpu(const Tensor& x, Ctx& ctx) { return forward_cpu_then(x, ctx, nullptr); }

bool BatchNorm::fusable_after_batchnorm(const Layer& next) {
  if (dynamic_cast<const Neuron*>(&next)) return true;
  const auto* pool = dynamic_cast<const Pool2d*>(&next);
  return pool && pool->kind() == PoolKind::Max;
}

Tensor BatchNorm::forward_into(Layer& next, const Tensor& x, Ctx& ctx) {
  const bool neuron = dynamic_cast<Neuron*>(&next) != nullptr;
  SM_CHECK(fusable_forward(ctx) && fusable_after_batchnorm(next) && (x.device().is_cpu() || neuron),
           "batchnorm '" << name() << "': the fused epilogue is for fusable forwards into a neuron (CPU or GPU) or "
                                      "max pooling (CPU)");
  last_device_ = x.device();
  ++fused_forwards_;
#ifdef SPIKEMESH_HAVE_CUDA
  if (x.device().is_cuda()) return forward_cuda_then(x, ctx, &next);
#endif
  return forward_cpu_then(x, ctx, &next);
}

Tensor BatchNorm::forward_cpu_then(const Tensor& x, Ctx& ctx, Layer* next) {
  bn_detail::check_input(*this, x);
  const cpu::BnShape s = bn_shape(x);
  const size_t C = static_cast<size_t>(s.channels);
  std::vector<double> rm = as_doubles(buffer(0).value);
  Impl& im = impl_of(impl_);
  if (ctx.training && ctx.bn_moments_for == this) {  // a piece of a split: its moments, nothing more
    add_piece_moments(im.split_of(ctx.slot, C), x, s, rm);
    return Tensor();
  }
  Saved& sv = im.slots.fresh(ctx.slot);
  bn_detail::begin_saved(sv, ctx);
  std::vector<double> mean(C), var(C);
  if (ctx.training && (ctx.recompute || ctx.bn_split)) {  // the kept statistics, no update
    const KeptStats& k = im.kept.get(ctx.slot);
    mean = k.mean;
    var = k.var;
    sv.count = k.count;
    if (!ctx.bn_split) im.kept.release(ctx.slot);
  } else if (ctx.training) {
    batch_statistics(x, s, ctx, rm, RunningStats{buffer(0), buffer(1), buffer(2), cfg_.momentum}, sv, mean, var);
    if (ctx.checkpointed) im.kept.keep(ctx.slot) = KeptStats{mean, var, sv.count};
  } else {
    mean = rm;
    var = as_doubles(buffer(1).value);
    sv.count = static_cast<double>(s.count());
  }
  const std::vector<double> gamma = as_doubles(param(0).value);
  const std::vector<double> beta = as_doubles(param(1).value);
  SM_CHECK(gamma.size() == C && beta.size() == C, "batchnorm params not bound to [C]");
  std::vector<double> invstd(C), scale(C);
  for (size_t c = 0; c < C; ++c) {
    invstd[c] = 1.0 / std::sqrt(var[c] + cfg_.eps);
    scale[c] = gamma[c] * invstd[c];
  }
  if (next)  // fused: the next layer normalises as it reads x; backward works from x (saved input)
    return forward_fused(sv, x, s, std::move(mean), std::move(invstd), std::move(scale), beta, next, ctx);
  return normalize_and_save(sv, x, s, std::move(mean), std::move(invstd), std::move(scale), gamma, beta);
}

template <typename T>
static Tensor bn_backward_typed(const Tensor& dy, const Tensor& x, const cpu::BnShape& s,
                                const std::vector<double>& mean, const std::vector<double>& a,
                                const std::vector<double>& b, const std::vector<double>& d, bool owned) {
  // Elementwise: dx over dy when the caller's loop owns it and holds the only handle (layer.h).
  Tensor dx = owned ? Tensor(dy).set_binary(false) : Tensor::empty(dy.shape(), dy.dtype());
  cpu::bn_backward_input<T>(dy.data<T>(), x.data<T>(), s, mean.data(), a.data(), b.data(),
                            d.data(), dx.data<T>());
  return dx;
}

Tensor BatchNorm::backward_input_cpu(const Tensor& dy, Ctx& ctx) {
  Impl& im = impl_of(impl_);
  Saved& sv = im.slots.get(ctx.slot);
  bn_detail::check_backward(sv, dy, ctx);
  const cpu::BnShape s = bn_shape(dy);
  const size_t C = static_cast<size_t>(s.channels);
  // The kernels see act - center; x - μ = (act - center) / unscale per channel.
  const std::vector<double>& center = sv.saved_output ? sv.y_offset : sv.mean;
  const std::vector<double> unscale = sv.saved_output ? sv.y_scale : std::vector<double>(C, 1.0);
  std::vector<double> sum_dy(C), sum_dy_xc(C);
  if (sv.fused_sums && sv.fused_sums->of == dy.raw() && sv.fused_sums->dy.size() == C) {  // made by the next layer
    sum_dy = std::move(sv.fused_sums->dy);
    sum_dy_xc = std::move(sv.fused_sums->dy_xc);
    sv.fused_sums.reset();
    ++fused_sums_taken_;
  } else if (dy.dtype() == DType::F64)
    cpu::bn_backward_moments<double>(dy.data<double>(), sv.act.data<double>(), s, center.data(),
                                     sum_dy.data(), sum_dy_xc.data());
  else
    cpu::bn_backward_moments<float>(dy.data<float>(), sv.act.data<float>(), s, center.data(),
                                    sum_dy.data(), sum_dy_xc.data());
  if (sv.saved_output)
    for (size_t c = 0; c < C; ++c) sum_dy_xc[c] /= unscale[c];  // Σ dy·(x - μ)
  // Parameter gradients are the LOCAL sums (the data-parallel reduction adds ranks).
  sv.dbeta = sum_dy;
  sv.dgamma.resize(C);
  for (size_t c = 0; c < C; ++c) sv.dgamma[c] = sum_dy_xc[c] * sv.invstd[c];

  if (ctx.bn_grad_sums_for == this) {  // a piece of a split: its sums, nothing more
    SplitSums& acc = im.split_of(ctx.slot, C);
    for (size_t c = 0; c < C; ++c) acc.dy[c] += sum_dy[c], acc.dy_xc[c] += sum_dy_xc[c];
    im.slots.release(ctx.slot);
    return Tensor();
  }
  const std::vector<double>& a = sv.scale;  // γ·istd
  std::vector<double> b(C, 0.0), d(C, 0.0);
  if (sv.batch_stats) {
    if (ctx.bn_split) {  // the whole segment's sums (finished over the group)
      const SplitSums& acc = im.split.get(ctx.slot);
      sum_dy = acc.dy;
      sum_dy_xc = acc.dy_xc;
    } else if (sv.synced) {
      all_reduce_vectors(*ctx.bn_sync, {&sum_dy, &sum_dy_xc}, nullptr);
    }
    for (size_t c = 0; c < C; ++c) {
      const double is = sv.invstd[c];
      // One step standing for time_repeat: its dy is the steps' sum, so the mean terms count
      // once per step (time_invariant_prefix.h).
      b[c] = -a[c] * is * is * sum_dy_xc[c] / sv.count / unscale[c] * sv.time_repeat;  // per unit of act - center
      d[c] = -a[c] * sum_dy[c] / sv.count * sv.time_repeat;
    }
  }
  const bool owned = ctx.dy_owned && dy.sole_handle();
  Tensor dx = dy.dtype() == DType::F64 ? bn_backward_typed<double>(dy, sv.act, s, center, a, b, d, owned)
                                       : bn_backward_typed<float>(dy, sv.act, s, center, a, b, d, owned);
  if (ctx.split_wgrad) {
    sv.act = Tensor();  // W needs only the two [C] sums
  } else {
    backward_weight_cpu(ctx);
  }
  return dx;
}

void BatchNorm::finish_split_moments(Ctx& ctx) {
  SpStatsScope stats(sp_, ctx);  // a sharded region: the sums over tp (layers/sequence_parallel.h)
#ifdef SPIKEMESH_HAVE_CUDA
  if (last_device_.is_cuda()) return finish_split_moments_cuda(ctx);
#endif
  Impl& im = impl_of(impl_);
  SplitSums& a = im.split.get(ctx.slot);
  const size_t C = a.sum.size();
  double count = a.count;
  if (ctx.bn_sync) all_reduce_vectors(*ctx.bn_sync, {&a.sum, &a.sumsq}, &count);
  SM_CHECK(count > 0, "batchnorm over an empty batch");
  const double bessel = count > 1 ? count / (count - 1) : 1.0;  // as forward_cpu
  std::vector<double> rm = as_doubles(buffer(0).value), rv = as_doubles(buffer(1).value);
  KeptStats& k = im.kept.keep(ctx.slot);
  k.mean.resize(C), k.var.resize(C), k.count = count;
  const double m = cfg_.momentum;
  for (size_t c = 0; c < C; ++c) {
    const double d = a.sum[c] / count;
    k.mean[c] = rm[c] + d;
    k.var[c] = std::max(0.0, a.sumsq[c] / count - d * d);
    rm[c] = (1 - m) * rm[c] + m * k.mean[c];
    rv[c] = (1 - m) * rv[c] + m * k.var[c] * bessel;
  }
  store_doubles(buffer(0).value, rm);
  store_doubles(buffer(1).value, rv);
  buffer(2).value.data<int64_t>()[0] += 1;
}

void BatchNorm::finish_split_grad_sums(Ctx& ctx) {
  SpStatsScope stats(sp_, ctx);  // a sharded region: the sums over tp (layers/sequence_parallel.h)
#ifdef SPIKEMESH_HAVE_CUDA
  if (last_device_.is_cuda()) return finish_split_grad_sums_cuda(ctx);
#endif
  SplitSums& a = impl_of(impl_).split.get(ctx.slot);
  if (ctx.bn_sync) all_reduce_vectors(*ctx.bn_sync, {&a.dy, &a.dy_xc}, nullptr);
}

void BatchNorm::drop_split_state(int slot) {
#ifdef SPIKEMESH_HAVE_CUDA
  drop_split_state_cuda(slot);
#endif
  Impl& im = impl_of(impl_);
  im.split.release(slot);
  im.kept.release(slot);
}

void BatchNorm::backward_weight_cpu(Ctx& ctx) {
  Impl& im = impl_of(impl_);
  Saved& sv = im.slots.get(ctx.slot);
  SM_CHECK(sv.dgamma.size() == static_cast<size_t>(param(0).local_shape[0]),
           "batchnorm backward_weight before backward_input");
  add_doubles(param(0).grad, sv.dgamma);
  add_doubles(param(1).grad, sv.dbeta);
  im.slots.release(ctx.slot);
}

}  // namespace sm
