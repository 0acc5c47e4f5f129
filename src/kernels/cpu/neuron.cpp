// neuron.cpp (kernels/cpu) — fused multi-step LIF / PLIF / IF forward and BPTT
// (docs/semantics.md §5). Neurons are processed in fixed blocks of kBlock (parallel over blocks);
// inside a block the time loop is outermost and the block's membranes live in a small local array,
// so each neuron is visited once per step in one pass over T and the inner loop over
// neighbouring neurons reads contiguous memory.
// Backward recomputes a block's h_t from the saved input x into a per-thread [T, kBlock]
// scratch (one forward sweep, same charge/fire/reset code as the forward: bitwise the
// forward's h, the build does not contract to FMA) and then sweeps t = T-1 .. 0 over it.
#include "spikemesh/kernels/cpu/neuron.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "spikemesh/core/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define SM_NEURON_VECTOR_EXP 1
#else
#define SM_NEURON_VECTOR_EXP 0
#endif

// no-trapping-math lets GCC if-convert and vectorise the comparisons in the inner loops
// (h >= v_th); results do not change, it only drops the assumption that FP exception flags
// are observed. fp-contract=off: GCC contracts a·b + c into FMAs by default in C++ and may do
// so differently in two loops; without contraction every operation rounds as written, so the
// backward's recomputed h_t is bitwise the forward's (a spike decided at h ≈ v_th must not
// flip between the two).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=off")
#elif defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace sm {
namespace cpu {
namespace {

constexpr int64_t kBlock = 64;
// Below this many elements (T·M) a kernel runs on one thread (no fork/join cost).
constexpr int64_t kParallelMin = 1 << 15;

#if SM_NEURON_VECTOR_EXP
// e^x for 8 floats: x = n·ln2 + r (|r| ≤ ln2/2, ln2 split in two for an exact n·ln2), e^r by
// Cephes' degree-6 minimax polynomial, 2^n into the exponent bits. Within 2 ulp of the exact
// value for x in [−87.3, 88.3]; +inf above (as expf overflows), 2⁻¹²⁶·(…) below (its user,
// the sigmoid, adds it to 1). tests/unit/test_neuron.cpp checks the surrogate gradient built
// on it against the double formula.
inline __m256 exp8(__m256 x_in) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f);
  const __m256 x = _mm256_min_ps(_mm256_max_ps(x_in, _mm256_set1_ps(-87.3365447505531f)), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_blendv_ps(result, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x_in, hi, _CMP_GT_OQ));
}

// alpha·σ(α(h − v_th))·(1 − σ(...)) for 8 floats, σ(z) = 1 / (1 + e^(−z)).
inline __m256 sigmoid_grad8(__m256 h, float v_th, float alpha) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 u = _mm256_sub_ps(h, _mm256_set1_ps(v_th));
  const __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_mul_ps(_mm256_set1_ps(-alpha), u))));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(alpha), sig), _mm256_sub_ps(one, sig));
}
#endif

// The configuration converted to the kernel's scalar once. The options that branch are
// compile-time parameters so that the inner loops are branch-free (and vectorise where the
// surrogate needs no transcendental function).
template <typename T, bool kDecayInput, bool kHardReset, bool kDetach, bool kSmooth, bool kATan>
struct Neuron {
  T r, one_minus_r, v_th, v_r_charge, v_reset, alpha, rest;
  explicit Neuron(const NeuronKernelConfig& c)
      : r(T(c.r)), one_minus_r(T(1) - T(c.r)), v_th(T(c.v_threshold)),
        v_r_charge(kHardReset ? T(c.v_reset) : T(0)), v_reset(T(c.v_reset)), alpha(T(c.alpha)),
        rest(T(c.rest())) {}

  T charge(T v, T x) const {
    if constexpr (kDecayInput) return v + r * (x - (v - v_r_charge));
    else return v - r * (v - v_r_charge) + x;
  }
  // Spike (step, or the surrogate's primitive in smooth mode).
  T fire(T h) const {
    if constexpr (!kSmooth) {
      return h >= v_th ? T(1) : T(0);
    } else {
      const T u = h - v_th;
      if constexpr (kATan) return std::atan(T(M_PI / 2) * alpha * u) / T(M_PI) + T(0.5);
      else return T(1) / (T(1) + std::exp(-alpha * u));
    }
  }
  T reset(T h, T s) const {
    if constexpr (kHardReset) return s * v_reset + (T(1) - s) * h;
    else return h - s * v_th;
  }
  // surrogate'(h - v_th)
  T surrogate_grad(T h) const {
    const T u = h - v_th;
    if constexpr (kATan) {
      const T z = T(M_PI / 2) * alpha * u;
      return (alpha / T(2)) / (T(1) + z * z);
    } else {
      const T sig = T(1) / (T(1) + std::exp(-alpha * u));
      return alpha * sig * (T(1) - sig);
    }
  }
  // out[j] = surrogate_grad(h[j]) for j < n; the f32 sigmoid through exp8 (every element, the
  // tail padded, so a neuron's value does not depend on its place in the block).
  void surrogate_grads(const T* h, int64_t n, T* out) const {
#if SM_NEURON_VECTOR_EXP
    if constexpr (std::is_same_v<T, float> && !kATan) {
      int64_t j = 0;
      for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, sigmoid_grad8(_mm256_loadu_ps(h + j), v_th, alpha));
      if (j < n) {
        float tail[8] = {};
        std::copy(h + j, h + n, tail);
        _mm256_storeu_ps(tail, sigmoid_grad8(_mm256_loadu_ps(tail), v_th, alpha));
        std::copy(tail, tail + (n - j), out + j);
      }
      return;
    }
#endif
    for (int64_t j = 0; j < n; ++j) out[j] = surrogate_grad(h[j]);
  }
  // ∂v_t/∂h_t given s_t and sg_t.
  T dv_dh(T h, T s, T sg) const {
    if constexpr (kHardReset) return kDetach ? T(1) - s : (T(1) - s) + (v_reset - h) * sg;
    else return kDetach ? T(1) : T(1) - v_th * sg;
  }
};

// Calls f(std::bool_constant<b>{}).
template <class F>
void with_bool(bool b, F&& f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

// Calls f(Neuron<T, ...>{c}) with the configuration's options as compile-time flags.
template <typename T, class F>
void with_neuron(const NeuronKernelConfig& c, F&& f) {
  with_bool(c.decay_input, [&](auto decay) {
    with_bool(c.hard_reset, [&](auto hard) {
      with_bool(c.detach_reset, [&](auto detach) {
        with_bool(c.smooth, [&](auto smooth) {
          with_bool(c.surrogate == SurrogateFn::ATan, [&](auto atan) {
            f(Neuron<T, decltype(decay)::value, decltype(hard)::value, decltype(detach)::value,
                     decltype(smooth)::value, decltype(atan)::value>(c));
          });
        });
      });
    });
  });
}

// out[j] = fma(x[j] - c, s, o) for j < n, the constants per element (kPer) or one for all.
// Explicit FMA instructions: under this file's fp-contract=off GCC does not vectorise
// std::fma (a scalar loop, 3x the neuron's own time); an fma is exactly rounded however it
// is computed, so this equals bn_normalize's bitwise.
template <typename T, bool kPer>
inline void affine_row(const T* x, int64_t n, const T* c, const T* s, const T* o, T* out) {
  int64_t j = 0;
#if SM_NEURON_VECTOR_EXP
  if constexpr (std::is_same_v<T, float>) {
    for (; j + 8 <= n; j += 8) {
      const __m256 cj = kPer ? _mm256_loadu_ps(c + j) : _mm256_set1_ps(*c);
      const __m256 sj = kPer ? _mm256_loadu_ps(s + j) : _mm256_set1_ps(*s);
      const __m256 oj = kPer ? _mm256_loadu_ps(o + j) : _mm256_set1_ps(*o);
      _mm256_storeu_ps(out + j, _mm256_fmadd_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), cj), sj, oj));
    }
  } else {
    for (; j + 4 <= n; j += 4) {
      const __m256d cj = kPer ? _mm256_loadu_pd(c + j) : _mm256_set1_pd(*c);
      const __m256d sj = kPer ? _mm256_loadu_pd(s + j) : _mm256_set1_pd(*s);
      const __m256d oj = kPer ? _mm256_loadu_pd(o + j) : _mm256_set1_pd(*o);
      _mm256_storeu_pd(out + j, _mm256_fmadd_pd(_mm256_sub_pd(_mm256_loadu_pd(x + j), cj), sj, oj));
    }
  }
#endif
  for (; j < n; ++j) out[j] = std::fma(x[j] - c[kPer ? j : 0], s[kPer ? j : 0], o[kPer ? j : 0]);
}

// The input of neurons [i0, i0 + n) as the kernels read it: x itself, or normalised by a
// NeuronInputAffine (per-neuron constants of the block gathered once, then one fma each).
// The channel of neurons i0, i0 + 1, ... under a NeuronInputAffine (neuron m is in channel
// (m / inner) % channels): two divisions to start, then a step per neuron.
struct ChannelWalk {
  const NeuronInputAffine& a;
  int64_t rem, c;
  ChannelWalk(const NeuronInputAffine& affine, int64_t i0)
      : a(affine), rem(i0 % affine.inner), c((i0 / affine.inner) % affine.channels) {}
  size_t channel() const { return static_cast<size_t>(c); }
  bool starts_channel() const { return rem == 0; }
  void next() {
    if (++rem == a.inner) rem = 0, c = c + 1 == a.channels ? 0 : c + 1;
  }
};

template <typename T>
struct BlockInput {
  const NeuronInputAffine* a;
  bool uniform = true;  // the whole block in one channel (the common case: planes of >= 64)
  T c0 = 0, s0 = 1, o0 = 0;
  T center[kBlock], scale[kBlock], offset[kBlock];  // per neuron, when not uniform
  BlockInput(const NeuronInputAffine* affine, int64_t i0, int64_t n) : a(affine) {
    if (!a) return;
    ChannelWalk w(*a, i0);
    c0 = static_cast<T>(a->center[w.channel()]);
    s0 = static_cast<T>(a->scale[w.channel()]);
    o0 = static_cast<T>(a->offset[w.channel()]);
    uniform = w.rem + n <= a->inner;
    if (uniform) return;
    for (int64_t j = 0; j < n; ++j, w.next()) {
      center[j] = static_cast<T>(a->center[w.channel()]);
      scale[j] = static_cast<T>(a->scale[w.channel()]);
      offset[j] = static_cast<T>(a->offset[w.channel()]);
    }
  }
  // The n inputs of step t (xt = x + t·M + i0) into out, or xt itself when not normalised.
  const T* step(const T* xt, int64_t n, T* out) const {
    if (!a) return xt;
    if (uniform) {
      affine_row<T, false>(xt, n, &c0, &s0, &o0, out);
    } else {
      affine_row<T, true>(xt, n, center, scale, offset, out);
    }
    return out;
  }
};

template <typename T, class K>
int64_t forward_blocks(const K& shared_k, const T* x, int64_t steps, int64_t M, T* v, T* spikes,
                       const NeuronInputAffine* affine) {
  const int64_t blocks = (M + kBlock - 1) / kBlock;
  int64_t fired = 0;
#pragma omp parallel for schedule(static) reduction(+ : fired) if (steps * M >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const K k = shared_k;  // thread-local: keeps the constants in registers
    const int64_t i0 = b * kBlock, n = std::min(kBlock, M - i0);
    const BlockInput<T> in(affine, i0, n);
    T xb[kBlock];  // this step's normalised inputs (affine only)
    T vb[kBlock];  // membranes of this block
    for (int64_t j = 0; j < n; ++j) vb[j] = v ? v[i0 + j] : k.rest;
    T fired_b = 0;  // exact: at most kBlock·steps < 2^24
    for (int64_t t = 0; t < steps; ++t) {
      const T* xt = in.step(x + t * M + i0, n, xb);
      T* st = spikes + t * M + i0;
      for (int64_t j = 0; j < n; ++j) {
        const T hj = k.charge(vb[j], xt[j]);  // the same three steps as recompute_block
        const T sj = k.fire(hj);
        fired_b += hj >= k.v_th ? T(1) : T(0);
        st[j] = sj;
        vb[j] = k.reset(hj, sj);
      }
    }
    if (v)
      for (int64_t j = 0; j < n; ++j) v[i0 + j] = vb[j];
    fired += static_cast<int64_t>(fired_b);
  }
  return fired;
}

// h_t of neurons [i0, i0 + n) for every step into hb [steps, kBlock], from x [T, M] and
// the initial membrane (v_init or rest). Must stay the forward's arithmetic exactly.
template <typename T, class K>
void recompute_block(const K& k, const T* x, const T* v_init, int64_t steps, int64_t M, int64_t i0,
                     int64_t n, T* hb, const NeuronInputAffine* affine) {
  const BlockInput<T> in(affine, i0, n);
  T xb[kBlock];  // this step's normalised inputs (affine only)
  T vb[kBlock];  // membranes of this block
  for (int64_t j = 0; j < n; ++j) vb[j] = v_init ? v_init[i0 + j] : k.rest;
  for (int64_t t = 0; t < steps; ++t) {
    const T* xt = in.step(x + t * M + i0, n, xb);
    T* ht = hb + t * kBlock;
    for (int64_t j = 0; j < n; ++j) {
      const T hj = k.charge(vb[j], xt[j]);
      ht[j] = hj;
      vb[j] = k.reset(hj, k.fire(hj));
    }
  }
}

// One channel's part of a block's batch-norm sums (backward_blocks with bn_sums).
struct ChannelSums {
  size_t channel = 0;
  double dy = 0.0, dy_xc = 0.0;
};

// Per neuron of [i0, i0 + n): its channel's centre (double, as batch norm's backward uses it);
// the two accumulators zeroed.
inline void channel_centers(const NeuronInputAffine& a, int64_t i0, int64_t n, double* center, double* s0,
                            double* s1) {
  ChannelWalk w(a, i0);
  for (int64_t j = 0; j < n; ++j, w.next()) {
    center[j] = a.center[w.channel()];
    s0[j] = s1[j] = 0.0;
  }
}

// The per-neuron sums of a block added up by channel run, in neuron order, into out; returns
// how many runs.
inline int64_t fold_by_channel(const NeuronInputAffine& a, int64_t i0, int64_t n, const double* s0, const double* s1,
                               ChannelSums* out) {
  ChannelWalk w(a, i0);
  int64_t runs = 0;
  for (int64_t j = 0; j < n; ++j, w.next()) {
    if (j == 0 || w.starts_channel()) out[runs++] = ChannelSums{w.channel(), 0.0, 0.0};
    out[runs - 1].dy += s0[j];
    out[runs - 1].dy_xc += s1[j];
  }
  return runs;
}

// The blocks' sums by channel run ([blocks][runs], block_runs[b] used in block b) added in
// block order into bn_sums (per channel); bn_sums.of = grad_x, the gradient they belong to.
inline void add_block_sums(const std::vector<ChannelSums>& block_sums, const std::vector<int64_t>& block_runs,
                           int64_t runs, int64_t channels, const void* grad_x, NeuronBnGradSums& bn_sums) {
  bn_sums.dy.assign(static_cast<size_t>(channels), 0.0);
  bn_sums.dy_xc.assign(bn_sums.dy.size(), 0.0);
  for (size_t b = 0; b < block_runs.size(); ++b)  // fixed order
    for (int64_t r = 0; r < block_runs[b]; ++r) {
      const ChannelSums& e = block_sums[b * runs + r];
      bn_sums.dy[e.channel] += e.dy;
      bn_sums.dy_xc[e.channel] += e.dy_xc;
    }
  bn_sums.of = grad_x;
}

template <bool kRateGrad, typename T, class K>
void backward_blocks(const K& shared_k, bool decay_input, const T* grad_s, const T* x, const T* v_init,
                     int64_t steps, int64_t M, T* grad_x, double* grad_r, const T* grad_v_in, T* grad_v_out,
                     const NeuronInputAffine* affine, NeuronBnGradSums* bn_sums) {
  const T x_scale = decay_input ? shared_k.r : T(1);
  const int64_t blocks = (M + kBlock - 1) / kBlock;
  std::vector<double> block_grad_r(kRateGrad ? blocks : 0, 0.0);
  // bn_sums: each block's sums by channel run, [blocks][runs] (a block of 64 neurons meets at
  // most 64 / inner + 2 channels), added in block order at the end.
  const int64_t runs = bn_sums ? std::min<int64_t>(kBlock, kBlock / affine->inner + 2) : 0;
  std::vector<ChannelSums> block_sums(static_cast<size_t>(blocks * runs));
  std::vector<int64_t> block_runs(bn_sums ? blocks : 0);
#pragma omp parallel if (steps * M >= kParallelMin)
  {
    std::vector<T> h_scratch(static_cast<size_t>(steps * kBlock));  // [steps, kBlock] per thread
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const K k = shared_k;  // thread-local: keeps the constants in registers
      const int64_t i0 = b * kBlock, n = std::min(kBlock, M - i0);
      T* hb = h_scratch.data();
      recompute_block<T>(k, x, v_init, steps, M, i0, n, hb, affine);
      T g_v[kBlock];  // gradient flowing into v_t from step t+1
      for (int64_t j = 0; j < n; ++j) g_v[j] = grad_v_in ? grad_v_in[i0 + j] : T(0);
      double acc_r = 0.0;
      double sum_g[kBlock], sum_gx[kBlock], center[kBlock];  // bn_sums: per neuron over t
      if (bn_sums) channel_centers(*affine, i0, n, center, sum_g, sum_gx);
      for (int64_t t = steps - 1; t >= 0; --t) {
        const T* gst = grad_s + t * M + i0;
        const T* ht = hb + t * kBlock;
        T* gxt = grad_x + t * M + i0;
        T sgb[kBlock];  // the step's surrogate gradients
        k.surrogate_grads(ht, n, sgb);
        for (int64_t j = 0; j < n; ++j) {
          const T hj = ht[j];
          const T sg = sgb[j];
          const T grad_h = gst[j] * sg + g_v[j] * k.dv_dh(hj, k.fire(hj), sg);
          gxt[j] = grad_h * x_scale;
          g_v[j] = grad_h * k.one_minus_r;
          if constexpr (kRateGrad) {
            T v_prev;
            if (t > 0) {
              const T hp = ht[j - kBlock];  // h_{t-1}
              v_prev = k.reset(hp, k.fire(hp));
            } else {
              v_prev = v_init ? v_init[i0 + j] : k.rest;
            }
            const T dh_dr = decay_input ? (hj - v_prev) / k.r : k.v_r_charge - v_prev;
            acc_r += double(grad_h * dh_dr);
          }
        }
        if (bn_sums) {
          const T* xt = x + t * M + i0;  // unnormalised
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) {
            const double g = static_cast<double>(gxt[j]);
            sum_g[j] += g;
            sum_gx[j] += g * (static_cast<double>(xt[j]) - center[j]);
          }
        }
      }
      if (grad_v_out)
        for (int64_t j = 0; j < n; ++j) grad_v_out[i0 + j] = g_v[j];
      if constexpr (kRateGrad) block_grad_r[b] = acc_r;
      if (bn_sums) block_runs[b] = fold_by_channel(*affine, i0, n, sum_g, sum_gx, &block_sums[b * runs]);
    }
  }
  if constexpr (kRateGrad) {
    double sum = 0.0;
    for (double g : block_grad_r) sum += g;  // fixed order
    *grad_r = sum;
  }
  if (bn_sums) add_block_sums(block_sums, block_runs, runs, affine->channels, grad_x, *bn_sums);
}

void check_affine(const NeuronInputAffine* a, int64_t M) {
  if (!a) return;
  SM_CHECK(a->channels >= 1 && a->inner >= 1 && M % (a->channels * a->inner) == 0 &&
               a->center.size() == static_cast<size_t>(a->channels) && a->scale.size() == a->center.size() &&
               a->offset.size() == a->center.size(),
           "neuron kernel: input normalisation of " << a->channels << " channels x " << a->inner
                                                    << " does not fit " << M << " neurons");
}

}  // namespace

template <typename T>
int64_t neuron_forward(const NeuronKernelConfig& c, const T* x, int64_t steps, int64_t M, T* v,
                       T* spikes, const NeuronInputAffine* affine) {
  check_affine(affine, M);
  int64_t fired = 0;
  with_neuron<T>(c, [&](const auto& k) { fired = forward_blocks<T>(k, x, steps, M, v, spikes, affine); });
  return fired;
}

template <typename T>
void neuron_backward(const NeuronKernelConfig& c, const T* grad_s, const T* x, const T* v_init,
                     int64_t steps, int64_t M, T* grad_x, double* grad_r, const T* grad_v_in, T* grad_v_out,
                     const NeuronInputAffine* affine, NeuronBnGradSums* bn_sums) {
  check_affine(affine, M);
  SM_CHECK(!bn_sums || affine, "neuron kernel: batch-norm sums need the input normalisation");
  SM_CHECK(!(grad_r && c.decay_input && c.r <= 0.0), "rate gradient needs r > 0, got " << c.r);
  with_neuron<T>(c, [&](const auto& k) {
    if (grad_r)
      backward_blocks<true, T>(k, c.decay_input, grad_s, x, v_init, steps, M, grad_x, grad_r, grad_v_in, grad_v_out,
                               affine, bn_sums);
    else
      backward_blocks<false, T>(k, c.decay_input, grad_s, x, v_init, steps, M, grad_x, nullptr, grad_v_in,
                                grad_v_out, affine, bn_sums);
  });
}

template int64_t neuron_forward<float>(const NeuronKernelConfig&, const float*, int64_t, int64_t,
                                       float*, float*, const NeuronInputAffine*);
template int64_t neuron_forward<double>(const NeuronKernelConfig&, const double*, int64_t,
                                        int64_t, double*, double*, const NeuronInputAffine*);
template void neuron_backward<float>(const NeuronKernelConfig&, const float*, const float*, const float*, int64_t,
                                     int64_t, float*, double*, const float*, float*, const NeuronInputAffine*,
                                     NeuronBnGradSums*);
template void neuron_backward<double>(const NeuronKernelConfig&, const double*, const double*, const double*,
                                      int64_t, int64_t, double*, double*, const double*, double*,
                                      const NeuronInputAffine*, NeuronBnGradSums*);

}  // namespace cpu
}  // namespace sm
