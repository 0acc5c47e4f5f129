// neuron.cpp (kernels/cpu) — fused multi-step LIF / PLIF / IF forward and BPTT
// (docs/semantics.md §5). Neurons are processed in fixed blocks of kBlock (parallel over blocks);
// inside a block the time loop is outermost and the block's membranes live in a small local array,
// so each neuron is visited once per step in one pass over T and the inner loop over
// neighbouring neurons reads contiguous memory.
// Backward recomputes a block's h_t from the saved input x into a per-thread [T, kBlock]
// scratch (one forward sweep, same charge/fire/reset code as the forward: bitwise the
// forward's h, the build does not contract to FMA) and then sweeps t = T-1 .. 0 over it.
// The sweeps are neuron_kernels.inc, compiled for AVX2 and, with GCC, AVX-512 (kernels/cpu/isa.h
// chooses at run time; bitwise the same results).
#include "spikemesh/kernels/cpu/neuron.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "spikemesh/core/error.h"
#include "spikemesh/kernels/cpu/isa.h"

#if defined(__AVX2__) && defined(__FMA__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps() (`__m512 __Y = __Y;`), which
// -Wmaybe-uninitialized reports at the header's lines once inlined (GCC bug 105593); the value
// is never read. Silenced for the header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
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

// Calls f(std::bool_constant<b>{}).
template <class F>
void with_bool(bool b, F&& f) {
  if (b) f(std::true_type{});
  else f(std::false_type{});
}

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
// how many runs. A run's two sums are kept in registers until it ends (summed through memory,
// each add waited for the store before it: a fifth of the neuron backward's time).
inline int64_t fold_by_channel(const NeuronInputAffine& a, int64_t i0, int64_t n, const double* s0, const double* s1,
                               ChannelSums* out) {
  ChannelWalk w(a, i0);
  int64_t runs = 0;
  ChannelSums run{w.channel(), 0.0, 0.0};
  for (int64_t j = 0; j < n; ++j, w.next()) {
    if (j > 0 && w.starts_channel()) {
      out[runs++] = run;
      run = ChannelSums{w.channel(), 0.0, 0.0};
    }
    run.dy += s0[j];
    run.dy_xc += s1[j];
  }
  out[runs++] = run;
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
void check_affine(const NeuronInputAffine* a, int64_t M) {
  if (!a) return;
  SM_CHECK(a->channels >= 1 && a->inner >= 1 && M % (a->channels * a->inner) == 0 &&
               a->center.size() == static_cast<size_t>(a->channels) && a->scale.size() == a->center.size() &&
               a->offset.size() == a->center.size(),
           "neuron kernel: input normalisation of " << a->channels << " channels x " << a->inner
                                                    << " does not fit " << M << " neurons");
}

}  // namespace

namespace {  // each copy's helpers stay in this file: no inline function shared across copies

#define SM_NEURON_NS neuron_avx2
#define SM_NEURON_AVX512 0
#include "neuron_kernels.inc"
#undef SM_NEURON_NS
#undef SM_NEURON_AVX512

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && SM_NEURON_VECTOR_EXP
#define SM_HAVE_AVX512_NEURON 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw")
#define SM_NEURON_NS neuron_avx512
#define SM_NEURON_AVX512 1
#include "neuron_kernels.inc"
#undef SM_NEURON_NS
#undef SM_NEURON_AVX512
#pragma GCC pop_options
#else
#define SM_HAVE_AVX512_NEURON 0
#endif

}  // namespace

template <typename T>
int64_t neuron_forward(const NeuronKernelConfig& c, const T* x, int64_t steps, int64_t M, T* v,
                       T* spikes, const NeuronInputAffine* affine) {
  check_affine(affine, M);
  SM_CHECK(steps <= INT32_MAX / kBlock, "neuron kernel: " << steps << " time steps (at most " << INT32_MAX / kBlock << ")");
#if SM_HAVE_AVX512_NEURON
  if (avx512_kernels()) return neuron_avx512::forward<T>(c, x, steps, M, v, spikes, affine);
#endif
  return neuron_avx2::forward<T>(c, x, steps, M, v, spikes, affine);
}

template <typename T>
void neuron_backward(const NeuronKernelConfig& c, const T* grad_s, const T* x, const T* v_init,
                     int64_t steps, int64_t M, T* grad_x, double* grad_r, const T* grad_v_in, T* grad_v_out,
                     const NeuronInputAffine* affine, NeuronBnGradSums* bn_sums) {
  check_affine(affine, M);
  SM_CHECK(!bn_sums || affine, "neuron kernel: batch-norm sums need the input normalisation");
  SM_CHECK(!(grad_r && c.decay_input && c.r <= 0.0), "rate gradient needs r > 0, got " << c.r);
#if SM_HAVE_AVX512_NEURON
  if (avx512_kernels())
    return neuron_avx512::backward<T>(c, grad_s, x, v_init, steps, M, grad_x, grad_r, grad_v_in, grad_v_out, affine,
                                      bn_sums);
#endif
  neuron_avx2::backward<T>(c, grad_s, x, v_init, steps, M, grad_x, grad_r, grad_v_in, grad_v_out, affine, bn_sums);
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
