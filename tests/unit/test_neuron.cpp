// test_neuron.cpp — LIF / PLIF / IF layers against the naive reference (tests/ref/neuron_ref)
// for every option combination (forward spikes, BPTT grad_x, PLIF grad w; f64 and f32),
// finite differences in smooth-spike mode, firing-rate stat, membrane state and
// reset_state, saved-memory accounting (a reference to the input, h recomputed in
// backward) and name parsing.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <tuple>

#include "../ref/neuron_ref.h"
#include "gradient_check.h"
#include "isa_guard.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/layers/neuron.h"

using namespace sm;

namespace {

std::vector<double> to_vec(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

// The decay rate the layer uses: 1/tau (LIF), sigmoid(w) (PLIF), unused for IF.
double rate_of(Unit& u, const NeuronConfig& c) {
  if (c.kind == NeuronKind::PLIF) return 1.0 / (1.0 + std::exp(-u.params()[0]->value.item()));
  return 1.0 / c.tau;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

enum ResetMode { kHardZero, kHardNeg, kSoft };

NeuronConfig make_config(NeuronKind kind, bool decay_input, ResetMode reset, bool detach,
                         SurrogateKind sur, double v_th) {
  NeuronConfig c;
  c.kind = kind;
  c.tau = 3.0;  // LIF r = 1/3; PLIF w0 = -ln 2, r = 1/3
  c.decay_input = decay_input;
  c.v_threshold = v_th;
  c.hard_reset = reset != kSoft;
  c.v_reset = reset == kHardNeg ? -0.3 : 0.0;
  c.detach_reset = detach;
  c.surrogate = sur;
  c.alpha = sur == SurrogateKind::Sigmoid ? 4.0 : 2.0;
  return c;
}

std::string config_name(const NeuronConfig& c) {
  std::string s = c.kind == NeuronKind::LIF ? "LIF" : c.kind == NeuronKind::PLIF ? "PLIF" : "IF";
  s += c.decay_input ? "_decay" : "_nodecay";
  s += !c.hard_reset ? "_soft" : c.v_reset == 0.0 ? "_hard0" : "_hardneg";
  s += c.detach_reset ? "_detach" : "_attached";
  s += c.surrogate == SurrogateKind::Sigmoid ? "_sigmoid" : "_atan";
  return s;
}

// Runs layer forward + backward (fused B+W) on x with upstream gradient R and compares
// with the reference. Returns the reference forward for further checks.
void check_against_reference(const NeuronConfig& c, int64_t T, DType dt) {
  const Shape shape{T, 3, 5, 7};  // M = 105 neurons: a full and a partial block
  const int64_t M = 105;
  auto unit = test::wrap(std::make_unique<Neuron>(c), dt);
  // Inputs reach about 2.5 v_th per step whether or not the input is decayed by r = 1/3.
  const double gain = c.v_threshold * (c.decay_input && c.kind != NeuronKind::IF ? 3.0 : 1.0);
  Tensor x = test::random_tensor(shape, dt, 11, -1.0 * gain, 2.5 * gain);
  Tensor R = test::random_tensor(shape, dt, 12, -1.0, 1.0);
  std::vector<double> xv = to_vec(x), rv = to_vec(R);  // exactly the values the layer sees
  const double r = rate_of(*unit, c);

  ref::NeuronRefForward f = ref::neuron_forward_ref(c, r, xv, T, M);
  ref::NeuronRefBackward b = ref::neuron_backward_ref(c, r, xv, f, rv, T, M);
  double fired = 0;
  for (double s : f.s) fired += s;
  ASSERT_GT(fired, 0.05 * T * M) << "test input must make neurons fire";
  ASSERT_LT(fired, 0.95 * T * M) << "test input must leave neurons silent sometimes";

  Ctx ctx;
  unit->reset_state();
  Tensor y = unit->forward(x, ctx);
  EXPECT_TRUE(y.is_binary());
  ASSERT_EQ(y.shape(), shape);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.at(i), f.s[i]) << "spike " << i;

  for (Param* p : unit->params()) p->grad.zero();
  Tensor dx = unit->backward_input(R, ctx);
  const double tol = dt == DType::F64 ? 1e-11 : 2e-5;
  const double scale = std::max(1.0, max_abs(b.grad_x));
  for (int64_t i = 0; i < dx.numel(); ++i)
    ASSERT_NEAR(dx.at(i), b.grad_x[i], tol * scale) << "grad_x " << i;
  if (c.kind == NeuronKind::PLIF) {
    const double gw = unit->params()[0]->grad.item();
    EXPECT_NEAR(gw, b.grad_w, tol * std::max(1.0, std::fabs(b.grad_w)));
    // Without input decay dH/dr = V_r - v_{t-1} vanishes for T = 1 starting at rest.
    if (T > 1 || c.decay_input) {
      EXPECT_NE(b.grad_w, 0.0);
    }
  } else {
    EXPECT_TRUE(unit->params().empty());
  }
}

using ComboParam = std::tuple<NeuronKind, bool, ResetMode, bool, SurrogateKind, int>;
// Variant index: 0 = (v_th 1.0, T 7), 1 = (v_th 0.5, T 7), 2 = (v_th 1.0, T 1).
struct Variant {
  double v_th;
  int64_t T;
};
const Variant kVariants[] = {{1.0, 7}, {0.5, 7}, {1.0, 1}};

class NeuronCombo : public ::testing::TestWithParam<ComboParam> {
 protected:
  NeuronConfig config() const {
    auto [kind, decay, reset, detach, sur, var] = GetParam();
    return make_config(kind, decay, reset, detach, sur, kVariants[var].v_th);
  }
  int64_t steps() const { return kVariants[std::get<5>(GetParam())].T; }
};

std::string combo_name(const ::testing::TestParamInfo<ComboParam>& info) {
  auto [kind, decay, reset, detach, sur, var] = info.param;
  NeuronConfig c = make_config(kind, decay, reset, detach, sur, kVariants[var].v_th);
  return config_name(c) + (var == 0 ? "_T7" : var == 1 ? "_vth05_T7" : "_T1");
}

using SmoothParam = std::tuple<NeuronKind, bool, ResetMode, SurrogateKind>;
std::string smooth_name(const ::testing::TestParamInfo<SmoothParam>& info) {
  auto [kind, decay, reset, sur] = info.param;
  return config_name(make_config(kind, decay, reset, false, sur, 1.0));
}

}  // namespace

TEST_P(NeuronCombo, ForwardAndBpttMatchReferenceF64) { check_against_reference(config(), steps(), DType::F64); }
TEST_P(NeuronCombo, ForwardAndBpttMatchReferenceF32) { check_against_reference(config(), steps(), DType::F32); }

INSTANTIATE_TEST_SUITE_P(
    AllOptions, NeuronCombo,
    ::testing::Combine(::testing::Values(NeuronKind::LIF, NeuronKind::PLIF, NeuronKind::IF), ::testing::Bool(),
                       ::testing::Values(kHardZero, kHardNeg, kSoft), ::testing::Bool(),
                       ::testing::Values(SurrogateKind::Sigmoid, SurrogateKind::ATan), ::testing::Values(0, 1, 2)),
    combo_name);

// Finite differences through the layer with smooth spikes (surrogate primitive), reset
// not detached: the surrogate BPTT is then the exact gradient, PLIF's w included.
class NeuronSmoothGrad : public ::testing::TestWithParam<SmoothParam> {};

TEST_P(NeuronSmoothGrad, FiniteDifferencesMatch) {
  auto [kind, decay, reset, sur] = GetParam();
  NeuronConfig c = make_config(kind, decay, reset, false, sur, 1.0);
  auto unit = test::wrap(std::make_unique<Neuron>(c));
  Tensor x = test::random_tensor({5, 2, 3, 3}, DType::F64, 21, -1.0, 2.5);
  test::GradCheckOptions o;
  o.smooth_spikes = true;
  o.max_checks = 90;
  EXPECT_TRUE(test::check_layer_gradients(*unit, x, o)) << config_name(c);
}

INSTANTIATE_TEST_SUITE_P(
    SmoothSpikes, NeuronSmoothGrad,
    ::testing::Combine(::testing::Values(NeuronKind::LIF, NeuronKind::PLIF, NeuronKind::IF), ::testing::Bool(),
                       ::testing::Values(kHardZero, kHardNeg, kSoft),
                       ::testing::Values(SurrogateKind::Sigmoid, SurrogateKind::ATan)),
    smooth_name);

TEST(Neuron, SmoothModeOutputIsTheSurrogatePrimitiveAndNotBinary) {
  NeuronConfig c = make_config(NeuronKind::LIF, true, kHardZero, false, SurrogateKind::ATan, 1.0);
  auto unit = test::wrap(std::make_unique<Neuron>(c));
  Tensor x = test::random_tensor({4, 2, 5}, DType::F64, 5, -1.0, 3.0);
  Ctx ctx;
  ctx.smooth_spikes = true;
  Tensor y = unit->forward(x, ctx);
  EXPECT_FALSE(y.is_binary());
  ref::NeuronRefForward f = ref::neuron_forward_ref(c, 1.0 / c.tau, to_vec(x), 4, 10, {}, true);
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y.at(i), f.s[i], 1e-14);
}

TEST(Neuron, FiringRateStatCountsSpikesOfLastForward) {
  NeuronConfig c;  // plain LIF defaults
  auto layer = std::make_unique<Neuron>(c);
  Neuron* lif = layer.get();
  auto unit = test::wrap(std::move(layer));
  lif->set_name("features.0.2");
  std::vector<LayerStat> stats;
  lif->collect_stats(stats);
  EXPECT_TRUE(stats.empty()) << "no stat before the first forward";

  Ctx ctx;
  for (uint64_t seed : {3u, 4u}) {
    Tensor x = test::random_tensor({6, 3, 4}, DType::F64, seed, -0.5, 3.0);
    unit->reset_state();
    Tensor y = unit->forward(x, ctx);
    ref::NeuronRefForward f = ref::neuron_forward_ref(c, 0.5, to_vec(x), 6, 12);
    double fired = 0;
    for (double s : f.s) fired += s;
    stats.clear();
    unit->collect_stats(stats);
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[0].layer, "features.0.2");
    EXPECT_EQ(stats[0].key, "firing_rate");
    EXPECT_DOUBLE_EQ(stats[0].value, fired / (6.0 * 3 * 4));
    EXPECT_GT(stats[0].value, 0.0);
  }
}

// The membrane carries over to the next forward until reset_state(); the backward of a
// continued forward recomputes h from the carried initial membrane (and PLIF's w gradient
// uses it).
TEST(Neuron, MembraneCarriesAcrossForwardsUntilReset) {
  for (NeuronKind kind : {NeuronKind::LIF, NeuronKind::PLIF, NeuronKind::IF}) {
    for (ResetMode reset : {kHardNeg, kSoft}) {
      NeuronConfig c = make_config(kind, kind != NeuronKind::IF, reset, false, SurrogateKind::Sigmoid, 1.0);
      SCOPED_TRACE(config_name(c));
      auto unit = test::wrap(std::make_unique<Neuron>(c));
      const int64_t T = 4, M = 10;
      Tensor x1 = test::random_tensor({T, 2, 5}, DType::F64, 31, -1.0, 2.5);
      Tensor x2 = test::random_tensor({T, 2, 5}, DType::F64, 32, -1.0, 2.5);
      Tensor R = test::random_tensor({T, 2, 5}, DType::F64, 33);
      const double r = rate_of(*unit, c);
      ref::NeuronRefForward f1 = ref::neuron_forward_ref(c, r, to_vec(x1), T, M);
      std::vector<double> v_end(f1.v.end() - M, f1.v.end());
      ref::NeuronRefForward f2 = ref::neuron_forward_ref(c, r, to_vec(x2), T, M, v_end);
      ref::NeuronRefBackward b2 = ref::neuron_backward_ref(c, r, to_vec(x2), f2, to_vec(R), T, M, v_end);
      ref::NeuronRefForward f2_rest = ref::neuron_forward_ref(c, r, to_vec(x2), T, M);
      ASSERT_NE(f2.s, f2_rest.s) << "test input must make the carried state visible";

      Ctx ctx;
      unit->reset_state();
      unit->forward(x1, ctx);
      Tensor y2 = unit->forward(x2, ctx);
      EXPECT_EQ(to_vec(y2), f2.s);
      for (Param* p : unit->params()) p->grad.zero();
      Tensor dx = unit->backward_input(R, ctx);
      for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_NEAR(dx.at(i), b2.grad_x[i], 1e-12);
      if (kind == NeuronKind::PLIF) {
        EXPECT_NEAR(unit->params()[0]->grad.item(), b2.grad_w, 1e-12);
      }

      unit->reset_state();
      Tensor y2_rest = unit->forward(x2, ctx);
      EXPECT_EQ(to_vec(y2_rest), f2_rest.s);
      unit->reset_state();
      EXPECT_NO_THROW(unit->forward(Tensor::zeros({T, 3, 5}, DType::F64), ctx));  // at rest: any shape
    }
  }
}

TEST(Neuron, ContinuingWithADifferentShapeIsRefused) {
  auto unit = test::wrap(std::make_unique<Neuron>(NeuronConfig{}));
  Ctx ctx;
  unit->forward(Tensor::zeros({2, 2, 5}, DType::F64), ctx);
  EXPECT_THROW(unit->forward(Tensor::zeros({2, 3, 5}, DType::F64), ctx), Error);
  unit->reset_state();
  EXPECT_NO_THROW(unit->forward(Tensor::zeros({2, 3, 5}, DType::F64), ctx));
}

// Pipelines keep several microbatches in flight: slots are independent, and the split
// B/W path of PLIF gives the fused gradient.
TEST(Neuron, SlotsAreIndependentAndSplitWgradMatches) {
  NeuronConfig c = make_config(NeuronKind::PLIF, false, kHardZero, true, SurrogateKind::ATan, 1.0);
  auto unit = test::wrap(std::make_unique<Neuron>(c));
  Tensor xa = test::random_tensor({3, 2, 4}, DType::F64, 41, -1.0, 2.5);
  Tensor xb = test::random_tensor({3, 2, 4}, DType::F64, 42, -1.0, 2.5);
  Tensor R = test::random_tensor({3, 2, 4}, DType::F64, 43);
  const double r = rate_of(*unit, c);
  auto fa = ref::neuron_forward_ref(c, r, to_vec(xa), 3, 8);
  auto fb = ref::neuron_forward_ref(c, r, to_vec(xb), 3, 8);
  auto ba = ref::neuron_backward_ref(c, r, to_vec(xa), fa, to_vec(R), 3, 8);
  auto bb = ref::neuron_backward_ref(c, r, to_vec(xb), fb, to_vec(R), 3, 8);

  Ctx c0, c1;
  c1.slot = 1;
  unit->reset_state();
  unit->forward(xa, c0);
  unit->reset_state();
  unit->forward(xb, c1);
  Param& w = *unit->params()[0];
  w.grad.zero();
  c1.split_wgrad = true;
  Tensor dxb = unit->backward_input(R, c1);
  EXPECT_EQ(w.grad.item(), 0.0) << "split B must not touch the parameter gradient";
  Tensor dxa = unit->backward_input(R, c0);  // fused
  EXPECT_NEAR(w.grad.item(), ba.grad_w, 1e-12);
  unit->backward_weight(c1);
  EXPECT_NEAR(w.grad.item(), ba.grad_w + bb.grad_w, 1e-12);
  for (int64_t i = 0; i < 24; ++i) {
    EXPECT_NEAR(dxa.at(i), ba.grad_x[i], 1e-12);
    EXPECT_NEAR(dxb.at(i), bb.grad_x[i], 1e-12);
  }
  EXPECT_THROW(unit->backward_input(R, c0), Error) << "the fused backward released slot 0";
}

// Per slot the layer keeps only a reference to its input x (no copy; bits when x is
// binary) — plus the initial membrane [M] when the forward continued a previous one — and
// the layer carries its membrane state [M]. Backward (B; W for split PLIF) releases x.
TEST(Neuron, KeepsOnlyAReferenceToItsInput) {
  Allocator& a = cpu_allocator();
  for (DType dt : {DType::F32, DType::F64}) {
    for (NeuronKind kind : {NeuronKind::LIF, NeuronKind::PLIF}) {
      for (bool split : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (kind == NeuronKind::PLIF ? " plif" : " lif") +
                     (split ? " split" : ""));
        NeuronConfig c;
        c.kind = kind;
        auto unit = test::wrap(std::make_unique<Neuron>(c), dt);
        const size_t es = dtype_size(dt);
        const size_t full = CpuCachingAllocator::round_size(10 * 256 * es);
        const size_t state = CpuCachingAllocator::round_size(256 * es);
        Ctx ctx;
        ctx.split_wgrad = split;
        unit->reset_state();
        const size_t before = a.current_bytes();
        Tensor x = test::random_tensor({10, 4, 64}, dt, 51, -1.0, 2.5);
        { Tensor y = unit->forward(x, ctx); }
        EXPECT_EQ(a.current_bytes() - before, full + state) << "x itself and the membrane: no copy";
        x = Tensor();
        EXPECT_EQ(a.current_bytes() - before, full + state) << "the slot keeps x alive";
        { Tensor dx = unit->backward_input(Tensor::zeros({10, 4, 64}, dt), ctx); }
        EXPECT_EQ(a.current_bytes() - before, state) << "B releases x";
        if (split) unit->backward_weight(ctx);

        // Continuing from the last membrane: the slot also keeps the initial membrane.
        x = test::random_tensor({10, 4, 64}, dt, 52, -1.0, 2.5);
        { Tensor y = unit->forward(x, ctx); }
        x = Tensor();
        EXPECT_EQ(a.current_bytes() - before, full + 2 * state);
        { Tensor dx = unit->backward_input(Tensor::zeros({10, 4, 64}, dt), ctx); }
        if (split) unit->backward_weight(ctx);
        EXPECT_EQ(a.current_bytes() - before, state);

        // A spike input is kept as bits.
        unit->reset_state();
        x = test::random_tensor({10, 4, 64}, dt, 53, 0.0, 1.0);
        for (int64_t i = 0; i < x.numel(); ++i) test::detail::set(x, i, x.at(i) < 0.5 ? 1.0 : 0.0);
        x.set_binary(true);
        { Tensor y = unit->forward(x, ctx); }
        x = Tensor();
        EXPECT_EQ(a.current_bytes() - before, CpuCachingAllocator::round_size(10 * 256 / 8) + state);
        { Tensor dx = unit->backward_input(Tensor::zeros({10, 4, 64}, dt), ctx); }
        if (split) unit->backward_weight(ctx);
        EXPECT_EQ(a.current_bytes() - before, state);
      }
    }
  }
}

// Backward recomputes h from the saved input; a spike input (kept as bits) and inputs that
// put h exactly on the threshold (h = v_th fires) give the reference's gradients.
TEST(Neuron, RecomputedMembraneMatchesForwardOnSpikeAndThresholdInputs) {
  for (DType dt : {DType::F32, DType::F64}) {
    for (bool binary : {true, false}) {
      NeuronConfig c = make_config(NeuronKind::LIF, true, kHardZero, false, SurrogateKind::ATan, 1.0);
      c.tau = 2.0;  // r = 1/2: from rest, x = 2 gives h = 1 = v_th exactly
      auto unit = test::wrap(std::make_unique<Neuron>(c), dt);
      const int64_t T = 6, M = 40;
      Tensor x = test::random_tensor({T, 4, 10}, dt, 71, 0.0, 1.0);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double u = x.at(i);
        test::detail::set(x, i, binary ? (u < 0.5 ? 1.0 : 0.0) : (u < 0.4 ? 2.0 : u < 0.7 ? 0.0 : 1.0));
      }
      x.set_binary(binary);
      Tensor R = test::random_tensor({T, 4, 10}, dt, 72);
      auto f = ref::neuron_forward_ref(c, 0.5, to_vec(x), T, M);
      auto b = ref::neuron_backward_ref(c, 0.5, to_vec(x), f, to_vec(R), T, M);
      double on_threshold = 0;
      for (double h : f.h) on_threshold += h == 1.0;
      if (!binary) {
        ASSERT_GT(on_threshold, 10);
      }
      Ctx ctx;
      unit->reset_state();
      Tensor y = unit->forward(x, ctx);
      EXPECT_EQ(to_vec(y), f.s);
      x = Tensor();
      Tensor dx = unit->backward_input(R, ctx);
      const double tol = dt == DType::F64 ? 1e-12 : 2e-6;
      for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_NEAR(dx.at(i), b.grad_x[i], tol) << i;
    }
  }
}

TEST(Neuron, PlifInitialisesWFromTau) {
  NeuronConfig c;
  c.kind = NeuronKind::PLIF;
  c.tau = 1.333;
  auto unit = test::wrap(std::make_unique<Neuron>(c));
  ASSERT_EQ(unit->params().size(), 1u);
  Param& w = *unit->params()[0];
  EXPECT_EQ(w.shape, Shape{});
  EXPECT_EQ(w.value.numel(), 1);
  EXPECT_NEAR(w.value.item(), -std::log(0.333), 1e-12);
  EXPECT_EQ(w.local_name, "w");
}

TEST(Neuron, TypeNamesAndParsing) {
  NeuronConfig c;
  EXPECT_EQ(Neuron(c).type(), "lif");
  c.kind = NeuronKind::PLIF;
  EXPECT_EQ(Neuron(c).type(), "plif");
  c.kind = NeuronKind::IF;
  EXPECT_EQ(Neuron(c).type(), "if");
  EXPECT_EQ(neuron_kind_from_name("lif"), NeuronKind::LIF);
  EXPECT_EQ(neuron_kind_from_name("plif"), NeuronKind::PLIF);
  EXPECT_EQ(neuron_kind_from_name("if"), NeuronKind::IF);
  EXPECT_EQ(surrogate_from_name("sigmoid"), SurrogateKind::Sigmoid);
  EXPECT_EQ(surrogate_from_name("atan"), SurrogateKind::ATan);
  try {
    neuron_kind_from_name("lfi");
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    const std::string m = e.what();
    EXPECT_NE(m.find("'lfi'"), std::string::npos) << m;
    EXPECT_NE(m.find("lif, plif, if"), std::string::npos) << m;
  }
  try {
    surrogate_from_name("tanh");
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    const std::string m = e.what();
    EXPECT_NE(m.find("'tanh'"), std::string::npos) << m;
    EXPECT_NE(m.find("sigmoid, atan"), std::string::npos) << m;
  }
  c.kind = NeuronKind::LIF;
  c.tau = 1.0;
  EXPECT_THROW(Neuron{c}, Error);
}

// Big enough for the multi-threaded path: matches the reference, and PLIF's w gradient is
// bitwise the same for any thread count (fixed-order block sums).
TEST(Neuron, ParallelPathMatchesReferenceAndIsThreadCountIndependent) {
  NeuronConfig c = make_config(NeuronKind::PLIF, true, kSoft, false, SurrogateKind::Sigmoid, 1.0);
  const int64_t T = 4, M = 3 * 7001;
  auto unit = test::wrap(std::make_unique<Neuron>(c));
  Tensor x = test::random_tensor({T, 3, 7001}, DType::F64, 61, -3.0, 7.5);
  Tensor R = test::random_tensor({T, 3, 7001}, DType::F64, 62);
  const double r = rate_of(*unit, c);
  auto f = ref::neuron_forward_ref(c, r, to_vec(x), T, M);
  auto b = ref::neuron_backward_ref(c, r, to_vec(x), f, to_vec(R), T, M);
  const int saved_threads = omp_get_max_threads();
  std::vector<double> grad_w;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Ctx ctx;
    unit->reset_state();
    Tensor y = unit->forward(x, ctx);
    unit->params()[0]->grad.zero();
    Tensor dx = unit->backward_input(R, ctx);
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.at(i), f.s[i]) << i;
    for (int64_t i = 0; i < dx.numel(); ++i) ASSERT_NEAR(dx.at(i), b.grad_x[i], 1e-12) << i;
    grad_w.push_back(unit->params()[0]->grad.item());
    EXPECT_NEAR(grad_w.back(), b.grad_w, 1e-9 * std::fabs(b.grad_w));
  }
  omp_set_num_threads(saved_threads);
  EXPECT_EQ(grad_w[0], grad_w[1]);
  EXPECT_EQ(grad_w[0], grad_w[2]);
}

namespace sm {
namespace {

// The f32 sigmoid surrogate gradient of the backward kernel (a vectorised e^x, vexp in
// kernels/cpu/neuron_kernels.inc, tail lanes included) against the formula in double, one step so that
// grad_x = grad_s · surrogate'(h − v_th) with h = x (IF charge from rest 0): within 8 ulp
// (times σ/(1 − σ) where 1 − σ cancels) of the exact value over h in [−30, 30] (α = 4: e^x from e^−120 to e^120, both clamps reached),
// results below the normal range (2⁻¹²⁶) within 2⁻¹²⁵ absolute.
TEST(NeuronKernel, F32SigmoidSurrogateGradientIsWithinUlpsOfTheDoubleFormula) {
  cpu::NeuronKernelConfig c;
  c.decay_input = false;
  c.r = 0.0;  // IF: h = v + x
  c.hard_reset = true;
  c.v_reset = 0.0;
  c.surrogate = cpu::SurrogateFn::Sigmoid;
  c.alpha = 4.0;
  const int64_t M = 6001;  // not a multiple of 8 or 64: padded tails
  std::vector<float> x(M), grad_s(M, 1.0f), grad_x(M);
  for (int64_t i = 0; i < M; ++i) x[i] = static_cast<float>(-30.0 + 60.0 * i / (M - 1));
  cpu::neuron_backward<float>(c, grad_s.data(), x.data(), nullptr, 1, M, grad_x.data(), nullptr, nullptr, nullptr);
  int bad = 0;
  for (int64_t i = 0; i < M && bad < 5; ++i) {
    // the argument as the kernel rounds it (u = h − v_th and −α·u in f32: its rounding is the
    // formula's, amplified by e^x alike in any implementation), the rest exact
    const float u = x[i] - 1.0f, z = -4.0f * u;
    const double sig = 1.0 / (1.0 + std::exp(static_cast<double>(z)));
    const double want = 4.0 * sig * (1.0 - sig);
    // f32 1 − σ cancels where σ → 1: σ's rounding grows by σ/(1 − σ) there
    const double amplification = 1.0 + std::min(1e30, sig / (1.0 - sig));
    if (std::fabs(grad_x[i] - want) > 8 * 0x1p-24 * amplification * std::fabs(want) + 0x1p-125) {  // subnormals: 0 or tiny
      ADD_FAILURE() << "h " << x[i] << ": " << grad_x[i] << " vs " << want;
      ++bad;
    }
  }
}


// The kernels' AVX-512 copy (kernels/cpu/isa.h) does the AVX2 copy's operations per lane:
// spikes, membranes, input gradients, rate gradient, membrane gradient and the fused batch norm's
// sums are bitwise equal (bytes compared), for every option the sweeps branch on, f32 (the
// vector e^x, its clamps at ±87 included: inputs up to ±40 with α 4) and f64, plain and
// normalised input (blocks within one channel and blocks crossing channels), with and without
// the optional inputs and outputs, M not a multiple of the vectors or blocks.
template <typename T>
void expect_isa_copies_equal(const cpu::NeuronKernelConfig& c, const cpu::NeuronInputAffine* affine, bool optional) {
  const int64_t steps = 5, M = affine ? affine->channels * affine->inner * 3 : 1237;
  CounterRng rng(71, "isa");
  std::vector<T> x(steps * M), gs(steps * M), gv_in(M), v_init(M);
  for (int64_t i = 0; i < steps * M; ++i) {
    const double u = rng.uniform(i);
    x[i] = static_cast<T>(i % 97 == 0 ? (u < 0.5 ? -40.0 : 40.0) : -1.5 + 4.0 * u);  // some beyond e^x's clamps
    gs[i] = static_cast<T>(rng.uniform(steps * M + i) - 0.5);
  }
  for (int64_t i = 0; i < M; ++i) {
    gv_in[i] = static_cast<T>(rng.uniform(3 * steps * M + i) - 0.5);
    v_init[i] = static_cast<T>(rng.uniform(4 * steps * M + i) - 0.3);
  }
  struct Out {
    std::vector<T> v, spikes, grad_x, grad_v;
    std::vector<double> grad_r, dy, dy_xc;
    int64_t fired = 0;
  };
  auto run = [&](bool avx512) {
    cpu::allow_avx512_kernels(avx512);
    Out o;
    o.v = v_init;
    o.spikes.resize(x.size());
    o.grad_x.resize(x.size());
    o.grad_v.resize(M);
    o.grad_r.resize(1);
    o.fired = cpu::neuron_forward<T>(c, x.data(), steps, M, optional ? o.v.data() : nullptr, o.spikes.data(), affine);
    cpu::NeuronBnGradSums sums;
    const bool rate = optional && !(c.decay_input && c.r <= 0.0);
    cpu::neuron_backward<T>(c, gs.data(), x.data(), optional ? v_init.data() : nullptr, steps, M, o.grad_x.data(),
                            rate ? o.grad_r.data() : nullptr, optional ? gv_in.data() : nullptr,
                            optional ? o.grad_v.data() : nullptr, affine, affine ? &sums : nullptr);
    o.dy = sums.dy;
    o.dy_xc = sums.dy_xc;
    return o;
  };
  const Out a = run(false), b = run(true);
  EXPECT_EQ(a.fired, b.fired);
  EXPECT_TRUE(test::same_bytes(a.v, b.v));
  EXPECT_TRUE(test::same_bytes(a.spikes, b.spikes));
  EXPECT_TRUE(test::same_bytes(a.grad_x, b.grad_x));
  EXPECT_TRUE(test::same_bytes(a.grad_v, b.grad_v));
  EXPECT_TRUE(test::same_bytes(a.grad_r, b.grad_r));
  EXPECT_TRUE(test::same_bytes(a.dy, b.dy));
  EXPECT_TRUE(test::same_bytes(a.dy_xc, b.dy_xc));
}

cpu::NeuronInputAffine test_affine(int64_t channels, int64_t inner) {
  cpu::NeuronInputAffine a;
  a.channels = channels;
  a.inner = inner;
  for (int64_t ch = 0; ch < channels; ++ch) {
    a.center.push_back(0.1 * static_cast<double>(ch) - 0.2);
    a.scale.push_back(0.7 + 0.05 * static_cast<double>(ch));
    a.offset.push_back(0.3 - 0.02 * static_cast<double>(ch));
  }
  return a;
}

TEST(NeuronKernel, Avx512CopyIsBitwiseTheAvx2Copy) {
  const test::IsaGuard guard;
  if (!test::IsaGuard::avx512_available()) GTEST_SKIP() << "no AVX-512 copy on this CPU or build: nothing to compare";
  const cpu::NeuronInputAffine crossing = test_affine(7, 19);  // blocks of 64 neurons cross channels
  const cpu::NeuronInputAffine within = test_affine(3, 80);   // whole 64-neuron blocks inside a channel
  int k = 0;
  for (bool decay : {true, false})
    for (bool hard : {true, false})
      for (bool detach : {true, false})
        for (bool smooth : {false, true})
          for (cpu::SurrogateFn fn : {cpu::SurrogateFn::Sigmoid, cpu::SurrogateFn::ATan}) {
            cpu::NeuronKernelConfig c;
            c.decay_input = decay;
            c.r = 0.4;
            c.hard_reset = hard;
            c.v_reset = hard ? -0.1 : 0.0;
            c.detach_reset = detach;
            c.smooth = smooth;
            c.surrogate = fn;
            c.alpha = fn == cpu::SurrogateFn::Sigmoid ? 4.0 : 2.0;
            const bool optional = ++k % 2 == 0;  // membranes, rate and membrane gradients in every other case
            SCOPED_TRACE(::testing::Message() << "decay " << decay << " hard " << hard << " detach " << detach
                                              << " smooth " << smooth << " atan " << (fn == cpu::SurrogateFn::ATan)
                                              << " optional " << optional);
            for (const cpu::NeuronInputAffine* a : {static_cast<const cpu::NeuronInputAffine*>(nullptr), &crossing, &within}) {
              expect_isa_copies_equal<float>(c, a, optional);
              expect_isa_copies_equal<double>(c, a, optional);
            }
          }
}

}  // namespace
}  // namespace sm
