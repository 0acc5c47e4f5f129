// test_linear.cpp — the own GEMM and the oneDNN matmul (all operand transposes, accumulate,
// odd and multi-block sizes) and the Linear kernels against the naive double reference
// (tests/ref/linear_ref); GEMM determinism across thread counts; the Linear layer:
// finite-difference gradients in f64 (fused and split B/W), f32 against the reference,
// spike inputs saved as bits, the unused input gradient of the model's first layer, parameter
// shapes and input errors. Last, the tensor-parallel
// modes shared by Linear, Conv1d and Conv2d (colwise / rowwise over two simulated ranks:
// two threads and a fake Collectives) against the unsharded layer.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include <array>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../ref/linear_ref.h"
#include "gradient_check.h"
#include "spikemesh/kernels/cpu/gemm.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/linear.h"
#include "spikemesh/layers/tensor_parallel.h"

namespace sm {
namespace {

std::vector<double> random_vec(int64_t n, uint64_t seed) {
  CounterRng rng(seed, "test_linear");
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = 2.0 * rng.uniform(i) - 1.0;
  return v;
}

std::vector<double> vec(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.at(i);
  return v;
}

Tensor tensor_of(const std::vector<double>& v, const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) test::detail::set(t, i, v[i]);
  return t;
}

template <typename T>
::testing::AssertionResult close(const std::vector<T>& got, const std::vector<double>& want, double rtol,
                                 const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " vs " << want.size();
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += want[i] * want[i];
  }
  if (std::sqrt(err) <= rtol * std::sqrt(norm) + 1e-300) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << std::sqrt(err / norm) << " > " << rtol;
}

// C = A·B (+ C0) with A and/or B stored transposed, through `fn` (gemm or matmul).
template <typename T, class Fn>
void check_product(Fn fn, int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool accumulate, double rtol) {
  const auto a = random_vec(M * K, 1 + M), b = random_vec(K * N, 2 + N), c0 = random_vec(M * N, 3 + K);
  // Stored buffers: A as [M, K] or transposed [K, M]; B as [K, N] or [N, K].
  std::vector<T> as(M * K), bs(K * N), c(c0.begin(), c0.end());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) as[ta ? k * M + i : i * K + k] = static_cast<T>(a[i * K + k]);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) bs[tb ? j * K + k : k * N + j] = static_cast<T>(b[k * N + j]);
  const int64_t a_rs = ta ? 1 : K, a_cs = ta ? M : 1, b_rs = tb ? 1 : N, b_cs = tb ? K : 1;
  fn(M, N, K, as.data(), a_rs, a_cs, bs.data(), b_rs, b_cs, c.data(), N, accumulate);
  // The reference sees the values actually stored (rounded to T).
  std::vector<double> ar(M * K), br(K * N);
  for (int64_t i = 0; i < M * K; ++i) ar[i] = static_cast<T>(a[i]);
  for (int64_t i = 0; i < K * N; ++i) br[i] = static_cast<T>(b[i]);
  auto want = ref::matmul(M, N, K, ar, br);
  if (accumulate)
    for (int64_t i = 0; i < M * N; ++i) want[i] += static_cast<T>(c0[i]);
  EXPECT_TRUE(close(c, want, rtol,
                    "M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K) + (ta ? " Aᵀ" : "") +
                        (tb ? " Bᵀ" : "") + (accumulate ? " +=" : "")));
}

struct Mnk { int64_t m, n, k; };
const std::vector<Mnk> kSizes = {{1, 1, 1},    {5, 3, 7},     {13, 29, 300}, {97, 17, 5},
                                 {100, 2100, 9}, {6, 16, 256}, {130, 70, 513}};

TEST(GemmKernel, OwnFloatAndDoubleMatchReference) {
  for (const auto& s : kSizes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          check_product<double>(cpu::gemm<double>, s.m, s.n, s.k, ta, tb, acc, 1e-13);
          check_product<float>(cpu::gemm<float>, s.m, s.n, s.k, ta, tb, acc, 1e-5);
        }
}

TEST(GemmKernel, MatmulFloatDnnlAndDoubleMatchReference) {
  for (const auto& s : kSizes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          check_product<float>(cpu::matmul<float>, s.m, s.n, s.k, ta, tb, acc, 1e-5);
          check_product<double>(cpu::matmul<double>, s.m, s.n, s.k, ta, tb, acc, 1e-13);
        }
}

TEST(GemmKernel, EmptyReductionZeroesOrKeeps) {
  std::vector<double> c(6, 4.0);
  cpu::gemm<double>(2, 3, 0, nullptr, 0, 1, nullptr, 3, 1, c.data(), 3, true);
  for (double v : c) EXPECT_EQ(v, 4.0);
  cpu::gemm<double>(2, 3, 0, nullptr, 0, 1, nullptr, 3, 1, c.data(), 3, false);
  for (double v : c) EXPECT_EQ(v, 0.0);
}

TEST(GemmKernel, DoubleIsBitwiseIndependentOfThreads) {
  const int64_t M = 150, N = 300, K = 700;
  const auto a = random_vec(M * K, 5), b = random_vec(K * N, 6);
  std::vector<std::vector<double>> out;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<double> c(M * N, 0.5);
    cpu::gemm<double>(M, N, K, a.data(), K, 1, b.data(), N, 1, c.data(), N, true);
    out.push_back(c);
  }
  omp_set_num_threads(saved);
  for (size_t r = 1; r < out.size(); ++r)
    for (size_t i = 0; i < out[0].size(); ++i) ASSERT_EQ(out[0][i], out[r][i]) << i;
}

// A packed once (through packed_a_index, as the Winograd filter transforms write it) gives
// bitwise gemm's product: shapes with a partial sliver of rows and two reduction blocks.
TEST(GemmKernel, PackedLeftOperandIsBitwiseGemm) {
  for (const auto& [M, N, K] : std::vector<std::array<int64_t, 3>>{{37, 50, 300}, {5, 7, 3}, {64, 129, 256}}) {
    const auto a = random_vec(M * K, 7), b = random_vec(K * N, 8), c0 = random_vec(M * N, 9);
    std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
    std::vector<float> packed(cpu::packed_a_size(M, K), 0.0f);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t k = 0; k < K; ++k) packed[cpu::packed_a_index(M, K, r, k)] = af[r * K + k];
    for (bool acc : {false, true}) {
      std::vector<float> want(c0.begin(), c0.end()), got(c0.begin(), c0.end());
      cpu::gemm<float>(M, N, K, af.data(), K, 1, bf.data(), N, 1, want.data(), N, acc);
      cpu::gemm_packed_a(M, N, K, packed.data(), bf.data(), N, 1, got.data(), N, acc);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(want[i], got[i]) << M << "x" << N << "x" << K << " at " << i;
    }
  }
}

template <typename T>
void check_linear_kernels(int64_t M, int64_t fin, int64_t fout, double rtol) {
  const auto x = random_vec(M * fin, 11), w = random_vec(fout * fin, 12), b = random_vec(fout, 13),
             dy = random_vec(M * fout, 14), dw0 = random_vec(fout * fin, 15), db0 = random_vec(fout, 16);
  std::vector<T> xt(x.begin(), x.end()), wt(w.begin(), w.end()), bt(b.begin(), b.end()), dyt(dy.begin(), dy.end());
  std::vector<T> y(M * fout, T(9)), dx(M * fin, T(9)), dw(dw0.begin(), dw0.end()), db(db0.begin(), db0.end());
  cpu::linear_forward<T>(M, fin, fout, xt.data(), wt.data(), bt.data(), y.data());
  EXPECT_TRUE(close(y, ref::linear_forward(M, fin, fout, x, w, b), rtol, "linear forward"));
  cpu::linear_forward<T>(M, fin, fout, xt.data(), wt.data(), nullptr, y.data());
  EXPECT_TRUE(close(y, ref::linear_forward(M, fin, fout, x, w, {}), rtol, "linear forward (no bias)"));
  cpu::linear_backward_data<T>(M, fin, fout, dyt.data(), wt.data(), dx.data());
  EXPECT_TRUE(close(dx, ref::linear_backward_data(M, fin, fout, dy, w), rtol, "linear dx"));
  cpu::linear_backward_weights<T>(M, fin, fout, xt.data(), dyt.data(), dw.data(), db.data());
  auto want_dw = ref::linear_backward_weights(M, fin, fout, x, dy);
  auto want_db = ref::linear_backward_bias(M, fout, dy);
  for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += static_cast<T>(dw0[i]);
  for (size_t i = 0; i < want_db.size(); ++i) want_db[i] += static_cast<T>(db0[i]);
  EXPECT_TRUE(close(dw, want_dw, rtol, "linear dW (accumulated)"));
  EXPECT_TRUE(close(db, want_db, rtol, "linear db (accumulated)"));
}

TEST(LinearKernel, MatchesReference) {
  for (const auto& s : std::vector<Mnk>{{1, 1, 1}, {7, 5, 3}, {40, 4608 / 16, 10}, {33, 70, 129}, {300, 31, 65}}) {
    check_linear_kernels<float>(s.m, s.n, s.k, 1e-5);
    check_linear_kernels<double>(s.m, s.n, s.k, 1e-13);
  }
}

// ---- Linear layer ------------------------------------------------------------------------

std::unique_ptr<Unit> linear_unit(const LinearConfig& c, DType dt = DType::F64) {
  return test::wrap(std::make_unique<Linear>(c), dt);
}

TEST(LinearLayer, ParamShapesInitAndInputErrors) {
  LinearConfig c{12, 5, true, WeightInit::Normal001};
  auto u = linear_unit(c);
  auto ps = u->params();
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0]->local_name, "weight");
  EXPECT_EQ(ps[0]->shape, (Shape{5, 12}));
  EXPECT_EQ(ps[1]->shape, (Shape{5}));
  Linear lin(c);
  EXPECT_EQ(lin.output_shape({12}), (Shape{5}));
  EXPECT_EQ(lin.output_shape({3, 12}), (Shape{3, 5}));
  try {
    lin.output_shape({11});
    FAIL() << "expected an input error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("linear expects 12 input features, got 11"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lin.output_shape({}), Error);
}

TEST(LinearLayer, GradientCheckF64) {
  auto u = linear_unit({7, 4, true, WeightInit::TorchDefault});
  EXPECT_TRUE(test::check_layer_gradients(*u, test::random_tensor({2, 3, 7}, DType::F64, 71)));
  auto tokens = linear_unit({5, 3, false, WeightInit::TorchDefault});  // [T, N, L, F] input
  EXPECT_TRUE(test::check_layer_gradients(*tokens, test::random_tensor({2, 1, 4, 5}, DType::F64, 72)));
}

TEST(LinearLayer, MatchesReferenceF32AndF64) {
  for (DType dt : {DType::F32, DType::F64}) {
    auto u = linear_unit({37, 10, true, WeightInit::TorchDefault}, dt);
    const Shape xs{4, 3, 37};
    const int64_t M = 12;
    const auto xv = random_vec(shape_numel(xs), 81);
    auto ps = u->params();
    const auto w = vec(ps[0]->value), b = vec(ps[1]->value);
    Ctx ctx;
    Tensor y = u->forward(tensor_of(xv, xs, dt), ctx);
    EXPECT_EQ(y.shape(), (Shape{4, 3, 10}));
    const double tol = dt == DType::F32 ? 1e-5 : 1e-12;
    EXPECT_TRUE(close(vec(y), ref::linear_forward(M, 37, 10, xv, w, b), tol, "forward"));
    const auto dyv = random_vec(y.numel(), 82);
    u->zero_grad();
    Tensor dx = u->backward_input(tensor_of(dyv, y.shape(), dt), ctx);
    EXPECT_EQ(dx.shape(), xs);
    EXPECT_TRUE(close(vec(dx), ref::linear_backward_data(M, 37, 10, dyv, w), tol, "dx"));
    EXPECT_TRUE(close(vec(ps[0]->grad), ref::linear_backward_weights(M, 37, 10, xv, dyv), tol, "dW"));
    EXPECT_TRUE(close(vec(ps[1]->grad), ref::linear_backward_bias(M, 10, dyv), tol, "db"));
  }
}

TEST(LinearLayer, SpikeInputSavedAsBitsGivesSameWeightGrad) {
  for (DType dt : {DType::F32, DType::F64}) {
    auto packed = linear_unit({21, 6, true, WeightInit::TorchDefault}, dt);
    auto plain = linear_unit({21, 6, true, WeightInit::TorchDefault}, dt);
    Tensor spikes = Tensor::empty({3, 2, 21}, dt);
    CounterRng rng(91, "spikes");
    for (int64_t i = 0; i < spikes.numel(); ++i) test::detail::set(spikes, i, rng.uniform(i) < 0.4 ? 1.0 : 0.0);
    Tensor flagged = spikes.clone();
    flagged.set_binary(true);
    Ctx ctx;
    Tensor y1 = packed->forward(flagged, ctx);
    Tensor y2 = plain->forward(spikes, ctx);
    EXPECT_EQ(vec(y1), vec(y2));
    flagged.fill(0.0);  // the packed layer keeps its own bits, not a reference
    Tensor dy = test::random_tensor(y1.shape(), dt, 92);
    packed->zero_grad();
    plain->zero_grad();
    ctx.split_wgrad = true;
    packed->backward_input(dy, ctx);
    packed->backward_weight(ctx);
    ctx.split_wgrad = false;
    plain->backward_input(dy, ctx);
    EXPECT_EQ(vec(packed->flat_grad()), vec(plain->flat_grad()));
  }
}

// The layer reading the model's input (ctx.input_grad_unused): no data gradient, the same
// weight gradient bit for bit, fused and with the B/W split.
TEST(LinearLayer, UnusedInputGradientIsNotMadeAndWeightsAreUnchanged) {
  for (bool split : {false, true}) {
    auto skip = linear_unit({13, 5, true, WeightInit::TorchDefault}, DType::F64);
    auto full = linear_unit({13, 5, true, WeightInit::TorchDefault}, DType::F64);
    const Tensor x = test::random_tensor({2, 3, 13}, DType::F64, 93);
    Ctx ctx;
    Tensor y = skip->forward(x, ctx);
    full->forward(x, ctx);
    const Tensor dy = test::random_tensor(y.shape(), DType::F64, 94);
    skip->zero_grad();
    full->zero_grad();
    ctx.split_wgrad = split;
    Tensor dx_full = full->backward_input(dy, ctx);
    ctx.input_grad_unused = true;
    Tensor dx_skip = skip->backward_input(dy, ctx);
    ctx.input_grad_unused = false;
    if (split) {
      skip->backward_weight(ctx);
      full->backward_weight(ctx);
    }
    EXPECT_TRUE(dx_full.defined());
    EXPECT_FALSE(dx_skip.defined()) << "the unused input gradient was made (split " << split << ")";
    EXPECT_EQ(vec(skip->flat_grad()), vec(full->flat_grad())) << "split " << split;
  }
}

// ---- tensor parallelism (Linear, Conv1d, Conv2d) -------------------------------------------

// Two ranks in one process (two threads): exchange() waits until both ranks posted a tensor
// and hands each rank copies of both, so every collective below sees the same inputs.
class TwoRankGroup {
 public:
  std::array<Tensor, 2> exchange(int rank, const Tensor& t) {
    std::unique_lock<std::mutex> lock(mutex_);
    parts_[rank] = t.clone();
    arrive(lock);  // both posted
    std::array<Tensor, 2> both{parts_[0], parts_[1]};
    arrive(lock);  // both read: the next call may replace parts_
    return both;
  }

 private:
  void arrive(std::unique_lock<std::mutex>& lock) {
    const int generation = generation_;
    if (++arrived_ == 2) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  Tensor parts_[2];
  int arrived_ = 0, generation_ = 0;
};

// The layers' Collectives over a TwoRankGroup (every method of layers/collectives.h).
class FakeTpRank : public Collectives {
 public:
  FakeTpRank(TwoRankGroup& g, int rank) : group_(g), rank_(rank) {}
  int size() const override { return 2; }
  int rank() const override { return rank_; }
  void all_reduce_sum(Tensor& t) override {
    const auto p = group_.exchange(rank_, t);
    for (int64_t i = 0; i < t.numel(); ++i) test::detail::set(t, i, p[0].at(i) + p[1].at(i));
  }
  void all_gather(const Tensor& in, Tensor& out) override {  // in [n] -> out [2n]
    const auto p = group_.exchange(rank_, in);
    const int64_t n = in.numel();
    SM_CHECK(out.numel() == 2 * n, "all_gather: out has " << out.numel() << " elements, want " << 2 * n);
    for (int r = 0; r < 2; ++r)
      for (int64_t i = 0; i < n; ++i) test::detail::set(out, r * n + i, p[r].at(i));
  }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {  // in [2n] -> out [n]
    const auto p = group_.exchange(rank_, in);
    const int64_t n = out.numel(), o = rank_ * n;
    SM_CHECK(in.numel() == 2 * n, "reduce_scatter_sum: in has " << in.numel() << " elements, want " << 2 * n);
    for (int64_t i = 0; i < n; ++i) test::detail::set(out, i, p[0].at(o + i) + p[1].at(o + i));
  }
  void broadcast(Tensor& t, int root) override { t.copy_from(group_.exchange(rank_, t)[root]); }

 private:
  TwoRankGroup& group_;
  int rank_;
};

TEST(FakeCollectives, EveryMethodMatchesItsContract) {
  TwoRankGroup group;
  Tensor got[2][4];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      FakeTpRank c(group, r);
      Tensor a = Tensor::full({2}, 1.0 + r, DType::F64);  // rank r: [1 + r, 1 + r]
      c.all_reduce_sum(a);
      Tensor g = Tensor::empty({4}, DType::F64);
      c.all_gather(Tensor::full({2}, 10.0 * r, DType::F64), g);
      Tensor in = Tensor::empty({4}, DType::F64), rs = Tensor::empty({2}, DType::F64);
      for (int i = 0; i < 4; ++i) test::detail::set(in, i, i + 100.0 * r);
      c.reduce_scatter_sum(in, rs);
      Tensor b = Tensor::full({1}, 5.0 + r, DType::F64);
      c.broadcast(b, 1);
      got[r][0] = a, got[r][1] = g, got[r][2] = rs, got[r][3] = b;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(vec(got[r][0]), (std::vector<double>{3, 3}));
    EXPECT_EQ(vec(got[r][1]), (std::vector<double>{0, 0, 10, 10}));
    // Chunk r of (i + 0) + (i + 100): rank 0 gets elements 0, 1; rank 1 elements 2, 3.
    EXPECT_EQ(vec(got[r][2]), (std::vector<double>{2.0 * (2 * r) + 100, 2.0 * (2 * r + 1) + 100}));
    EXPECT_EQ(vec(got[r][3]), (std::vector<double>{6}));
  }
}

// Part `part` of 2 of tensor t along `axis` (negative counts from the end).
Tensor half_along(const Tensor& t, int axis, int part) {
  if (axis < 0) axis += t.ndim();
  Shape s = t.shape();
  const int64_t full = s[axis], half = full / 2;
  int64_t inner = 1;
  for (int k = axis + 1; k < t.ndim(); ++k) inner *= s[k];
  s[axis] = half;
  Tensor out = Tensor::empty(s, t.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const int64_t outer = i / (half * inner), a = (i / inner) % half, in = i % inner;
    test::detail::set(out, i, t.at((outer * full + part * half + a) * inner + in));
  }
  return out;
}

// Marks a layer's weight (and, colwise, its bias) as split over 2 TP ranks on `dim`.
void shard_for_tp(Layer& layer, int dim, int rank) {
  auto ps = layer.params();
  for (size_t k = 0; k < ps.size(); ++k) {
    if (k == 1 && dim != 0) break;  // rowwise: bias replicated
    const int d = k == 0 ? dim : 0;
    ps[k]->shard.group = ShardSpec::Group::TP;
    ps[k]->shard.dim = d;
    ps[k]->shard.index = rank;
    ps[k]->shard.count = 2;
    ps[k]->local_shape[d] /= 2;
  }
}

struct TpRun {
  Tensor y, dx;
  std::vector<Tensor> grads;
};

// `make(dim, rank)` builds the layer (dim < 0: unsharded). `axis` is the feature axis of the
// layer's input and output. Colwise (dim 0): same input, output features split, dx
// all-reduced. Rowwise (dim 1): input features split, output all-reduced.
template <class Make>
void check_tensor_parallel(Make make, const Shape& xs, int axis, int dim) {
  auto full = make(-1, 0);
  Tensor x = test::random_tensor(xs, DType::F64, 201);
  Ctx ctx;
  Tensor y = full->forward(x, ctx);
  Tensor dy = test::random_tensor(y.shape(), DType::F64, 202);
  full->zero_grad();
  Tensor dx = full->backward_input(dy, ctx);
  auto ps = full->params();

  TwoRankGroup group;
  TpRun runs[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      FakeTpRank coll(group, r);
      auto unit = make(dim, r);
      Ctx c;
      c.tp = &coll;
      unit->zero_grad();
      runs[r].y = unit->forward(dim == 0 ? x : half_along(x, axis, r), c);
      c.split_wgrad = r == 1;  // rank 1 exercises the B/W split
      runs[r].dx = unit->backward_input(dim == 0 ? half_along(dy, axis, r) : dy, c);
      if (c.split_wgrad) unit->backward_weight(c);
      for (Param* p : unit->params()) runs[r].grads.push_back(p->grad.clone());
    });
  }
  for (auto& t : threads) t.join();

  auto expect_close = [](const Tensor& got, const Tensor& want, const std::string& what) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.at(i), want.at(i), 1e-12 * (1 + std::fabs(want.at(i)))) << what << " element " << i;
  };
  for (int r = 0; r < 2; ++r) {
    const std::string tag = std::string(dim == 0 ? "colwise" : "rowwise") + " rank " + std::to_string(r);
    expect_close(runs[r].y, dim == 0 ? half_along(y, axis, r) : y, tag + " y");
    expect_close(runs[r].dx, dim == 0 ? dx : half_along(dx, axis, r), tag + " dx");
    ASSERT_EQ(runs[r].grads.size(), ps.size());
    expect_close(runs[r].grads[0], half_along(ps[0]->grad, dim, r), tag + " d weight");
    if (ps.size() > 1)
      expect_close(runs[r].grads[1], dim == 0 ? half_along(ps[1]->grad, 0, r) : ps[1]->grad, tag + " d bias");
  }
}

template <class L, class Cfg>
auto tp_factory(const Cfg& cfg) {
  return [cfg](int dim, int rank) {
    auto layer = std::make_unique<L>(cfg);
    if (dim >= 0) shard_for_tp(*layer, dim, rank);
    return test::wrap(std::move(layer));
  };
}

TEST(TensorParallelLayers, ModeFollowsTheSplitDimension) {
  TwoRankGroup group;
  FakeTpRank coll(group, 0);  // never called: tp_mode only looks whether ctx.tp is set
  Ctx ctx;
  Linear layer(LinearConfig{4, 6, true, WeightInit::TorchDefault});
  EXPECT_EQ(tp_mode(*layer.params()[0], ctx), TpMode::None);
  for (TpMode m : {TpMode::Colwise, TpMode::Rowwise}) {
    Linear l(LinearConfig{4, 6, true, WeightInit::TorchDefault});
    shard_for_tp(l, tp_split_dim(m), 1);
    EXPECT_EQ(tp_mode(*l.params()[0], ctx), TpMode::None) << "no ctx.tp: unsharded rules";
    ctx.tp = &coll;
    EXPECT_EQ(tp_mode(*l.params()[0], ctx), m);
    ctx.tp = nullptr;
  }
  EXPECT_EQ(tp_split_dim(TpMode::None), -1);
}

TEST(TensorParallelLayers, ColwiseAndRowwiseMatchUnsharded) {
  for (int dim : {0, 1}) {
    check_tensor_parallel(tp_factory<Linear>(LinearConfig{6, 4, true, WeightInit::TorchDefault}), {2, 3, 6}, -1, dim);
    check_tensor_parallel(tp_factory<Conv1d>(Conv1dConfig{6, 4, true, WeightInit::TorchDefault}), {2, 2, 6, 5}, 2, dim);
    check_tensor_parallel(tp_factory<Conv2d>(Conv2dConfig{4, 6, 3, 1, 1, true, WeightInit::TorchDefault}),
                          {2, 1, 4, 5, 4}, 2, dim);
  }
}

}  // namespace
}  // namespace sm
