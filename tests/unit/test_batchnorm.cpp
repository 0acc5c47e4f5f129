// test_batchnorm.cpp — BatchNorm1d/2d against the naive reference (tests/ref/bn_ref),
// running statistics, eval mode, finite-difference gradients, thread-count invariance,
// the count-1 edge, synced BN over two simulated ranks (two threads + a fake Collectives)
// against BN of the whole batch, and the saved tensor: the output y normally (x̂ recovered
// from it) — equal to the saved-input path, which is kept for γ = 0 / large |β/γ| — and a
// Conv → BN → LIF block holding one full-size tensor between BN and the neuron.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../ref/bn_ref.h"
#include "gradient_check.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/neuron.h"

namespace sm {
namespace {

std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

void set_values(Tensor& t, const std::vector<double>& v) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) test::detail::set(t, i, v[i]);
}

std::unique_ptr<Unit> make_bn(int C, int spatial_dims, DType dt, double momentum = 0.1) {
  BatchNormConfig c;
  c.num_features = C;
  c.spatial_dims = spatial_dims;
  c.momentum = momentum;
  return test::wrap(std::make_unique<BatchNorm>(c), dt);
}

// Gives weight/bias non-trivial values so the affine part is tested.
void randomize_affine(Unit& u, uint64_t seed) {
  auto ps = u.params();
  const int64_t C = ps[0]->value.numel();
  set_values(ps[0]->value, vec(test::random_tensor({C}, DType::F64, seed, 0.5, 1.5)));
  set_values(ps[1]->value, vec(test::random_tensor({C}, DType::F64, seed + 1, -0.5, 0.5)));
}

void expect_near_vec(const std::vector<double>& got, const std::vector<double>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " at " << i;
}

struct Case {
  Shape shape;  // [T, N, C, ...]
  int spatial_dims;
};

int64_t inner_of(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 3; i < s.size(); ++i) n *= s[i];
  return n;
}

const Case kCases[] = {
    {{2, 3, 5, 3, 7}, 2},  // odd spatial, C not a multiple of 8
    {{1, 2, 1, 4, 5}, 2},  // C = 1
    {{3, 1, 4, 2, 2}, 2},  // batch 1
    {{2, 3, 6}, 1},        // BatchNorm1d on [T, N, C]
    {{2, 2, 3, 9}, 1},     // BatchNorm1d on [T, N, C, L]
};

TEST(BatchNorm, ForwardTrainMatchesReference) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-12 : 2e-5;
    for (const Case& k : kCases) {
      auto u = make_bn(static_cast<int>(k.shape[2]), k.spatial_dims, dt);
      randomize_affine(*u, 3);
      // A mean far from 0 exercises the shifted sums.
      Tensor x = test::random_tensor(k.shape, dt, 11, 3.0, 5.0);
      Ctx ctx;
      Tensor y = u->forward(x, ctx);
      EXPECT_EQ(y.shape(), x.shape());
      const int64_t B = k.shape[0] * k.shape[1], C = k.shape[2], S = inner_of(k.shape);
      auto ps = u->params();
      ref::BnRefForward r = ref::bn_forward_train_ref(vec(x), B, C, S, vec(ps[0]->value), vec(ps[1]->value), 1e-5);
      expect_near_vec(vec(y), r.y, tol, "y " + shape_str(k.shape));
    }
  }
}

TEST(BatchNorm, RunningStatsAfterThreeStepsMatchReference) {
  for (const Case& k : kCases) {
    const int64_t B = k.shape[0] * k.shape[1], C = k.shape[2], S = inner_of(k.shape);
    auto u = make_bn(static_cast<int>(C), k.spatial_dims, DType::F64, 0.3);
    std::vector<double> rm(C, 0.0), rv(C, 1.0);
    Ctx ctx;
    for (int step = 0; step < 3; ++step) {
      Tensor x = test::random_tensor(k.shape, DType::F64, 100 + step, -2.0 + step, 1.0 + 2 * step);
      u->forward(x, ctx);
      ref::BnRefForward r = ref::bn_forward_train_ref(vec(x), B, C, S, std::vector<double>(C, 1.0),
                                                      std::vector<double>(C, 0.0), 1e-5);
      ref::bn_update_running_ref(rm, rv, r.mean, r.var, B * S, 0.3);
    }
    auto bs = u->buffers();
    ASSERT_EQ(bs.size(), 3u);
    EXPECT_EQ(bs[0]->local_name, "running_mean");
    EXPECT_EQ(bs[1]->local_name, "running_var");
    EXPECT_EQ(bs[2]->local_name, "num_batches_tracked");
    expect_near_vec(vec(bs[0]->value), rm, 1e-12, "running_mean");
    expect_near_vec(vec(bs[1]->value), rv, 1e-12, "running_var");
    EXPECT_EQ(bs[2]->value.dtype(), DType::I64);
    EXPECT_EQ(bs[2]->value.item(), 3.0);
  }
}

TEST(BatchNorm, EvalUsesRunningStatsAndLeavesThemAlone) {
  for (DType dt : {DType::F64, DType::F32}) {
    const Shape shape{2, 3, 5, 3, 4};
    auto u = make_bn(5, 2, dt);
    randomize_affine(*u, 5);
    auto bs = u->buffers();
    const std::vector<double> rm = vec(test::random_tensor({5}, DType::F64, 21, -1, 1));
    const std::vector<double> rv = vec(test::random_tensor({5}, DType::F64, 22, 0.2, 2));
    set_values(bs[0]->value, rm);
    set_values(bs[1]->value, rv);
    Tensor x = test::random_tensor(shape, dt, 23, -2, 2);
    Ctx ctx;
    ctx.training = false;
    Tensor y = u->forward(x, ctx);
    auto ps = u->params();
    auto want = ref::bn_forward_eval_ref(vec(x), 6, 5, 12, vec(ps[0]->value), vec(ps[1]->value), vec(bs[0]->value),
                                         vec(bs[1]->value), 1e-5);
    expect_near_vec(vec(y), want, dt == DType::F64 ? 1e-12 : 1e-5, "eval y");
    expect_near_vec(vec(bs[0]->value), rm, dt == DType::F64 ? 0 : 1e-6, "running_mean unchanged");
    expect_near_vec(vec(bs[1]->value), rv, dt == DType::F64 ? 0 : 1e-6, "running_var unchanged");
    EXPECT_EQ(bs[2]->value.item(), 0.0);
  }
}

TEST(BatchNorm, BackwardMatchesReference) {
  for (DType dt : {DType::F64, DType::F32}) {
    const double tol = dt == DType::F64 ? 1e-10 : 1e-4;
    for (const Case& k : kCases) {
      const int64_t B = k.shape[0] * k.shape[1], C = k.shape[2], S = inner_of(k.shape);
      auto u = make_bn(static_cast<int>(C), k.spatial_dims, dt);
      randomize_affine(*u, 7);
      Tensor x = test::random_tensor(k.shape, dt, 31, -1.0, 3.0);
      Tensor dy = test::random_tensor(k.shape, dt, 32);
      Ctx ctx;
      u->forward(x, ctx);
      Tensor dx = u->backward_input(dy, ctx);
      auto ps = u->params();
      auto r = ref::bn_backward_train_ref(vec(x), vec(dy), B, C, S, vec(ps[0]->value), 1e-5);
      expect_near_vec(vec(dx), r.dx, tol, "dx " + shape_str(k.shape));
      expect_near_vec(vec(ps[0]->grad), r.dgamma, tol, "dgamma");
      expect_near_vec(vec(ps[1]->grad), r.dbeta, tol, "dbeta");
    }
  }
}

TEST(BatchNorm, GradientCheckTraining) {
  for (const Case& k : kCases) {
    auto u = make_bn(static_cast<int>(k.shape[2]), k.spatial_dims, DType::F64);
    randomize_affine(*u, 9);
    Tensor x = test::random_tensor(k.shape, DType::F64, 41, -1, 2);
    EXPECT_TRUE(test::check_layer_gradients(*u, x)) << shape_str(k.shape);
  }
}

TEST(BatchNorm, GradientCheckEval) {
  auto u = make_bn(3, 2, DType::F64);
  randomize_affine(*u, 10);
  set_values(u->buffers()[0]->value, {0.1, -0.2, 0.3});
  set_values(u->buffers()[1]->value, {0.5, 1.5, 2.0});
  test::GradCheckOptions o;
  o.training = false;
  EXPECT_TRUE(test::check_layer_gradients(*u, test::random_tensor({2, 2, 3, 3, 5}, DType::F64, 42), o));
}

TEST(BatchNorm, GradientsAccumulate) {
  auto u = make_bn(4, 1, DType::F64);
  Tensor x = test::random_tensor({3, 2, 4}, DType::F64, 43);
  Tensor dy = test::random_tensor({3, 2, 4}, DType::F64, 44);
  Ctx ctx;
  u->forward(x, ctx);
  u->backward_input(dy, ctx);
  const std::vector<double> once = vec(u->params()[0]->grad);
  u->forward(x, ctx);
  u->backward_input(dy, ctx);
  const std::vector<double> twice = vec(u->params()[0]->grad);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-12);
}

// Per-channel sums use a fixed chunk order: any thread count gives bit-identical results.
TEST(BatchNorm, ThreadCountDoesNotChangeResults) {
  const Shape shape{4, 8, 3, 33, 35};  // several reduction chunks per channel
  Tensor x = test::random_tensor(shape, DType::F32, 51, -1, 4);
  Tensor dy = test::random_tensor(shape, DType::F32, 52);
  std::vector<std::vector<double>> outs;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    auto u = make_bn(3, 2, DType::F32);
    Ctx ctx;
    Tensor y = u->forward(x, ctx);
    Tensor dx = u->backward_input(dy, ctx);
    std::vector<double> all = vec(y);
    for (double v : vec(dx)) all.push_back(v);
    for (double v : vec(u->params()[0]->grad)) all.push_back(v);
    for (double v : vec(u->buffers()[1]->value)) all.push_back(v);
    outs.push_back(all);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

// One value per channel: PyTorch refuses to train; we skip Bessel's correction instead of
// dividing by zero, so running_var = (1 - m)·1 + m·0 and the output is β.
TEST(BatchNorm, SingleValuePerChannelStaysFinite) {
  auto u = make_bn(3, 1, DType::F64);
  randomize_affine(*u, 12);
  Tensor x = test::random_tensor({1, 1, 3}, DType::F64, 61);
  Ctx ctx;
  Tensor y = u->forward(x, ctx);
  auto ps = u->params();
  auto bs = u->buffers();
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(y.at(c), ps[1]->value.at(c), 1e-12);
    EXPECT_NEAR(bs[0]->value.at(c), 0.1 * x.at(c), 1e-15);
    EXPECT_NEAR(bs[1]->value.at(c), 0.9, 1e-15);
  }
  Tensor dx = u->backward_input(test::random_tensor({1, 1, 3}, DType::F64, 62), ctx);
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isfinite(dx.at(c)));
}

TEST(BatchNorm, RejectsWrongInput) {
  BatchNormConfig c;
  c.num_features = 4;
  BatchNorm bn2(c);
  EXPECT_EQ(bn2.type(), "batchnorm2d");
  EXPECT_EQ(bn2.output_shape({4, 5, 6}), (Shape{4, 5, 6}));
  EXPECT_THROW(bn2.output_shape({3, 5, 6}), Error);
  EXPECT_THROW(bn2.output_shape({4, 5}), Error);
  c.spatial_dims = 1;
  BatchNorm bn1(c);
  EXPECT_EQ(bn1.type(), "batchnorm1d");
  EXPECT_EQ(bn1.output_shape({4}), (Shape{4}));
  EXPECT_EQ(bn1.output_shape({4, 7}), (Shape{4, 7}));
  EXPECT_THROW(bn1.output_shape({4, 5, 6}), Error);
  c.num_features = 0;
  try {
    BatchNorm bad(c);
    FAIL() << "num_features 0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
  }
}

TEST(BatchNorm, ParamsAndBuffersFollowPyTorchNames) {
  auto u = make_bn(6, 2, DType::F32);
  auto ps = u->params();
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0]->local_name, "weight");
  EXPECT_EQ(ps[1]->local_name, "bias");
  for (int c = 0; c < 6; ++c) {
    EXPECT_EQ(ps[0]->value.at(c), 1.0);
    EXPECT_EQ(ps[1]->value.at(c), 0.0);
    EXPECT_EQ(u->buffers()[0]->value.at(c), 0.0);
    EXPECT_EQ(u->buffers()[1]->value.at(c), 1.0);
  }
  EXPECT_TRUE(u->buffers()[2]->shape.empty());
}

// ---- synced BN over two simulated ranks ------------------------------------------------

// Two threads standing in for two ranks: all_reduce_sum adds both ranks' tensors.
class TwoRankGroup {
 public:
  void all_reduce_sum(int rank, Tensor& t) {
    bufs_[rank] = &t;
    barrier();
    Tensor sum = Tensor::empty(t.shape(), t.dtype());
    for (int64_t i = 0; i < t.numel(); ++i) sum.data<double>()[i] = bufs_[0]->at(i) + bufs_[1]->at(i);
    barrier();  // both ranks have read both inputs
    t.copy_from(sum);
    ++calls_[rank];
  }
  int calls(int rank) const { return calls_[rank]; }

 private:
  void barrier() {
    std::unique_lock<std::mutex> lk(m_);
    const int gen = generation_;
    if (++waiting_ == 2) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return generation_ != gen; });
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  int waiting_ = 0, generation_ = 0;
  Tensor* bufs_[2] = {nullptr, nullptr};
  int calls_[2] = {0, 0};
};

class FakeRank : public Collectives {
 public:
  FakeRank(TwoRankGroup& g, int rank) : g_(g), rank_(rank) {}
  int size() const override { return 2; }
  int rank() const override { return rank_; }
  void all_reduce_sum(Tensor& t) override { g_.all_reduce_sum(rank_, t); }
  // The rest of layers/collectives.h, through the group's all-reduce (f64 tensors).
  void all_gather(const Tensor& in, Tensor& out) override {  // in [n] -> out [2n]
    const int64_t n = in.numel();
    out.zero();
    out.slice0(rank_ * n, (rank_ + 1) * n).copy_from(in);
    all_reduce_sum(out);
  }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {  // in [2n] -> out [n]
    Tensor sum = in.clone();
    all_reduce_sum(sum);
    const int64_t n = out.numel();
    out.copy_from(sum.slice0(rank_ * n, (rank_ + 1) * n));
  }
  void broadcast(Tensor& t, int root) override {
    if (rank_ != root) t.zero();
    all_reduce_sum(t);
  }

 private:
  TwoRankGroup& g_;
  int rank_;
};

// Samples [n0, n1) of a [T, N, ...] tensor.
Tensor batch_slice(const Tensor& x, int64_t n0, int64_t n1) {
  Shape s = x.shape();
  const int64_t per = x.numel() / (s[0] * s[1]);
  const int64_t N = s[1];
  s[1] = n1 - n0;
  Tensor out = Tensor::empty(s, x.dtype());
  for (int64_t t = 0; t < s[0]; ++t)
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t i = 0; i < per; ++i)
        test::detail::set(out, (t * s[1] + (n - n0)) * per + i, x.at((t * N + n) * per + i));
  return out;
}

TEST(BatchNorm, SyncedOverTwoRanksEqualsWholeBatch) {
  for (int split_wgrad = 0; split_wgrad < 2; ++split_wgrad) {
    const Shape shape{3, 4, 5, 3, 3};  // N = 4 -> two ranks of 2 (unequal halves below)
    Tensor x = test::random_tensor(shape, DType::F64, 71, 1, 4);
    Tensor dy = test::random_tensor(shape, DType::F64, 72);
    auto whole = make_bn(5, 2, DType::F64);
    randomize_affine(*whole, 13);
    Ctx ctx;
    Tensor y_full = whole->forward(x, ctx);
    Tensor dx_full = whole->backward_input(dy, ctx);

    const int64_t cut[3] = {0, 1, 4};  // rank 0 gets 1 sample, rank 1 gets 3
    TwoRankGroup group;
    std::unique_ptr<Unit> units[2];
    Tensor y[2], dx[2];
    auto run_rank = [&](int r) {
      FakeRank coll(group, r);
      Ctx c;
      c.bn_sync = &coll;
      c.split_wgrad = split_wgrad != 0;
      y[r] = units[r]->forward(batch_slice(x, cut[r], cut[r + 1]), c);
      dx[r] = units[r]->backward_input(batch_slice(dy, cut[r], cut[r + 1]), c);
      if (c.split_wgrad) units[r]->backward_weight(c);
    };
    for (int r = 0; r < 2; ++r) {
      units[r] = make_bn(5, 2, DType::F64);
      randomize_affine(*units[r], 13);
    }
    std::thread t1(run_rank, 1);
    run_rank(0);
    t1.join();
    EXPECT_EQ(group.calls(0), 2);  // one all-reduce in forward, one in backward
    EXPECT_EQ(group.calls(1), 2);

    for (int r = 0; r < 2; ++r) {
      expect_near_vec(vec(y[r]), vec(batch_slice(y_full, cut[r], cut[r + 1])), 1e-12, "synced y");
      expect_near_vec(vec(dx[r]), vec(batch_slice(dx_full, cut[r], cut[r + 1])), 1e-11, "synced dx");
      for (int b = 0; b < 2; ++b)
        expect_near_vec(vec(units[r]->buffers()[b]->value), vec(whole->buffers()[b]->value), 1e-12,
                        "synced running stat");
    }
    // Parameter gradients stay local: the two ranks' grads sum to the whole batch's.
    for (int p = 0; p < 2; ++p) {
      std::vector<double> sum = vec(units[0]->params()[p]->grad);
      const std::vector<double> g1 = vec(units[1]->params()[p]->grad);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g1[i];
      expect_near_vec(sum, vec(whole->params()[p]->grad), 1e-11, "synced param grad");
    }
  }
}


// ---- the saved tensor: output y (x̂ recovered) or input x (fallback) ----------------------

size_t rounded(const Tensor& t) { return CpuCachingAllocator::round_size(t.nbytes()); }

struct BnRun {
  std::vector<double> y, dx, dgamma, dbeta;
  bool kept_output = false;  // the slot kept y (else x: nothing beyond the caller's x)
};

// Forward (training) + backward of a fresh BN with the given γ, β on x = random(seed) in
// [2, 6) (a mean far from 0) and dy = random(seed + 1).
BnRun run_bn(const Shape& shape, const std::vector<double>& gamma, const std::vector<double>& beta,
             DType dt, bool split_wgrad, uint64_t seed = 81) {
  auto u = make_bn(static_cast<int>(shape[2]), shape.size() == 5 ? 2 : 1, dt);
  set_values(u->params()[0]->value, gamma);
  set_values(u->params()[1]->value, beta);
  Tensor x = test::random_tensor(shape, dt, seed, 2.0, 6.0);
  Tensor dy = test::random_tensor(shape, dt, seed + 1);
  Allocator& a = cpu_allocator();
  BnRun r;
  Ctx ctx;
  ctx.split_wgrad = split_wgrad;
  const size_t before = a.current_bytes();
  {
    Tensor y = u->forward(x, ctx);
    r.y = vec(y);
  }
  // The caller still holds x and dropped y: the slot holds y's bytes iff it kept y.
  const size_t kept = a.current_bytes() - before;
  EXPECT_TRUE(kept == 0 || kept == rounded(x)) << kept << " bytes kept";
  r.kept_output = kept == rounded(x);
  x = Tensor();  // no longer needed by anyone: backward must not depend on it
  Tensor dx = u->backward_input(dy, ctx);
  if (split_wgrad) u->backward_weight(ctx);
  r.dx = vec(dx);
  r.dgamma = vec(u->params()[0]->grad);
  r.dbeta = vec(u->params()[1]->grad);
  return r;
}

// Values of channel c of a [T, N, C, ...] tensor.
std::vector<double> channel(const std::vector<double>& v, const Shape& shape, int64_t c) {
  const int64_t C = shape[2], inner = inner_of(shape), outer = shape[0] * shape[1];
  std::vector<double> out;
  for (int64_t b = 0; b < outer; ++b)
    for (int64_t i = 0; i < inner; ++i) out.push_back(v[(b * C + c) * inner + i]);
  return out;
}

// Channels are independent: the same channel under the saved-output path (all channels
// recoverable) and under the saved-input path (another channel has γ = 0) must agree to
// rounding, gradients included, fused and split; a negative γ and |β/γ| just under the
// limit 8 are exercised. Both also match the reference (computed from x).
TEST(BatchNorm, SavedOutputPathEqualsSavedInputPath) {
  for (bool split : {false, true}) {
    for (const Case& k : kCases) {
      const int64_t C = k.shape[2];
      if (C < 2) continue;
      std::vector<double> gamma = vec(test::random_tensor({C}, DType::F64, 91, 0.5, 1.5));
      std::vector<double> beta = vec(test::random_tensor({C}, DType::F64, 92, -0.5, 0.5));
      gamma[0] = -0.3;      // negative γ
      beta[0] = 0.3 * 7.9;  // |β/γ| just under the limit
      std::vector<double> gamma_fallback = gamma;
      gamma_fallback[C - 1] = 0.0;
      const BnRun out = run_bn(k.shape, gamma, beta, DType::F64, split);
      const BnRun in = run_bn(k.shape, gamma_fallback, beta, DType::F64, split);
      const std::string what = shape_str(k.shape) + (split ? " split" : " fused");
      EXPECT_TRUE(out.kept_output) << what;
      EXPECT_FALSE(in.kept_output) << what;
      for (int64_t c = 0; c + 1 < C; ++c) {
        expect_near_vec(channel(out.y, k.shape, c), channel(in.y, k.shape, c), 0, "y " + what);
        expect_near_vec(channel(out.dx, k.shape, c), channel(in.dx, k.shape, c), 1e-12, "dx " + what);
        EXPECT_NEAR(out.dgamma[c], in.dgamma[c], 1e-12 * (1 + std::fabs(in.dgamma[c]))) << what;
        EXPECT_EQ(out.dbeta[c], in.dbeta[c]) << what;
      }
      Tensor x = test::random_tensor(k.shape, DType::F64, 81, 2.0, 6.0);
      Tensor dy = test::random_tensor(k.shape, DType::F64, 82);
      const int64_t B = k.shape[0] * k.shape[1], S = inner_of(k.shape);
      auto ref_out = ref::bn_backward_train_ref(vec(x), vec(dy), B, C, S, gamma, 1e-5);
      auto ref_in = ref::bn_backward_train_ref(vec(x), vec(dy), B, C, S, gamma_fallback, 1e-5);
      expect_near_vec(out.dx, ref_out.dx, 1e-10, "dx vs ref " + what);
      expect_near_vec(out.dgamma, ref_out.dgamma, 1e-10, "dgamma vs ref " + what);
      expect_near_vec(in.dx, ref_in.dx, 1e-10, "fallback dx vs ref " + what);
      expect_near_vec(in.dgamma, ref_in.dgamma, 1e-10, "fallback dgamma vs ref " + what);
    }
  }
}

// The slot keeps y only when every channel's x̂ is recoverable from it; otherwise x.
// Gradients are right either way: γ = 0 leaves y = β with no trace of x, yet
// dγ = Σ dy·x̂ is not zero — only the saved input can give it.
TEST(BatchNorm, FallsBackToSavedInputWhenGammaCannotRecoverIt) {
  const Shape shape{2, 3, 4, 5, 3};
  const int64_t C = 4, B = 6, S = 15;
  const std::vector<double> beta{0.2, -0.4, 0.1, 0.3};
  struct Variant {
    std::vector<double> gamma;
    bool keeps_output;
    const char* what;
  };
  const Variant variants[] = {
      {{1.0, 0.7, -1.2, 0.05}, true, "|β/γ| = 6"},
      {{1.0, 0.7, -1.2, -0.0375}, true, "|β/γ| = 8 (the limit)"},
      {{1.0, 0.7, -1.2, 0.0}, false, "γ = 0"},
      {{1.0, 0.7, -1.2, 0.03}, false, "|β/γ| = 10"},
      {{1.0, 1e-30, -1.2, 1.0}, false, "|γ| ≈ 0"},
      {{1.0, 0.7, NAN, 1.0}, false, "γ NaN"},
  };
  for (const Variant& v : variants) {
    for (DType dt : {DType::F64, DType::F32}) {
      SCOPED_TRACE(std::string(v.what) + " " + dtype_name(dt));
      const BnRun r = run_bn(shape, v.gamma, beta, dt, false);
      EXPECT_EQ(r.kept_output, v.keeps_output);
      if (std::isnan(v.gamma[2])) continue;  // only the choice is checked
      std::vector<double> g = v.gamma;
      if (dt == DType::F32)
        for (double& e : g) e = static_cast<float>(e);
      auto ref_b = ref::bn_backward_train_ref(vec(test::random_tensor(shape, dt, 81, 2.0, 6.0)),
                                              vec(test::random_tensor(shape, dt, 82)), B, C, S, g, 1e-5);
      const double tol = dt == DType::F64 ? 1e-10 : 1e-4;
      expect_near_vec(r.dgamma, ref_b.dgamma, tol, "dgamma");
      expect_near_vec(r.dbeta, ref_b.dbeta, tol, "dbeta");
      expect_near_vec(r.dx, ref_b.dx, tol, "dx");
    }
  }
}

// A Conv → BN → LIF block: BN keeps its output, which IS the neuron's input (the neuron
// keeps a reference too, no copy), so the conv output is freed right after BN's forward and
// the block holds one full-size tensor until BN's backward, not two.
TEST(BatchNorm, ConvBnLifBlockHoldsOneFullSizeTensor) {
  Unit unit("block");
  auto conv_p = std::make_unique<Conv2d>(Conv2dConfig{3, 8, 3, 1, 1, false, WeightInit::TorchDefault});
  BatchNormConfig bc;
  bc.num_features = 8;
  auto bn_p = std::make_unique<BatchNorm>(bc);
  auto lif_p = std::make_unique<Neuron>(NeuronConfig{});
  Layer& conv = *conv_p;
  Layer& bn = *bn_p;
  Layer& lif = *lif_p;
  unit.add(std::move(conv_p));
  unit.add(std::move(bn_p));
  unit.add(std::move(lif_p));
  unit.finalize(DType::F32, Device::cpu(), 3);

  const Shape in_shape{4, 2, 3, 12, 10}, out_shape{4, 2, 8, 12, 10};
  Tensor x = test::random_tensor(in_shape, DType::F32, 101, 0.0, 1.0);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = x.data<float>()[i] < 0.4f ? 1.0f : 0.0f;
  x.set_binary(true);  // spikes: the conv keeps bits
  Tensor dy = test::random_tensor(out_shape, DType::F32, 102);
  const size_t full = CpuCachingAllocator::round_size(Tensor::empty(out_shape, DType::F32).nbytes());
  Allocator& a = cpu_allocator();
  Ctx ctx;
  for (int warm = 0; warm < 2; ++warm) {  // primitive caches, neuron state
    unit.reset_state();
    unit.forward(x, ctx);
    unit.backward_input(dy, ctx);
  }

  // Layer by layer.
  unit.reset_state();
  const size_t before = a.current_bytes();
  Tensor c = conv.forward(x, ctx);  // [T, N, 8, 12, 10]
  ASSERT_EQ(c.shape(), out_shape);
  const size_t conv_kept = a.current_bytes() - before - full;  // what the conv saved
  Tensor b = bn.forward(c, ctx);
  c = Tensor();
  EXPECT_EQ(a.current_bytes() - before, conv_kept + full) << "BN released the conv output";
  Tensor s = lif.forward(b, ctx);
  EXPECT_TRUE(s.is_binary());
  b = Tensor();
  s = Tensor();
  EXPECT_EQ(a.current_bytes() - before, conv_kept + full)
      << "BN and the neuron share BN's output; the neuron keeps no copy";
  {
    Tensor g = lif.backward_input(dy, ctx);
    EXPECT_EQ(a.current_bytes() - before, conv_kept + 2 * full) << "only g was added";
    g = bn.backward_input(g, ctx);
    EXPECT_EQ(a.current_bytes() - before, conv_kept + full) << "BN's backward released its output";
    conv.backward_input(g, ctx);
  }
  EXPECT_EQ(a.current_bytes(), before);

  // The same through the unit (its loop owns the gradient the neuron makes, so batch norm
  // writes its input gradient over it): the input gradient is bitwise the layer-by-layer one.
  unit.reset_state();
  { Tensor y = unit.forward(x, ctx); }
  EXPECT_EQ(a.current_bytes() - before, conv_kept + full);
  const Tensor dx_unit = unit.backward_input(dy, ctx);
  unit.reset_state();
  { Tensor y = unit.forward(x, ctx); }
  Tensor g = lif.backward_input(dy, ctx);  // a caller's own ctx: nothing written over
  g = bn.backward_input(g, ctx);
  const Tensor dx_layers = conv.backward_input(g, ctx);
  ASSERT_EQ(dx_layers.numel(), dx_unit.numel());
  for (int64_t i = 0; i < dx_unit.numel(); ++i)
    ASSERT_EQ(dx_unit.data<float>()[i], dx_layers.data<float>()[i]) << "element " << i;
}

// A backward that writes over its incoming gradient does so only for a composite's own
// temporary: a caller's dy stays as it was.
TEST(BatchNorm, BackwardLeavesTheCallersGradientAlone) {
  BatchNormConfig bc;
  bc.num_features = 3;
  Unit unit("u");
  auto bn_p = std::make_unique<BatchNorm>(bc);
  Layer& bn = *bn_p;
  unit.add(std::move(bn_p));
  unit.finalize(DType::F32, Device::cpu(), 3);
  const Tensor x = test::random_tensor({2, 2, 3, 4, 4}, DType::F32, 7);
  Tensor dy = test::random_tensor({2, 2, 3, 4, 4}, DType::F32, 8);
  const Tensor before = dy.clone();
  Ctx ctx;
  for (bool owned : {false, true}) {
    bn.forward(x, ctx);
    ctx.dy_owned = owned;
    const Tensor dx = bn.backward_input(dy, ctx);  // `dy` is the only handle (`before` is a copy)
    ctx.dy_owned = false;
    if (owned) {
      EXPECT_EQ(dx.raw(), dy.raw()) << "an owned gradient with one handle is written over";
      break;
    }
    EXPECT_NE(dx.raw(), dy.raw());
    for (int64_t i = 0; i < dy.numel(); ++i) ASSERT_EQ(dy.data<float>()[i], before.data<float>()[i]);
  }
}

}  // namespace
}  // namespace sm
