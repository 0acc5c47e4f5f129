// test_spiking_attention.cpp — the spiking self-attention core ("ssa", layers/spiking_attention.h,
// kernels/cpu/spiking_attention.h) against the naive reference (tests/ref/spiking_attention_ref):
// forward on spike inputs in f64 (bitwise) and f32 (to rounding) over many shapes, the exact
// counting path vs the generic path, backward vs central finite differences and vs the
// reference, two microbatches in flight, spikes saved as bits (allocator accounting), shape
// errors, and the "ssa" model-spec entry (fields, defaults, located errors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "../ref/spiking_attention_ref.h"
#include "gradient_check.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/layers/spiking_attention.h"
#include "spikemesh/models/spec_loader.h"

namespace sm {
namespace {

using test::vec;

struct SsaCase {
  int64_t T, N, heads, d, L;
  Shape in() const { return {T, N, 3 * heads * d, L}; }   // [T, N, 3C, L]
  Shape out() const { return {T, N, heads * d, L}; }      // [T, N, C, L]
  ref::SsaRefGeom geom() const { return {T, N, heads, d, L}; }
};

std::string str(const SsaCase& c) {
  std::ostringstream os;
  os << "T " << c.T << " N " << c.N << " heads " << c.heads << " d " << c.d << " L " << c.L;
  return os.str();
}

// Hand-picked corners plus a seeded sweep over heads {1, 2, 4}, d 1..8, L 1..16, T 1..3, N 1..2;
// L 64, 65 and 130 cross the 64-token word boundary of the bit-packed rows.
std::vector<SsaCase> cases() {
  std::vector<SsaCase> cs = {{1, 1, 1, 1, 1},  {1, 1, 1, 8, 16}, {2, 2, 2, 4, 7},  {3, 1, 4, 2, 9},
                             {1, 2, 4, 8, 16}, {2, 1, 2, 3, 64}, {1, 1, 1, 5, 65}, {1, 2, 2, 6, 130}};
  CounterRng rng(11, "test/ssa_cases");
  const int64_t heads[] = {1, 2, 4};
  for (int k = 0; k < 24; ++k) {
    auto pick = [&](int which, int64_t lo, int64_t hi) {
      return lo + static_cast<int64_t>(rng.uniform(k, which) * (hi - lo + 1)) % (hi - lo + 1);
    };
    cs.push_back({pick(0, 1, 3), pick(1, 1, 2), heads[pick(2, 0, 2)], pick(3, 1, 8), pick(4, 1, 16)});
  }
  return cs;
}

// Random spikes (about 40% ones), flagged binary.
Tensor spikes(const Shape& s, DType dt, uint64_t seed, double p = 0.4) {
  Tensor x = test::random_tensor(s, dt, seed, 0.0, 1.0);
  for (int64_t i = 0; i < x.numel(); ++i) test::detail::set(x, i, x.at(i) < p ? 1.0 : 0.0);
  x.set_binary(true);
  return x;
}

// y and dx of one forward + backward of a fresh layer (slot 0).
struct FwdBwd {
  Tensor y, dx;
};
FwdBwd run(const SsaCase& c, const Tensor& x, const Tensor& dy, double scale = 0.125) {
  SpikingAttention layer(static_cast<int>(c.heads), scale);
  Ctx ctx;
  FwdBwd r;
  r.y = layer.forward(x, ctx);
  r.dx = layer.backward_input(dy, ctx);
  return r;
}

// max |a - b| <= tol · max(1, max |b|)
::testing::AssertionResult near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "size " << a.size() << " vs " << b.size();
  double m = 1.0;
  for (double v : b) m = std::max(m, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol * m))
      return ::testing::AssertionFailure() << "[" << i << "]: " << a[i] << " vs " << b[i] << " (scale " << m << ")";
  return ::testing::AssertionSuccess();
}

// ---- forward ------------------------------------------------------------------------------

TEST(SpikingAttention, ForwardOnSpikesMatchesReference) {
  int seed = 0;
  for (double scale : {0.125, 0.3}) {
    for (const SsaCase& c : cases()) {
      SCOPED_TRACE(str(c) + " scale " + std::to_string(scale));
      const Tensor x64 = spikes(c.in(), DType::F64, 100 + seed++);
      std::vector<double> want;
      ref::ssa_forward_ref(vec(x64), c.geom(), scale, want);
      SpikingAttention layer(static_cast<int>(c.heads), scale);
      Ctx ctx;
      const Tensor y64 = layer.forward(x64, ctx);
      ASSERT_EQ(y64.shape(), c.out());
      EXPECT_FALSE(y64.is_binary());
      ASSERT_EQ(vec(y64), want);  // f64: bitwise (integer counts times the scale)
      Tensor x32 = x64.to_dtype(DType::F32);
      x32.set_binary(true);
      const Tensor y32 = layer.forward(x32, ctx);
      ASSERT_EQ(y32.dtype(), DType::F32);
      const std::vector<double> got32 = vec(y32);
      for (size_t i = 0; i < want.size(); ++i) {
        const double w32 = static_cast<double>(static_cast<float>(want[i]));
        if (scale == 0.125)
          ASSERT_EQ(got32[i], w32) << i;  // power-of-two scale: exact in f32 too
        else
          ASSERT_NEAR(got32[i], want[i], 2e-7 * std::fabs(want[i])) << i;  // one f32 rounding
      }
    }
  }
}

// The exact counting path (binary flag) equals the generic double-accumulation path on the
// same 0/1 values bitwise in f64 and f32, and the generic path matches the reference on
// arbitrary values.
TEST(SpikingAttention, CountingPathEqualsGenericPath) {
  int seed = 0;
  for (const SsaCase& c : cases()) {
    SCOPED_TRACE(str(c));
    for (DType dt : {DType::F64, DType::F32}) {
      const Tensor xb = spikes(c.in(), dt, 300 + seed++);
      Tensor xg = xb.clone();
      xg.set_binary(false);
      SpikingAttention layer(static_cast<int>(c.heads));
      Ctx ctx;
      ASSERT_EQ(vec(layer.forward(xb, ctx)), vec(layer.forward(xg, ctx)));
    }
    const Tensor x = test::random_tensor(c.in(), DType::F64, 400 + seed++, -2.0, 2.0);
    std::vector<double> want;
    ref::ssa_forward_ref(vec(x), c.geom(), 0.125, want);
    SpikingAttention layer(static_cast<int>(c.heads));
    Ctx ctx;
    EXPECT_TRUE(near(vec(layer.forward(x, ctx)), want, 1e-13));
    EXPECT_TRUE(near(vec(layer.forward(x.to_dtype(DType::F32), ctx)), want, 1e-6));
  }
}

// ---- backward -----------------------------------------------------------------------------

TEST(SpikingAttention, BackwardMatchesFiniteDifferences) {
  const SsaCase cs[] = {{2, 2, 2, 3, 5}, {1, 1, 1, 4, 6}, {2, 1, 4, 2, 3}};
  for (const SsaCase& c : cs)
    for (double scale : {0.125, 0.7}) {
      SCOPED_TRACE(str(c) + " scale " + std::to_string(scale));
      auto u = test::wrap(std::make_unique<SpikingAttention>(static_cast<int>(c.heads), scale));
      const Tensor x = test::random_tensor(c.in(), DType::F64, 17, -1.5, 1.5);  // not binary
      test::GradCheckOptions o;
      o.max_checks = 96;
      EXPECT_TRUE(test::check_layer_gradients(*u, x, o));
    }
}

TEST(SpikingAttention, BackwardMatchesReference) {
  int seed = 0;
  for (const SsaCase& c : cases()) {
    if (c.L > 32) continue;  // the reference backward is O(d²·L²) per head
    SCOPED_TRACE(str(c));
    for (bool binary : {true, false}) {
      const Tensor x = binary ? spikes(c.in(), DType::F64, 500 + seed++)
                              : test::random_tensor(c.in(), DType::F64, 500 + seed++, -1.0, 1.0);
      const Tensor dy = test::random_tensor(c.out(), DType::F64, 600 + seed++);
      std::vector<double> want;
      ref::ssa_backward_ref(vec(x), vec(dy), c.geom(), 0.125, want);
      const FwdBwd r64 = run(c, x, dy);
      ASSERT_EQ(r64.dx.shape(), c.in());
      EXPECT_TRUE(near(vec(r64.dx), want, 1e-13)) << "f64, binary " << binary;
      Tensor x32 = x.to_dtype(DType::F32);
      x32.set_binary(binary);
      const FwdBwd r32 = run(c, x32, dy.to_dtype(DType::F32));
      EXPECT_TRUE(near(vec(r32.dx), want, 2e-6)) << "f32, binary " << binary;
    }
  }
}

// The backward that adds only where Q, K, V fire equals the general double path bitwise, in f64
// and f32, over every case (d up to 8 here; 16, 32 — the register-held dQ sums —, 40 and 64
// below; L across word boundaries), at a power-of-two scale and at one that rounds.
TEST(SpikingAttention, BinaryBackwardEqualsGenericBackward) {
  std::vector<SsaCase> cs = cases();
  cs.push_back({2, 1, 1, 64, 70});
  cs.push_back({1, 2, 2, 32, 196});
  cs.push_back({1, 1, 2, 16, 100});
  cs.push_back({1, 1, 1, 40, 130});
  int seed = 0;
  for (const SsaCase& c : cs) {
    SCOPED_TRACE(str(c));
    for (DType dt : {DType::F64, DType::F32})
      for (double scale : {0.125, 0.3}) {
        const Tensor x = spikes(c.in(), dt, 900 + seed++, 0.2);
        const Tensor dy = test::random_tensor(c.out(), dt, 950 + seed++);
        const cpu::SsaGeom g{c.T * c.N, c.heads, c.d, c.L};
        Tensor fast = Tensor::empty(c.in(), dt), general = Tensor::empty(c.in(), dt);
        if (dt == DType::F64) {
          cpu::ssa_backward<double>(dy.data<double>(), x.data<double>(), g, scale, true, fast.data<double>());
          cpu::ssa_backward<double>(dy.data<double>(), x.data<double>(), g, scale, false, general.data<double>());
        } else {
          cpu::ssa_backward<float>(dy.data<float>(), x.data<float>(), g, scale, true, fast.data<float>());
          cpu::ssa_backward<float>(dy.data<float>(), x.data<float>(), g, scale, false, general.data<float>());
        }
        ASSERT_EQ(vec(fast), vec(general)) << dtype_name(dt) << " scale " << scale;
      }
  }
}

// ---- slots and saved memory -----------------------------------------------------------------

// F A (slot 0), F B (slot 1), B B, B A == A then B one after the other (bitwise).
TEST(SpikingAttention, TwoMicrobatchesInFlight) {
  const SsaCase c{2, 2, 2, 3, 6};
  for (bool binary : {true, false}) {
    SCOPED_TRACE(binary ? "spikes" : "real values");
    Tensor xs[2], dys[2];
    for (int k = 0; k < 2; ++k) {
      Shape s = c.in();
      s[1] = k == 0 ? 2 : 1;  // microbatches of different sizes
      xs[k] = binary ? spikes(s, DType::F64, 700 + k) : test::random_tensor(s, DType::F64, 700 + k);
      Shape o = c.out();
      o[1] = s[1];
      dys[k] = test::random_tensor(o, DType::F64, 710 + k);
    }
    const FwdBwd seq[2] = {run(c, xs[0], dys[0]), run(c, xs[1], dys[1])};
    auto u = test::wrap(std::make_unique<SpikingAttention>(static_cast<int>(c.heads)));
    Ctx a, b;
    a.slot = 0;
    b.slot = 1;
    const Tensor ya = u->forward(xs[0], a);
    const Tensor yb = u->forward(xs[1], b);
    const Tensor dxb = u->backward_input(dys[1], b);
    const Tensor dxa = u->backward_input(dys[0], a);
    EXPECT_EQ(vec(ya), vec(seq[0].y));
    EXPECT_EQ(vec(yb), vec(seq[1].y));
    EXPECT_EQ(vec(dxa), vec(seq[0].dx));
    EXPECT_EQ(vec(dxb), vec(seq[1].dx));
    EXPECT_THROW(u->backward_input(dys[0], a), Error) << "B released the slot";
  }
}

size_t rounded(size_t bytes) { return CpuCachingAllocator::round_size(bytes); }

// Bytes the layer holds for its slot after a forward, the caller keeping x and dropping y.
size_t kept_by_forward(SpikingAttention& layer, const Tensor& x, Ctx& ctx) {
  Allocator& a = cpu_allocator();
  const size_t before = a.current_bytes();
  { const Tensor y = layer.forward(x, ctx); }
  return a.current_bytes() - before;
}

TEST(SpikingAttention, SpikesAreSavedAsBits) {
  const SsaCase c{3, 2, 2, 8, 16};  // 3C·L·T·N = 4608 elements
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor xb = spikes(c.in(), dt, 800);
    Tensor xg = xb.clone();
    xg.set_binary(false);
    const Tensor dy = test::random_tensor(c.out(), dt, 801);
    SpikingAttention layer(static_cast<int>(c.heads));
    Allocator& a = cpu_allocator();
    Ctx ctx;
    const size_t base = a.current_bytes();
    // Binary: the slot holds the packed bits, 1 bit per element.
    EXPECT_EQ(kept_by_forward(layer, xb, ctx), rounded((xb.numel() + 7) / 8));
    std::vector<double> dx_bits;
    { dx_bits = vec(layer.backward_input(dy, ctx)); }
    EXPECT_EQ(a.current_bytes(), base) << "B released the bits";
    // Not binary: a reference to the caller's x, no bytes of its own.
    EXPECT_EQ(kept_by_forward(layer, xg, ctx), 0u);
    std::vector<double> dx_ref;
    { dx_ref = vec(layer.backward_input(dy, ctx)); }
    EXPECT_EQ(a.current_bytes(), base);
    EXPECT_EQ(dx_bits, dx_ref) << "the bits path gives the float path's gradient";
  }
}

// ---- shapes and configuration -----------------------------------------------------------------

void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Input) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "no '" << n << "' in: " << msg;
  }
}

TEST(SpikingAttention, OutputShapeAndErrors) {
  SpikingAttention l4(4);
  EXPECT_EQ(l4.type(), "ssa");
  EXPECT_EQ(l4.scale(), 0.125);
  EXPECT_TRUE(l4.params().empty());
  EXPECT_EQ(l4.output_shape({24, 7}), (Shape{8, 7}));
  EXPECT_EQ(SpikingAttention(3).output_shape({9, 1}), (Shape{3, 1}));
  expect_input_error([&] { l4.output_shape({24}); }, {"[3C, L]", "[24]"});
  expect_input_error([&] { l4.output_shape({24, 7, 7}); }, {"[3C, L]"});
  expect_input_error([&] { l4.output_shape({25, 7}); }, {"25", "divisible by 3"});
  expect_input_error([&] { l4.output_shape({18, 7}); }, {"4 heads", "C = 6", "divisible"});
  expect_input_error([] { SpikingAttention bad(0); }, {"heads", ">= 1"});
}

// ---- model spec -------------------------------------------------------------------------------

// input [3C = 24, L = 5] -> ssa -> [8, 5] -> flatten -> linear -> [3]
const char* kSsaSpec = R"([model]
name = "ssa_tiny"
input = [24, 5]
num_classes = 3
T = 2
loss = "mean_ce"
input_kind = "events"

[[unit]]
name = "block"
layers = [
  { type = "ssa", name = "attn", heads = 2 },
  { type = "lif", name = "attn_lif", v_threshold = 0.5 },
  { type = "flatten", name = "flatten" },
  { type = "linear", name = "head", in_features = 40, out_features = 3 },
]
)";

std::string write_spec(const std::string& tag, const std::string& text) {
  const std::string path = ::testing::TempDir() + "sm_ssa_" + std::to_string(getpid()) + "_" + tag + ".toml";
  std::ofstream(path) << text;
  return path;
}

std::string with(const std::string& base, const std::string& from, const std::string& to) {
  const size_t at = base.find(from);
  EXPECT_NE(at, std::string::npos) << "test bug: '" << from << "' not in the spec";
  if (at == std::string::npos) return base;
  return base.substr(0, at) + to + base.substr(at + from.size());
}

void expect_spec_error(const std::string& tag, const std::string& text, const std::vector<std::string>& needles) {
  const std::string path = write_spec(tag, text);
  expect_input_error([&] { load_model_spec(path); }, needles);
  try {
    load_model_spec(path);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "message does not name the file: " << e.what();
  }
  std::remove(path.c_str());
}

const SpikingAttention* find_ssa(Model& m) {
  for (auto& u : m.units)
    for (Layer* l : u->children())
      if (auto* s = dynamic_cast<const SpikingAttention*>(l)) return s;
  return nullptr;
}

TEST(SsaSpec, LoadsWithDefaultsAndRuns) {
  const std::string path = write_spec("ok", kSsaSpec);
  auto m = load_model_spec(path);
  const SpikingAttention* s = find_ssa(*m);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->heads(), 2);
  EXPECT_EQ(s->scale(), 0.125);
  m->finalize(DType::F32, Device::cpu(), 3);
  Ctx ctx;
  const Tensor x = spikes({2, 2, 24, 5}, DType::F32, 900);  // [T, N, 3C, L]
  const Tensor y = m->forward(x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  const Tensor dx = m->backward(test::random_tensor(y.shape(), DType::F32, 901), ctx);
  EXPECT_EQ(dx.shape(), x.shape());
  std::remove(path.c_str());

  const std::string path2 = write_spec("scale", with(kSsaSpec, "heads = 2", "heads = 4, scale = 0.25"));
  auto m2 = load_model_spec(path2);
  ASSERT_NE(find_ssa(*m2), nullptr);
  EXPECT_EQ(find_ssa(*m2)->heads(), 4);
  EXPECT_EQ(find_ssa(*m2)->scale(), 0.25);
  std::remove(path2.c_str());
}

TEST(SsaSpec, Errors) {
  // 3C = 24: C = 8 is not divisible by 3 heads.
  expect_spec_error("heads3", with(kSsaSpec, "heads = 2", "heads = 3"),
                    {"block.attn", "(ssa)", "input [24, 5]", "3 heads", "C = 8", "divisible by heads"});
  expect_spec_error("not3c", with(with(kSsaSpec, "input = [24, 5]", "input = [16, 5]"), "in_features = 40", "in_features = 25"),
                    {"block.attn", "16", "divisible by 3"});
  expect_spec_error("no_heads", with(kSsaSpec, ", heads = 2", ""), {"block.attn", "'heads'"});
  expect_spec_error("heads0", with(kSsaSpec, "heads = 2", "heads = 0"), {"'heads'"});
  expect_spec_error("scale_str", with(kSsaSpec, "heads = 2", "heads = 2, scale = \"big\""), {"'scale'"});
  expect_spec_error("typo", with(kSsaSpec, "heads = 2", "heads = 2, scal = 0.5"), {"scal"});
  expect_spec_error("unknown_type", with(kSsaSpec, "type = \"ssa\"", "type = \"attention\""), {"attention", "ssa"});
}

}  // namespace
}  // namespace sm
