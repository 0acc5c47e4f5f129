// test_fused_epilogue.cpp — the fused batch norm → neuron / max-pooling epilogues
// (layers/fused_epilogue.h): the kernels' normalisation-as-read against normalise-then-neuron
// and normalise-then-pool (bitwise: the same fma; the same winners), batch norm's backward sums
// made in the neuron's backward pass or from the pooled gradient against bn_backward_moments,
// for every neuron kind and option, both dtypes, sizes that end blocks mid-channel, pooling
// windows 3/2/1 (the vector stride-2 path included); Conv → BN → [max pool →] LIF → Conv → BN →
// [max pool →] PLIF units fused against unfused (forward output and BN running statistics
// bitwise; input and parameter gradients within rounding, since BN's backward works from its
// input instead of its output); the fusion really ran; eval mode; SPIKEMESH_FUSE's check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "error_of.h"
#include "gradient_check.h"
#include "spikemesh/kernels/cpu/batchnorm.h"
#include "spikemesh/kernels/cpu/neuron.h"
#include "spikemesh/kernels/cpu/pool.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/fused_epilogue.h"
#include "spikemesh/layers/layer_profile.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/unit.h"

namespace sm {
namespace {

template <typename T>
std::vector<T> random_values(size_t n, uint64_t seed, double lo, double hi) {
  Tensor t = test::random_tensor({static_cast<int64_t>(n)}, DType::F64, seed, lo, hi);
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(t.data<double>()[i]);
  return v;
}

template <typename T>
void expect_bitwise(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) first = diff++ == 0 ? i : first;
  EXPECT_EQ(diff, 0u) << what << ": first at " << first << ": " << a[first] << " vs " << b[first];
}

// neuron kernels over x normalised by the affine as they read it == over bn_normalize(x).
template <typename T>
void expect_kernel_fusion_exact(const cpu::NeuronKernelConfig& kc, int64_t steps, int64_t N, int64_t C, int64_t inner,
                                bool rate_grad) {
  const int64_t M = N * C * inner, total = steps * M;
  const std::vector<T> x = random_values<T>(total, 7, -2.0, 3.0);
  const std::vector<T> gs = random_values<T>(total, 8, -1.0, 1.0);
  cpu::NeuronInputAffine a;
  a.channels = C;
  a.inner = inner;
  a.center = random_values<double>(C, 9, -0.5, 0.5);  // doubles: the kernel rounds them to T
  a.scale = random_values<double>(C, 10, 0.3, 2.5);
  a.offset = random_values<double>(C, 11, -0.4, 1.2);

  cpu::BnShape s;
  s.outer = steps * N;
  s.channels = C;
  s.inner = inner;
  std::vector<T> y(total);
  cpu::bn_normalize<T>(x.data(), s, a.center.data(), a.scale.data(), a.offset.data(), y.data());

  std::vector<T> v_ref(M, T(0.1)), v_fused(M, T(0.1)), s_ref(total), s_fused(total);
  const int64_t f_ref = cpu::neuron_forward<T>(kc, y.data(), steps, M, v_ref.data(), s_ref.data());
  const int64_t f_fused = cpu::neuron_forward<T>(kc, x.data(), steps, M, v_fused.data(), s_fused.data(), &a);
  EXPECT_EQ(f_ref, f_fused);
  expect_bitwise(s_ref, s_fused, "spikes");
  expect_bitwise(v_ref, v_fused, "final membrane");

  const std::vector<T> v0(M, T(0.1));
  std::vector<T> gx_ref(total), gx_fused(total);
  double r_ref = 0, r_fused = 0;
  cpu::neuron_backward<T>(kc, gs.data(), y.data(), v0.data(), steps, M, gx_ref.data(), rate_grad ? &r_ref : nullptr);
  cpu::neuron_backward<T>(kc, gs.data(), x.data(), v0.data(), steps, M, gx_fused.data(), rate_grad ? &r_fused : nullptr,
                          nullptr, nullptr, &a);
  expect_bitwise(gx_ref, gx_fused, "input gradient");
  EXPECT_EQ(r_ref, r_fused);

  // The batch-norm sums made in the same pass equal bn_backward_moments over grad_x and x
  // (double sums in another order: within a few units of double rounding).
  cpu::NeuronBnGradSums sums;
  std::vector<T> gx_sums(total);
  cpu::neuron_backward<T>(kc, gs.data(), x.data(), v0.data(), steps, M, gx_sums.data(), nullptr, nullptr, nullptr, &a,
                          &sums);
  expect_bitwise(gx_ref, gx_sums, "input gradient (with the sums)");
  EXPECT_EQ(sums.of, static_cast<const void*>(gx_sums.data()));
  std::vector<double> dy(C), dy_xc(C);
  cpu::bn_backward_moments<T>(gx_sums.data(), x.data(), s, a.center.data(), dy.data(), dy_xc.data());
  ASSERT_EQ(sums.dy.size(), static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(sums.dy[c], dy[c], 1e-12 * (1 + std::fabs(dy[c]))) << "channel " << c;
    EXPECT_NEAR(sums.dy_xc[c], dy_xc[c], 1e-12 * (1 + std::fabs(dy_xc[c]))) << "channel " << c;
  }
}

TEST(FusedEpilogue, KernelNormalisationAsReadIsBitwiseNormaliseThenNeuron) {
  for (bool decay : {false, true})
    for (bool hard : {false, true})
      for (bool detach : {false, true})
        for (auto sur : {cpu::SurrogateFn::ATan, cpu::SurrogateFn::Sigmoid})
          for (double r : {0.0, 0.4}) {
            cpu::NeuronKernelConfig kc;
            kc.r = r;
            kc.decay_input = decay && r > 0;
            kc.hard_reset = hard;
            kc.v_reset = hard ? -0.2 : 0.0;
            kc.detach_reset = detach;
            kc.surrogate = sur;
            kc.alpha = sur == cpu::SurrogateFn::ATan ? 2.0 : 4.0;
            SCOPED_TRACE(std::string(decay ? "decay" : "nodecay") + (hard ? " hard" : " soft") + (detach ? " detach" : "") +
                         (sur == cpu::SurrogateFn::ATan ? " atan" : " sigmoid") + " r=" + std::to_string(r));
            // 2·5·13 = 130 neurons: blocks of 64 span channels; 3·7·144: most blocks inside
            // one channel (the uniform path), some across two.
            expect_kernel_fusion_exact<float>(kc, 3, 2, 5, 13, r > 0);
            expect_kernel_fusion_exact<double>(kc, 3, 2, 5, 13, r > 0);
            expect_kernel_fusion_exact<float>(kc, 4, 3, 7, 144, false);
          }
}

TEST(FusedEpilogue, KernelRefusesANormalisationThatDoesNotFit) {
  cpu::NeuronInputAffine a;
  a.channels = 3;
  a.inner = 5;
  a.center = a.scale = a.offset = {0, 1, 2};
  std::vector<float> x(2 * 16), v(16), s(2 * 16);
  const std::string e = error_of([&] { cpu::neuron_forward<float>({}, x.data(), 2, 16, v.data(), s.data(), &a); });
  EXPECT_NE(e.find("normalisation of 3 channels x 5 does not fit 16 neurons"), std::string::npos) << e;
}

// Max pooling of x read through the normalisation == max pooling of bn_normalize(x) (values
// and winners bitwise); the batch-norm sums from the pooled gradient == bn_backward_moments
// over the scattered gradient, within double rounding.
template <typename T, typename Idx = uint8_t>
void expect_pool_fusion_exact(int64_t outer, int64_t C, int64_t H, int64_t W, int k, int stride, int pad) {
  cpu::PoolGeom g;
  g.planes = outer * C, g.h = H, g.w = W, g.kernel = k, g.stride = stride, g.padding = pad;
  const int64_t n_in = g.planes * H * W, n_out = g.planes * g.out_h() * g.out_w();
  std::vector<T> x = random_values<T>(n_in, 12, -2.0, 3.0);
  for (int64_t i = 0; i < n_in; i += 5) x[i] = x[i / 2];  // ties inside windows (first maximum wins)
  const std::vector<T> dy = random_values<T>(n_out, 13, -1.0, 1.0);
  const std::vector<double> center = random_values<double>(C, 14, -0.5, 0.5), offset = random_values<double>(C, 16, -0.4, 1.2);
  std::vector<double> scale = random_values<double>(C, 15, 0.3, 2.5);
  scale[0] = -scale[0];  // a negative γ: the minimum of x wins, as unfused
  cpu::BnShape s;
  s.outer = outer, s.channels = C, s.inner = H * W;
  std::vector<T> normalized(n_in), y_ref(n_out), y_fused(n_out);
  std::vector<Idx> a_ref(n_out), a_fused(n_out);
  cpu::bn_normalize<T>(x.data(), s, center.data(), scale.data(), offset.data(), normalized.data());
  cpu::maxpool2d_forward<T, Idx>(normalized.data(), g, y_ref.data(), a_ref.data());
  cpu::maxpool2d_forward_normalized<T, Idx>(x.data(), g, C, center.data(), scale.data(), offset.data(),
                                            y_fused.data(), a_fused.data());
  expect_bitwise(y_ref, y_fused, "pooled values");
  EXPECT_EQ(a_ref, a_fused) << "winners";

  std::vector<T> dx(n_in);
  cpu::maxpool2d_backward<T, Idx>(dy.data(), a_ref.data(), g, dx.data());
  std::vector<double> want_dy(C), want_dy_xc(C), got_dy(C), got_dy_xc(C);
  cpu::bn_backward_moments<T>(dx.data(), x.data(), s, center.data(), want_dy.data(), want_dy_xc.data());
  cpu::maxpool2d_bn_grad_sums<T, Idx>(dy.data(), a_fused.data(), x.data(), g, C, center.data(), got_dy.data(),
                                      got_dy_xc.data());
  for (int64_t c = 0; c < C; ++c) {
    // f32: the scattered dx adds overlapping windows' dy in T before the moments see them
    const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12;
    EXPECT_NEAR(got_dy[c], want_dy[c], tol * (1 + std::fabs(want_dy[c]))) << "channel " << c;
    EXPECT_NEAR(got_dy_xc[c], want_dy_xc[c], tol * (1 + std::fabs(want_dy_xc[c]))) << "channel " << c;
  }
}

TEST(FusedEpilogue, MaxPoolNormalisationAsReadIsBitwiseNormaliseThenPool) {
  expect_pool_fusion_exact<float>(3, 5, 40, 37, 3, 2, 1);  // Spikformer's MaxPool2d(3, 2, 1): vector path
  expect_pool_fusion_exact<double>(2, 3, 11, 9, 3, 2, 1);
  expect_pool_fusion_exact<float>(2, 4, 10, 7, 2, 2, 0);   // the 2×2 fast path (odd width)
  expect_pool_fusion_exact<double>(2, 3, 9, 8, 3, 1, 1);   // overlapping stride-1 windows
  expect_pool_fusion_exact<float>(1, 2, 12, 12, 5, 3, 2);  // the general path
  expect_pool_fusion_exact<double, int32_t>(1, 2, 40, 38, 17, 5, 8);  // k·k > 256: i32 winners
}

struct UnitRun {
  std::vector<double> out, dx, grads, buffers;
  bool fused_row = false;
  int64_t sums_taken = 0;  // batch-norm backwards that took the next layer's sums
};

std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

// Conv(2→6) → BN → LIF → Conv(6→5) → BN → PLIF on [T 3, N 2, 2, 9, 7]: two forwards and
// backwards (the second continues from the updated running statistics), then one eval forward.
// pool: a max pooling after each batch norm (3/2/1, then 2/2/0), Spikformer's stem order.
UnitRun run_unit(DType dt, bool fuse, bool pool = false) {
  const bool before = fused_epilogues();
  set_fused_epilogues(fuse);
  Unit u("block");
  u.add(std::make_unique<Conv2d>(Conv2dConfig{2, 6, 3, 1, 1, true, WeightInit::TorchDefault}));
  BatchNormConfig b1;
  b1.num_features = 6;
  auto bn1 = std::make_unique<BatchNorm>(b1);
  const BatchNorm* bn_first = bn1.get();
  u.add(std::move(bn1));
  if (pool) u.add(std::make_unique<MaxPool2d>(PoolConfig{3, 2, 1}));  // 9×7 -> 5×4
  NeuronConfig lif;
  lif.tau = 2.0;
  lif.surrogate = SurrogateKind::ATan;
  lif.alpha = 2.0;
  lif.detach_reset = true;
  u.add(std::make_unique<Neuron>(lif));
  u.add(std::make_unique<Conv2d>(Conv2dConfig{6, 5, 3, 1, 1, false, WeightInit::TorchDefault}));
  BatchNormConfig b2;
  b2.num_features = 5;
  auto bn2 = std::make_unique<BatchNorm>(b2);
  const BatchNorm* bn_second = bn2.get();
  u.add(std::move(bn2));
  if (pool) u.add(std::make_unique<MaxPool2d>(PoolConfig{2, 2, 0}));  // 5×4 -> 2×2
  NeuronConfig plif;
  plif.kind = NeuronKind::PLIF;
  plif.decay_input = false;
  plif.v_threshold = 0.5;
  u.add(std::make_unique<Neuron>(plif));
  u.finalize(dt, Device::cpu(), 5);

  UnitRun r;
  layer_profile_reset();
  layer_profile_enable(true);
  for (int step = 0; step < 2; ++step) {
    Tensor x = test::random_tensor({3, 2, 2, 9, 7}, dt, 20 + step, -1.0, 2.0);
    Tensor dy = pool ? test::random_tensor({3, 2, 5, 2, 2}, dt, 30 + step, -1.0, 1.0)
                     : test::random_tensor({3, 2, 5, 9, 7}, dt, 30 + step, -1.0, 1.0);
    Ctx ctx;
    u.reset_state();
    u.zero_grad();
    Tensor y = u.forward(x, ctx);
    for (double v : values(y)) r.out.push_back(v);
    for (double v : values(u.backward_input(dy, ctx))) r.dx.push_back(v);
  }
  r.sums_taken = bn_first->fused_sums_taken() + bn_second->fused_sums_taken();
  for (double v : values(u.flat_grad())) r.grads.push_back(v);
  for (Buffer* b : u.buffers())
    for (double v : values(b->value)) r.buffers.push_back(v);
  Ctx eval;
  eval.training = false;
  u.reset_state();
  for (double v : values(u.forward(test::random_tensor({3, 2, 2, 9, 7}, dt, 40, -1.0, 2.0), eval))) r.out.push_back(v);
  const std::string fused_type = pool ? "batchnorm2d+maxpool2d" : "batchnorm2d+lif";
  for (const LayerTypeTiming& t : layer_profile_report()) r.fused_row = r.fused_row || t.type == fused_type;
  layer_profile_enable(false);
  layer_profile_reset();
  set_fused_epilogues(before);
  return r;
}


TEST(FusedEpilogue, UnitFusedEqualsUnfused) {
  for (bool pool : {false, true})
  for (DType dt : {DType::F64, DType::F32}) {
    SCOPED_TRACE(std::string(dtype_name(dt)) + (pool ? " with max pooling" : ""));
    const UnitRun plain = run_unit(dt, false, pool), fused = run_unit(dt, true, pool);
    EXPECT_FALSE(plain.fused_row) << "SPIKEMESH_FUSE off: nothing fused";
    EXPECT_TRUE(fused.fused_row) << "the batch norms and neurons did not run fused";
    EXPECT_EQ(plain.sums_taken, 0);
    EXPECT_EQ(fused.sums_taken, 4) << "each batch norm's two backwards take the next layer's sums";
    expect_bitwise(plain.out, fused.out, "outputs (two training forwards, one eval)");
    expect_bitwise(plain.buffers, fused.buffers, "running statistics");
    // Backward: the batch norm works from its input x instead of recovering x̂ from its
    // output (batchnorm.cpp): rounding-level differences only.
    const double tol = dt == DType::F64 ? 1e-12 : 2e-5;
    ASSERT_EQ(plain.dx.size(), fused.dx.size());
    EXPECT_LE(test::max_rel(fused.dx, plain.dx), tol) << "input gradients";
    ASSERT_EQ(plain.grads.size(), fused.grads.size());
    EXPECT_LE(test::max_rel(fused.grads, plain.grads), tol) << "parameter gradients";
  }
}

TEST(FusedEpilogue, EnvironmentValueIsChecked) {
  const char* old = std::getenv("SPIKEMESH_FUSE");
  const std::string saved = old ? old : "";
  setenv("SPIKEMESH_FUSE", "yes", 1);
  const bool before = fused_epilogues();
  const std::string e = error_of([] { apply_fused_epilogues_env(); });
  EXPECT_NE(e.find("SPIKEMESH_FUSE=yes: expected 1 (on, the default) or 0 (off)"), std::string::npos) << e;
  setenv("SPIKEMESH_FUSE", "1", 1);
  apply_fused_epilogues_env();
  EXPECT_TRUE(fused_epilogues());
  setenv("SPIKEMESH_FUSE", "0", 1);
  apply_fused_epilogues_env();
  EXPECT_FALSE(fused_epilogues());
  if (old) setenv("SPIKEMESH_FUSE", saved.c_str(), 1);
  else unsetenv("SPIKEMESH_FUSE");
  set_fused_epilogues(before);
}

}  // namespace
}  // namespace sm
