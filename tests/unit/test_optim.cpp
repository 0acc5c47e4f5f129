// test_optim.cpp — SGD / Adam / AdamW against independently written textbook formulas
// (plain double loops over std::vector, written like the papers / PyTorch docs, not like the
// production kernels), plus hand-computed literals, state layout, resume, and config errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "spikemesh/optim/optimizer.h"

namespace {

using sm::DType;
using sm::OptimizerConfig;
using sm::Param;
using sm::Tensor;
using Vec = std::vector<double>;

void write(Tensor& t, const Vec& v) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.dtype() == DType::F64) t.data<double>()[i] = v[i];
    else t.data<float>()[i] = static_cast<float>(v[i]);
  }
}

Vec read(const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.at(static_cast<int64_t>(i));
  return v;
}

// A set of parameters with owned storage (Param is a plain struct).
struct Params {
  std::vector<std::unique_ptr<Param>> owned;
  Param& add(const std::string& name, const sm::Shape& shape, const Vec& value,
             DType dt = DType::F64, bool decay = true) {
    auto p = std::make_unique<Param>();
    p->name = name;
    p->local_name = name;
    p->shape = shape;
    p->local_shape = shape;
    p->weight_decay = decay;
    p->value = Tensor::zeros(shape, dt);
    p->grad = Tensor::zeros(shape, dt);
    write(p->value, value);
    owned.push_back(std::move(p));
    return *owned.back();
  }
  std::vector<Param*> ptrs() {
    std::vector<Param*> out;
    for (auto& p : owned) out.push_back(p.get());
    return out;
  }
};

// Deterministic grads that change sign and size with step t and element i.
Vec grads_for(int t, size_t n, double phase) {
  Vec g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.7 * std::sin(1.3 * static_cast<double>(i) + 0.9 * t + phase) + 0.05 * t;
  return g;
}

const Vec kP0 = {1.0, -2.0, 0.5, 0.25, -0.75, 3.0};  // param A, shape [2, 3]
const Vec kQ0 = {0.1, -0.4, 2.5};                    // param B, shape [3]

// ---- independent references ---------------------------------------------------------------

struct RefSgd {
  RefSgd(double lr_, double mu_, double wd_, bool nesterov_)
      : lr(lr_), mu(mu_), wd(wd_), nesterov(nesterov_) {}
  double lr, mu, wd;
  bool nesterov;
  Vec buf;
  bool first = true;
  void step(Vec& p, const Vec& grad) {
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i] + wd * p[i];
      double d = g;
      if (mu != 0.0) {
        buf[i] = first ? g : mu * buf[i] + g;  // PyTorch: buf = g on the first step
        d = nesterov ? g + mu * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
    first = false;
  }
};

struct RefAdam {
  RefAdam(double lr_, double b1_, double b2_, double eps_, double wd_, bool decoupled_)
      : lr(lr_), b1(b1_), b2(b2_), eps(eps_), wd(wd_), decoupled(decoupled_) {}
  double lr, b1, b2, eps, wd;
  bool decoupled;
  Vec m, v;
  int t = 0;
  void step(Vec& p, const Vec& grad) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled) p[i] *= 1.0 - lr * wd;
      else g += wd * p[i];
      m[i] = b1 * m[i] + (1.0 - b1) * g;
      v[i] = b2 * v[i] + (1.0 - b2) * g * g;
      const double m_hat = m[i] / (1.0 - std::pow(b1, t));
      const double v_hat_sqrt = std::sqrt(v[i]) / std::sqrt(1.0 - std::pow(b2, t));
      p[i] -= lr * m_hat / (v_hat_sqrt + eps);
    }
  }
};

void expect_near_vec(const Vec& got, const Vec& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * (1.0 + std::abs(want[i]))) << what << " element " << i;
}

// Runs `steps` steps of the production optimizer (params A, B) and of references refA/refB.
template <typename Ref>
void run_and_compare(const OptimizerConfig& cfg, Ref refA, Ref refB, DType dt, double tol,
                     bool b_decays = true, int steps = 3) {
  Params ps;
  Param& a = ps.add("a.weight", {2, 3}, kP0, dt);
  Param& b = ps.add("b.bias", {3}, kQ0, dt, b_decays);
  auto opt = sm::make_optimizer(cfg, ps.ptrs());
  Vec pa = read(a.value), pb = read(b.value);  // start from the (possibly rounded) values
  for (int t = 1; t <= steps; ++t) {
    const Vec ga = grads_for(t, kP0.size(), 0.0), gb = grads_for(t, kQ0.size(), 0.4);
    write(a.grad, ga);
    write(b.grad, gb);
    opt->step();
    refA.step(pa, read(a.grad));
    refB.step(pb, read(b.grad));
    expect_near_vec(read(a.value), pa, tol, "param a");
    expect_near_vec(read(b.value), pb, tol, "param b");
  }
  EXPECT_EQ(opt->step_count(), steps);
}

OptimizerConfig sgd_cfg(double lr, double mu, double wd, bool nesterov) {
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = lr;
  c.momentum = mu;
  c.weight_decay = wd;
  c.nesterov = nesterov;
  return c;
}

OptimizerConfig adam_cfg(const char* name, double lr, double wd, double eps) {
  OptimizerConfig c;
  c.name = name;
  c.lr = lr;
  c.weight_decay = wd;
  c.beta1 = 0.8;
  c.beta2 = 0.95;
  c.eps = eps;
  return c;
}

template <class F>
void expect_input_error(F&& f, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error thrown";
  } catch (const sm::Error& e) {
    EXPECT_EQ(e.kind(), sm::ErrorKind::Input) << what << ": " << e.what();
  }
}

// ---- SGD ----------------------------------------------------------------------------------

TEST(OptimSgd, HandComputedMomentumTwoSteps) {
  // p = 1, g = 0.5 twice, lr 0.1, momentum 0.9:
  // step 1: buf = 0.5, p = 0.95; step 2: buf = 0.9*0.5 + 0.5 = 0.95, p = 0.95 - 0.095 = 0.855.
  Params ps;
  Param& p = ps.add("w", {1}, {1.0});
  auto opt = sm::make_optimizer(sgd_cfg(0.1, 0.9, 0.0, false), ps.ptrs());
  write(p.grad, {0.5});
  opt->step();
  EXPECT_NEAR(p.value.at(0), 0.95, 1e-15);
  opt->step();
  EXPECT_NEAR(p.value.at(0), 0.855, 1e-15);
  EXPECT_NEAR(opt->state().at(0).value->at(0), 0.95, 1e-15);
}

TEST(OptimSgd, PlainThreeSteps) {
  RefSgd r{0.1, 0.0, 0.0, false};
  run_and_compare(sgd_cfg(0.1, 0.0, 0.0, false), r, r, DType::F64, 1e-15);
}

TEST(OptimSgd, MomentumThreeSteps) {
  RefSgd r{0.05, 0.9, 0.0, false};
  run_and_compare(sgd_cfg(0.05, 0.9, 0.0, false), r, r, DType::F64, 1e-15);
}

TEST(OptimSgd, NesterovThreeSteps) {
  RefSgd r{0.05, 0.8, 0.0, true};
  run_and_compare(sgd_cfg(0.05, 0.8, 0.0, true), r, r, DType::F64, 1e-15);
}

TEST(OptimSgd, WeightDecayAddedToGrad) {
  RefSgd r{0.1, 0.9, 0.05, false};
  run_and_compare(sgd_cfg(0.1, 0.9, 0.05, false), r, r, DType::F64, 1e-15);
  RefSgd rn{0.1, 0.9, 0.05, true}, plain{0.1, 0.0, 0.05, false};
  run_and_compare(sgd_cfg(0.1, 0.9, 0.05, true), rn, rn, DType::F64, 1e-15);
  run_and_compare(sgd_cfg(0.1, 0.0, 0.05, false), plain, plain, DType::F64, 1e-15);
}

TEST(OptimSgd, F32MatchesDoubleReference) {
  RefSgd r{0.05, 0.9, 0.01, true};
  run_and_compare(sgd_cfg(0.05, 0.9, 0.01, true), r, r, DType::F32, 2e-7);
}

TEST(OptimSgd, StateIsMomentumBufferOnlyWithMomentum) {
  Params ps;
  ps.add("a.weight", {2, 3}, kP0);
  ps.add("b.bias", {3}, kQ0);
  auto with = sm::make_optimizer(sgd_cfg(0.1, 0.9, 0.0, false), ps.ptrs());
  auto st = with->state();
  ASSERT_EQ(st.size(), 2u);  // allocated eagerly, before any step
  EXPECT_EQ(st[0].param_name, "a.weight");
  EXPECT_EQ(st[0].state_name, "momentum_buffer");
  EXPECT_EQ(st[0].value->shape(), (sm::Shape{2, 3}));
  EXPECT_EQ(st[1].param_name, "b.bias");
  EXPECT_EQ(read(*st[1].value), Vec(3, 0.0));
  auto without = sm::make_optimizer(sgd_cfg(0.1, 0.0, 0.0, false), ps.ptrs());
  EXPECT_TRUE(without->state().empty());
}

// ---- Adam / AdamW -------------------------------------------------------------------------

TEST(OptimAdam, HandComputedFirstStep) {
  // Step 1: m̂ = g and v̂ = g², so p -= lr·g/(|g| + eps): with eps = 0 exactly lr·sign(g);
  // with eps = 0.5, g = 0.5: 1 - 0.01·0.5/1.0 = 0.995.
  Params ps;
  Param& p = ps.add("w", {2}, {1.0, 1.0});
  OptimizerConfig c;
  c.lr = 0.01;
  c.eps = 0.0;
  auto opt = sm::make_optimizer(c, ps.ptrs());
  write(p.grad, {0.5, -3.0});
  opt->step();
  EXPECT_NEAR(p.value.at(0), 0.99, 1e-15);
  EXPECT_NEAR(p.value.at(1), 1.01, 1e-15);
  EXPECT_NEAR(opt->state()[0].value->at(0), 0.05, 1e-15);    // exp_avg = 0.1·g
  EXPECT_NEAR(opt->state()[1].value->at(1), 0.009, 1e-15);   // exp_avg_sq = 0.001·g²

  Params ps2;
  Param& q = ps2.add("w", {1}, {1.0});
  c.eps = 0.5;
  auto opt2 = sm::make_optimizer(c, ps2.ptrs());
  write(q.grad, {0.5});
  opt2->step();
  EXPECT_NEAR(q.value.at(0), 0.995, 1e-15);  // eps added after sqrt(v̂), not inside it
}

TEST(OptimAdam, ThreeStepsF64) {
  RefAdam r{0.01, 0.8, 0.95, 1e-2, 0.0, false};
  run_and_compare(adam_cfg("adam", 0.01, 0.0, 1e-2), r, r, DType::F64, 1e-14);
}

TEST(OptimAdam, DefaultBetasFiveSteps) {
  OptimizerConfig c;  // adam, lr 1e-3, betas 0.9/0.999, eps 1e-8
  RefAdam r{1e-3, 0.9, 0.999, 1e-8, 0.0, false};
  run_and_compare(c, r, r, DType::F64, 1e-14, true, 5);
}

TEST(OptimAdam, ThreeStepsF32) {
  RefAdam r{0.01, 0.8, 0.95, 1e-2, 0.1, false};
  run_and_compare(adam_cfg("adam", 0.01, 0.1, 1e-2), r, r, DType::F32, 5e-7);
}

TEST(OptimAdam, L2WeightDecayAddedToGrad) {
  RefAdam r{0.01, 0.8, 0.95, 1e-2, 0.2, false};
  run_and_compare(adam_cfg("adam", 0.01, 0.2, 1e-2), r, r, DType::F64, 1e-14);
}

TEST(OptimAdamW, DecoupledWeightDecay) {
  RefAdam r{0.01, 0.8, 0.95, 1e-2, 0.2, true};
  run_and_compare(adam_cfg("adamw", 0.01, 0.2, 1e-2), r, r, DType::F64, 1e-14);
  run_and_compare(adam_cfg("adamw", 0.01, 0.2, 1e-2), r, r, DType::F32, 5e-7);
}

TEST(OptimAdamW, HandComputedFirstStep) {
  // p = 2, g = 0.5, lr 0.1, wd 0.5, eps 0: p = 2·(1 - 0.05) - 0.1·1 = 1.8.
  Params ps;
  Param& p = ps.add("w", {1}, {2.0});
  OptimizerConfig c;
  c.name = "adamw";
  c.lr = 0.1;
  c.weight_decay = 0.5;
  c.eps = 0.0;
  auto opt = sm::make_optimizer(c, ps.ptrs());
  write(p.grad, {0.5});
  opt->step();
  EXPECT_NEAR(p.value.at(0), 1.8, 1e-15);
}

// The update of every element is PyTorch's single-tensor formula evaluated in double once per
// element, its fused products (L2, lerp, the second moment) written as std::fma as the scalar
// loop compiled them before vectorisation (the production loop is vectorised over elements and
// built without other contraction: the same operations per element, so the same bits): Adam and
// AdamW, with and without weight decay, both forms of lerp (β1 0.9: 1 − β1 < 0.5; β1 0.3: the
// other), f32 and f64, 40000 elements (vectors, tails, the parallel path), 3 steps.
template <typename T>
void expect_adam_bits(const char* name, double wd, double beta1) {
  const int64_t n = 40000;
  const double lr = 1e-2, beta2 = 0.99, eps = 1e-8;
  const DType dt = std::is_same_v<T, float> ? DType::F32 : DType::F64;
  Params ps;
  Vec p0(n);
  for (int64_t i = 0; i < n; ++i) p0[i] = std::sin(0.37 * static_cast<double>(i)) * 0.5;
  Param& prm = ps.add("w.weight", {n}, p0, dt);
  OptimizerConfig c;
  c.name = name;
  c.lr = lr;
  c.weight_decay = wd;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.eps = eps;
  auto opt = sm::make_optimizer(c, ps.ptrs());
  const bool decoupled = std::string(name) == "adamw";
  std::vector<T> p(n), m(n, T(0)), v(n, T(0));
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(p0[i]);
  for (int t = 1; t <= 3; ++t) {
    Vec g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = std::cos(0.11 * static_cast<double>(i * t)) * (i % 5 == 0 ? 1e-3 : 1.0);
    write(prm.grad, g);
    opt->step();
    const double step_size = lr / (1.0 - std::pow(beta1, t)), bc2 = std::sqrt(1.0 - std::pow(beta2, t));
    const double l2 = decoupled ? 0.0 : wd, decay = decoupled ? 1.0 - lr * wd : 1.0, w = 1.0 - beta1;
    for (int64_t i = 0; i < n; ++i) {
      double pi = p[i], gi = static_cast<double>(static_cast<T>(g[i]));
      if (l2 != 0.0) gi = std::fma(l2, pi, gi);
      if (decay != 1.0) pi = pi * decay;
      const double mi = m[i];
      const T m_new = static_cast<T>(std::abs(w) < 0.5 ? std::fma(w, gi - mi, mi) : std::fma(-(gi - mi), 1.0 - w, gi));
      const T v_new = static_cast<T>(std::fma(static_cast<double>(v[i]), beta2, (1.0 - beta2) * gi * gi));
      m[i] = m_new;
      v[i] = v_new;
      const double denom = std::sqrt(static_cast<double>(v_new)) / bc2 + eps;
      p[i] = static_cast<T>(pi + (-step_size) * static_cast<double>(m_new) / denom);
    }
    const T* got = prm.value.data<T>();
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &p[i], sizeof(T)) != 0;
    EXPECT_EQ(differ, 0) << name << " wd " << wd << " beta1 " << beta1 << " step " << t;
  }
}

TEST(OptimAdam, EveryElementIsThePerElementFormulaBitwise) {
  for (const char* name : {"adam", "adamw"})
    for (double wd : {0.0, 0.01})
      for (double beta1 : {0.9, 0.3}) {
        expect_adam_bits<float>(name, wd, beta1);
        expect_adam_bits<double>(name, wd, beta1);
      }
}

TEST(OptimWeightDecay, ParamOptOutIsRespected) {
  // Param b has weight_decay = false: it must follow the wd = 0 reference, a the decayed one.
  RefSgd s{0.1, 0.9, 0.05, false}, s0{0.1, 0.9, 0.0, false};
  run_and_compare(sgd_cfg(0.1, 0.9, 0.05, false), s, s0, DType::F64, 1e-15, false);
  RefAdam a{0.01, 0.8, 0.95, 1e-2, 0.2, false}, a0{0.01, 0.8, 0.95, 1e-2, 0.0, false};
  run_and_compare(adam_cfg("adam", 0.01, 0.2, 1e-2), a, a0, DType::F64, 1e-14, false);
  RefAdam w{0.01, 0.8, 0.95, 1e-2, 0.2, true}, w0{0.01, 0.8, 0.95, 1e-2, 0.0, true};
  run_and_compare(adam_cfg("adamw", 0.01, 0.2, 1e-2), w, w0, DType::F64, 1e-14, false);
}

TEST(OptimAdam, StateNamesShapesAndEagerAllocation) {
  Params ps;
  ps.add("a.weight", {2, 3}, kP0, DType::F32);
  ps.add("b.bias", {3}, kQ0, DType::F32);
  auto opt = sm::make_optimizer(adam_cfg("adamw", 0.01, 0.0, 1e-8), ps.ptrs());
  auto st = opt->state();
  ASSERT_EQ(st.size(), 4u);
  const char* names[] = {"exp_avg", "exp_avg_sq", "exp_avg", "exp_avg_sq"};
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(st[k].param_name, k < 2 ? "a.weight" : "b.bias");
    EXPECT_EQ(st[k].state_name, names[k]);
    ASSERT_TRUE(st[k].value->defined());
    EXPECT_EQ(st[k].value->dtype(), DType::F32);
    EXPECT_EQ(st[k].value->shape(), k < 2 ? (sm::Shape{2, 3}) : (sm::Shape{3}));
  }
}

// state_names(): the per-parameter state names of state(), known from the configuration
// alone (the checkpoint tensor list of a rank that holds no parameter).
TEST(Optim, StateNamesMatchStateAndNeedNoParams) {
  Params ps;
  ps.add("a.weight", {2, 3}, kP0);
  using Names = std::vector<std::string>;
  const std::pair<OptimizerConfig, Names> cases[] = {
      {sgd_cfg(0.1, 0.9, 0.0, false), Names{"momentum_buffer"}},
      {sgd_cfg(0.1, 0.0, 0.0, false), Names{}},
      {adam_cfg("adam", 0.01, 0.0, 1e-8), Names{"exp_avg", "exp_avg_sq"}},
      {adam_cfg("adamw", 0.01, 0.0, 1e-8), Names{"exp_avg", "exp_avg_sq"}}};
  for (const auto& [cfg, want] : cases) {
    auto opt = sm::make_optimizer(cfg, ps.ptrs());
    EXPECT_EQ(opt->state_names(), want) << cfg.name;
    Names got;
    for (const sm::OptimState& s : opt->state()) got.push_back(s.state_name);
    EXPECT_EQ(got, want) << cfg.name;
    EXPECT_EQ(sm::make_optimizer(cfg, {})->state_names(), want) << cfg.name << " without params";
  }
}

// Resume: a fresh optimizer given the params, state tensors and step count after 2 steps
// must produce exactly the same 3rd step; without the step count it must not.
TEST(OptimAdam, ResumeWithStateAndStepCount) {
  for (bool restore_count : {true, false}) {
    Params ps, ps2;
    Param& a = ps.add("a.weight", {2, 3}, kP0);
    Param& a2 = ps2.add("a.weight", {2, 3}, kP0);
    const OptimizerConfig c = adam_cfg("adam", 0.01, 0.1, 1e-3);
    auto opt = sm::make_optimizer(c, ps.ptrs());
    for (int t = 1; t <= 2; ++t) {
      write(a.grad, grads_for(t, kP0.size(), 0.0));
      opt->step();
    }
    auto resumed = sm::make_optimizer(c, ps2.ptrs());
    a2.value.copy_from(a.value);
    auto src = opt->state(), dst = resumed->state();
    ASSERT_EQ(src.size(), dst.size());
    for (size_t k = 0; k < src.size(); ++k) {
      EXPECT_EQ(src[k].state_name, dst[k].state_name);
      dst[k].value->copy_from(*src[k].value);
    }
    if (restore_count) resumed->set_step_count(opt->step_count());
    const Vec g3 = grads_for(3, kP0.size(), 0.0);
    write(a.grad, g3);
    write(a2.grad, g3);
    opt->step();
    resumed->step();
    bool all_equal = true;
    for (int64_t i = 0; i < a.value.numel(); ++i) all_equal &= a.value.at(i) == a2.value.at(i);
    EXPECT_EQ(all_equal, restore_count) << "restore_count=" << restore_count;
    if (restore_count) {
      EXPECT_EQ(resumed->step_count(), 3);
    }
  }
}

TEST(Optim, SetLrTakesEffectOnNextStep) {
  Params ps;
  Param& p = ps.add("w", {1}, {1.0});
  auto opt = sm::make_optimizer(sgd_cfg(0.1, 0.0, 0.0, false), ps.ptrs());
  write(p.grad, {1.0});
  opt->set_lr(0.25);
  EXPECT_EQ(opt->lr(), 0.25);
  EXPECT_EQ(opt->config().lr, 0.25);
  opt->step();
  EXPECT_NEAR(p.value.at(0), 0.75, 1e-15);
  expect_input_error([&] { opt->set_lr(-1.0); }, "negative set_lr");
}

TEST(Optim, UnknownNameAndBadHyperParametersThrowInputError) {
  Params ps;
  ps.add("w", {2}, {1.0, 2.0});
  auto make = [&](OptimizerConfig c) { return [&ps, c] { sm::make_optimizer(c, ps.ptrs()); }; };
  OptimizerConfig c;
  c.name = "rmsprop";
  expect_input_error(make(c), "unknown name");
  c.name = "Adam";
  expect_input_error(make(c), "names are case-sensitive");
  for (const char* name : {"sgd", "adam", "adamw"}) {
    OptimizerConfig b;
    b.name = name;
    b.lr = -1e-3;
    expect_input_error(make(b), "negative lr");
    b = OptimizerConfig{};
    b.name = name;
    b.weight_decay = -0.1;
    expect_input_error(make(b), "negative weight decay");
    b.weight_decay = std::nan("");
    expect_input_error(make(b), "NaN weight decay");
  }
  c = sgd_cfg(0.1, -0.5, 0.0, false);
  expect_input_error(make(c), "negative momentum");
  c = sgd_cfg(0.1, 0.0, 0.0, true);
  expect_input_error(make(c), "nesterov without momentum");
  for (const char* name : {"adam", "adamw"}) {
    OptimizerConfig b;
    b.name = name;
    b.beta1 = 1.0;
    expect_input_error(make(b), "beta1 = 1");
    b.beta1 = 0.9;
    b.beta2 = -0.1;
    expect_input_error(make(b), "negative beta2");
    b.beta2 = 0.999;
    b.eps = -1e-8;
    expect_input_error(make(b), "negative eps");
  }
}

TEST(Optim, ResultsDoNotDependOnThreadCount) {
  const int64_t n = 100003;  // above the parallel threshold, not a multiple of anything nice
  Vec p0(n), g(n);
  for (int64_t i = 0; i < n; ++i) {
    p0[i] = std::sin(0.001 * i);
    g[i] = std::cos(0.0037 * i);
  }
  const int saved_threads = omp_get_max_threads();
  for (const char* name : {"sgd", "adam", "adamw"}) {
    Vec results[2];
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Params ps;
      Param& p = ps.add("w", {n}, p0, DType::F32);
      write(p.grad, g);
      OptimizerConfig c = adam_cfg(name, 0.01, 0.01, 1e-8);
      c.momentum = 0.9;
      auto opt = sm::make_optimizer(c, ps.ptrs());
      opt->step();
      opt->step();
      results[threads - 1] = read(p.value);
    }
    EXPECT_EQ(results[0], results[1]) << name;
  }
  omp_set_num_threads(saved_threads);
}

}  // namespace
