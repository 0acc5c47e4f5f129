// test_parallel_equivalence.cpp — every data-parallel layout (dp with small buckets, ZeRO-1,
// ZeRO-2, FSDP) reproduces the single-rank trajectory on the same global batch: fp64 with
// synced batch norm, 20 steps, losses and final parameters within 1e-9 relative; f32 within
// 1e-3. The reference is train_step on the whole global batch on one rank with no
// communication (computed by every rank alone). Also: dp/ZeRO replicas bitwise identical
// after every step (checksums compared over the group), synced BN against BN on the global
// batch, gradient accumulation (accum 2 x b == 2b; dp + accum == one rank + accum), dropout
// masks independent of the layout, and the FSDP mixed-precision parameter policy.
#include <gtest/gtest.h>

#include <cstring>

#include "spikemesh/comm/comm.h"
#include "spikemesh/parallel/comm_collectives.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/parallel/fsdp.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/replica_check.h"
#include "spikemesh/parallel/strategy.h"
#include "spikemesh/train/memopt_search.h"
#include "test_parallel_util.h"

namespace sm::test {
namespace {

constexpr int kSteps = 20;
constexpr int64_t kGlobal = 8;

bool world_fits() { return world_size() >= 1 && kGlobal % world_size() == 0; }

struct ParallelResult {
  Trajectory tr;
  int replica_mismatch_step = -1;  // first step after which dp/ZeRO replicas differed
  StrategyStats stats;
};

// The same training as reference_run, data parallel over `dp`: rank r of p takes part
// k·p + r of each of the `accum` micro-batches of the global batch.
ParallelResult parallel_run(Comm& dp, const std::string& which, DType dt, int steps, int64_t global,
                            const OptimizerConfig& oc, LayoutOptions lo, bool sync_bn, int accum = 1,
                            double dropout = 0.0, double clip_norm = 0.0, Device dev = Device::cpu(),
                            int backward_pieces = 1, int chain_pieces = 1) {
  auto m = build_model(which, dt, 7, dropout, dev);
  lo.sync_bn = sync_bn;  // the layout hands synced BN over dp to the layers
  Layout layout(*m, dp, resolved_layout_plan(lo, MeshShape{dp.size(), 1, 1}, dp.size(), 0, *m));
  auto opt = make_optimizer(oc, layout.optimizer_params());
  const int p = dp.size(), r = dp.rank();
  const int64_t b = global / (p * accum);
  ParallelResult out;
  if (backward_pieces > 1) {  // memopt's segments in sample pieces, backward only
    layout.set_memopt(split_all(layout.stage(), layout.memopt(), backward_pieces, SplitAxis::Batch, false));
  }
  if (chain_pieces > 1) {  // consecutive units chained in sample pieces
    layout.set_memopt(chain_all(layout.stage(), layout.memopt(), chain_pieces));
    EXPECT_FALSE(layout.memopt().chains.empty()) << which << ": no chain was made";
  }
  if (lo.memopt.level >= 2) {  // the search on the first step's batch (collective over dp)
    std::vector<MicroBatch> first;
    for (int k = 0; k < accum; ++k) first.push_back(on_device(synth_batch(*m, 0, (k * p + r) * b, b, dt), dev));
    Ctx ctx;
    ctx.seed = 11;
    optimize_memopt(layout, first, ctx);
  }
  for (int s = 0; s < steps; ++s) {
    Ctx ctx;
    ctx.seed = 11;
    ctx.step = s;
    std::vector<MicroBatch> micro;
    for (int k = 0; k < accum; ++k) micro.push_back(on_device(synth_batch(*m, s, (k * p + r) * b, b, dt), dev));
    StepOptions opts;
    opts.clip_norm = clip_norm;
    StepResult res = train_step(layout, *opt, micro, ctx, opts);
    std::vector<double> v{res.loss};
    all_reduce_doubles(dp, v, ReduceOp::Sum);
    out.tr.losses.push_back(v[0] / p);
    if (layout.strategy().name() != "fsdp") {
      Tensor mine = Tensor::empty({1}, DType::I64), all = Tensor::empty({p}, DType::I64);
      mine.data<int64_t>()[0] = static_cast<int64_t>(params_checksum(m->params()));
      dp.all_gather(mine, all);
      for (int q = 1; q < p; ++q)
        if (all.data<int64_t>()[q] != all.data<int64_t>()[0] && out.replica_mismatch_step < 0)
          out.replica_mismatch_step = s;
    }
  }
  layout.gather_full_params();
  out.tr.params = flat_params(*m);
  layout.release_full_params();
  out.stats = layout.stats();
  return out;
}

// name: dp | zero | zero2 | fsdp | fsdp_keep, with "+memopt" for memopt level 1 ("+memoptL": level L).
LayoutOptions mode(std::string name, DType dt) {
  LayoutOptions lo;
  const std::string memopt = "+memopt";  // "+memopt" level 1, "+memopt4" level 4
  const size_t at = name.find(memopt);
  if (at != std::string::npos) {
    const std::string level = name.substr(at + memopt.size());
    lo.memopt.level = level.empty() ? 1 : std::stoi(level);
    name.resize(at);
  }
  StrategyOptions& so = lo.strategy;
  so.param_dtype = so.reduce_dtype = dt;
  if (name == "fsdp" || name == "fsdp_keep") {
    lo.mode = "fsdp";
    so.reshard_after_forward = name == "fsdp";
  } else {
    lo.mode = "dp";
    so.sharding = name == "dp" ? "none" : name;
    so.bucket_mb = 0.002;  // a few hundred elements: many buckets, several per unit
  }
  return lo;
}

void expect_same_trajectory(const std::string& which, const std::string& layout, DType dt, double tol,
                            const std::string& optimizer = "adam", double clip_norm = 0.0,
                            Device dev = Device::cpu(), int backward_pieces = 1, int chain_pieces = 1) {
  if (!world_fits()) GTEST_SKIP() << "global batch " << kGlobal << " not divisible by " << world_size();
  Comm dp(world(), "dp");
  const OptimizerConfig oc = test_optimizer(optimizer);
  Trajectory ref = reference_run(which, dt, kSteps, kGlobal, oc, 1, 0.0, clip_norm, dev);
  ParallelResult par = parallel_run(dp, which, dt, kSteps, kGlobal, oc, mode(layout, dt), /*sync_bn=*/true, 1, 0.0,
                                    clip_norm, dev, backward_pieces, chain_pieces);
  ASSERT_EQ(par.tr.losses.size(), ref.losses.size());
  EXPECT_NE(ref.losses.front(), ref.losses.back()) << "the reference did not train";
  if (clip_norm > 0) {
    EXPECT_NE(reference_run(which, dt, kSteps, kGlobal, oc, 1, 0.0, 0.0, dev).params, ref.params)
        << "clipping never acted";
  }
  double worst = 0;
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    worst = std::max(worst, rel_diff(par.tr.losses[s], ref.losses[s]));
    EXPECT_LE(rel_diff(par.tr.losses[s], ref.losses[s]), tol)
        << layout << " step " << s + 1 << ": " << par.tr.losses[s] << " vs single rank " << ref.losses[s];
  }
  EXPECT_LE(max_rel_diff(par.tr.params, ref.params), tol) << layout << ": final parameters";
  EXPECT_EQ(par.replica_mismatch_step, -1) << layout << ": replicas differ after step " << par.replica_mismatch_step + 1;
  if (world_rank() == 0)
    std::printf("[ info     ] %s %s %s dp=%d on %s: worst loss rel diff %.3g, params %.3g\n", which.c_str(),
                layout.c_str(), dtype_name(dt), world_size(), dev.str().c_str(), worst,
                max_rel_diff(par.tr.params, ref.params));
}

}  // namespace

TEST(ParallelEquivalence, DpCsnnFp64) { expect_same_trajectory("csnn", "dp", DType::F64, 1e-9); }
TEST(ParallelEquivalence, ZeroCsnnFp64) { expect_same_trajectory("csnn", "zero", DType::F64, 1e-9); }
TEST(ParallelEquivalence, Zero2CsnnFp64) { expect_same_trajectory("csnn", "zero2", DType::F64, 1e-9, "sgd"); }
TEST(ParallelEquivalence, FsdpCsnnFp64) { expect_same_trajectory("csnn", "fsdp", DType::F64, 1e-9); }
// memopt level 1 with each dp strategy (FSDP: gathered again before the recompute; synced BN:
// the recompute repeats the kept statistics without another all-reduce).
TEST(ParallelEquivalence, MemoptFsdpDvsFp64) { expect_same_trajectory("dvs", "fsdp+memopt", DType::F64, 1e-9); }
TEST(ParallelEquivalence, MemoptZero2CsnnFp64) { expect_same_trajectory("csnn", "zero2+memopt", DType::F64, 1e-9); }
TEST(ParallelEquivalence, MemoptDpSpikformerFp64) { expect_same_trajectory("sformer", "dp+memopt", DType::F64, 1e-9); }
// The searches with synced BN over dp: the pieces' statistics and gradient sums all-reduced.
TEST(ParallelEquivalence, MemoptSearchesFsdpAndZeroDvsFp64) {
  expect_same_trajectory("dvs", "fsdp+memopt4", DType::F64, 1e-9);
  expect_same_trajectory("dvs", "zero+memopt3", DType::F64, 1e-9);
}
// Sample pieces in backward only with synced BN: the forward's statistics all-reduced once,
// the pieces' gradient sums all-reduced over dp.
TEST(ParallelEquivalence, MemoptBackwardPiecesDpAndFsdpFp64) {
  expect_same_trajectory("dvs", "dp+memopt", DType::F64, 1e-9, "adam", 0.0, Device::cpu(), 2);
  expect_same_trajectory("sformer", "fsdp+memopt", DType::F64, 1e-9, "adam", 0.0, Device::cpu(), 2);
}
// Piece chains with synced BN: each batch norm's gradient sums over the chain's pieces
// all-reduced over dp; FSDP gathers every unit of a chain before its backward.
TEST(ParallelEquivalence, MemoptPieceChainsDpAndFsdpFp64) {
  expect_same_trajectory("dvs", "dp+memopt", DType::F64, 1e-9, "adam", 0.0, Device::cpu(), 1, 2);
  expect_same_trajectory("sformer", "fsdp+memopt", DType::F64, 1e-9, "adam", 0.0, Device::cpu(), 1, 2);
}
TEST(ParallelEquivalence, DpDvsFp64) { expect_same_trajectory("dvs", "dp", DType::F64, 1e-9); }
TEST(ParallelEquivalence, ZeroDvsFp64) { expect_same_trajectory("dvs", "zero", DType::F64, 1e-9, "sgd"); }
TEST(ParallelEquivalence, Zero2DvsFp64) { expect_same_trajectory("dvs", "zero2", DType::F64, 1e-9); }
TEST(ParallelEquivalence, FsdpDvsFp64) { expect_same_trajectory("dvs", "fsdp", DType::F64, 1e-9); }
TEST(ParallelEquivalence, FsdpNoReshardDvsFp64) { expect_same_trajectory("dvs", "fsdp_keep", DType::F64, 1e-9); }
// Global-norm clipping: the squared norm of the shards is all-reduced over dp.
TEST(ParallelEquivalence, ClippedZero2DvsFp64) { expect_same_trajectory("dvs", "zero2", DType::F64, 1e-9, "sgd", 0.05); }
TEST(ParallelEquivalence, ClippedFsdpCsnnFp64) { expect_same_trajectory("csnn", "fsdp", DType::F64, 1e-9, "adam", 0.05); }
TEST(ParallelEquivalence, ClippedDpDvsFp64) { expect_same_trajectory("dvs", "dp", DType::F64, 1e-9, "sgd", 0.05); }
// f32 on the DVS model (CE of mean logits: continuous in the parameters). The CSNN's loss is
// the MSE of output SPIKE counts, so one rounding-induced spike flip moves it by ~1%: an f32
// layout comparison of it is only meaningful in fp64 (above).
TEST(ParallelEquivalence, DpDvsF32) { expect_same_trajectory("dvs", "dp", DType::F32, 1e-3); }
TEST(ParallelEquivalence, Zero2DvsF32) { expect_same_trajectory("dvs", "zero2", DType::F32, 1e-3); }
TEST(ParallelEquivalence, FsdpDvsF32) { expect_same_trajectory("dvs", "fsdp", DType::F32, 1e-3); }
// The GPU path: flat buffers, shards and optimizer state on the device; NCCL when every rank
// has its own GPU, the staged MPI back end when ranks share one. Reference: one rank on a GPU.
TEST(ParallelEquivalenceGpu, DpZero2AndFsdpDvsF32OnTheDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const Device g = test_gpu();
  for (const char* layout : {"dp", "zero2", "fsdp"}) expect_same_trajectory("dvs", layout, DType::F32, 1e-3, "adam", 0.0, g);
  expect_same_trajectory("dvs", "zero", DType::F32, 1e-3, "sgd", 0.05, g);  // clipping over device shards
}

// Dropout masks are keyed by the global sample index: a dp layout draws the single rank's masks.
TEST(ParallelEquivalence, DropoutMasksDoNotDependOnTheLayout) {
  if (!world_fits()) GTEST_SKIP();
  Comm dp(world(), "dp");
  const OptimizerConfig oc = test_optimizer();
  Trajectory ref = reference_run("dvs", DType::F64, 8, kGlobal, oc, 1, /*dropout=*/0.25);
  Trajectory no_drop = reference_run("dvs", DType::F64, 8, kGlobal, oc, 1, 0.0);
  EXPECT_NE(ref.losses, no_drop.losses) << "dropout had no effect";
  ParallelResult par = parallel_run(dp, "dvs", DType::F64, 8, kGlobal, oc, mode("dp", DType::F64), true, 1, 0.25);
  for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_LE(rel_diff(par.tr.losses[s], ref.losses[s]), 1e-9) << s;
}

// accum 2 x batch b == one batch of 2b on one rank, for a model without batch norm (BN
// statistics are per micro-batch, so with BN the two differ by design).
TEST(ParallelEquivalence, GradAccumulationEqualsTheLargerBatch) {
  const OptimizerConfig oc = test_optimizer();
  Trajectory big = reference_run("nobn", DType::F64, 10, 8, oc, 1);
  Trajectory acc = reference_run("nobn", DType::F64, 10, 8, oc, 2);
  EXPECT_NE(big.losses.front(), big.losses.back());
  for (size_t s = 0; s < big.losses.size(); ++s) EXPECT_LE(rel_diff(acc.losses[s], big.losses[s]), 1e-9) << s;
  EXPECT_LE(max_rel_diff(acc.params, big.params), 1e-9);
}

// dp with accumulation (reduction on the last micro-step only; ZeRO-2 and FSDP reduce every
// micro-step into the shard) == one rank with the same micro-batches (BN synced over dp sees
// exactly the single rank's micro-batch).
TEST(ParallelEquivalence, DataParallelGradAccumulationMatchesOneRank) {
  if (!world_fits() || (kGlobal / 2) % world_size() != 0) GTEST_SKIP();
  Comm dp(world(), "dp");
  const OptimizerConfig oc = test_optimizer();
  Trajectory ref = reference_run("dvs", DType::F64, 10, kGlobal, oc, 2);
  for (const char* layout : {"dp", "zero", "zero2", "fsdp"}) {
    ParallelResult par = parallel_run(dp, "dvs", DType::F64, 10, kGlobal, oc, mode(layout, DType::F64), true, 2);
    for (size_t s = 0; s < ref.losses.size(); ++s)
      EXPECT_LE(rel_diff(par.tr.losses[s], ref.losses[s]), 1e-9) << layout << " step " << s;
    EXPECT_LE(max_rel_diff(par.tr.params, ref.params), 1e-9) << layout;
    EXPECT_EQ(par.replica_mismatch_step, -1) << layout;
  }
}

// Synced BN over dp (each rank its slice of the batch) == BN over the whole batch on one
// rank: output, input gradient, parameter gradients (summed over ranks) and running stats.
TEST(ParallelEquivalence, SyncedBatchNormEqualsGlobalBatchNorm) {
  const int p = world_size(), r = world_rank();
  const int64_t T = 3, n = 2, C = 5, H = 4, W = 3, N = n * p;
  Comm dp(world(), "dp");
  CommCollectives coll(dp);
  const CounterRng rng(5, "bn-test");
  Tensor x = Tensor::empty({T, N, C, H, W}, DType::F64), dy = Tensor::empty({T, N, C, H, W}, DType::F64);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<double>()[i] = 2.0 * rng.normal(i) + 0.5 * (i % C);
    dy.data<double>()[i] = rng.normal(i, 1);
  }
  auto slice = [&](const Tensor& t) {  // this rank's samples [r·n, (r+1)·n) of dim 1
    Tensor s = Tensor::empty({T, n, C, H, W}, DType::F64);
    const int64_t per = C * H * W;
    for (int64_t t0 = 0; t0 < T; ++t0)
      std::memcpy(s.data<double>() + t0 * n * per, t.data<double>() + (t0 * N + r * n) * per, n * per * sizeof(double));
    return s;
  };
  // Build both layers inside units so their params/buffers are bound.
  Unit ug("g"), ul("l");
  BatchNormConfig c;
  c.num_features = static_cast<int>(C);
  ug.add(std::make_unique<BatchNorm>(c));
  ul.add(std::make_unique<BatchNorm>(c));
  ug.finalize(DType::F64, Device::cpu(), 3);
  ul.finalize(DType::F64, Device::cpu(), 3);
  for (Unit* u : {&ug, &ul}) {  // non-trivial affine parameters
    Param* w = u->params()[0];
    Param* b = u->params()[1];
    for (int64_t k = 0; k < C; ++k) {
      w->value.data<double>()[k] = 0.7 + 0.1 * k;
      b->value.data<double>()[k] = -0.2 + 0.05 * k;
    }
  }
  for (int it = 0; it < 2; ++it) {  // twice: the second forward uses updated running stats as shift
    Ctx cg, cl;
    cl.bn_sync = &coll;
    ug.zero_grad();
    ul.zero_grad();
    Tensor yg = ug.forward(x, cg), yl = ul.forward(slice(x), cl);
    // The global loss's gradient restricted to this rank's samples, scaled by p (the dp
    // average divides the parameter gradients by p again).
    Tensor dyl = slice(dy);
    for (int64_t i = 0; i < dyl.numel(); ++i) dyl.data<double>()[i] *= p;
    Tensor dxg = ug.backward_input(dy, cg), dxl = ul.backward_input(dyl, cl);
    Tensor ysl = slice(yg), dxsl = slice(dxg);
    double ey = 0, ex = 0, sy = 0, sx = 0;
    for (int64_t i = 0; i < yl.numel(); ++i) {
      ey = std::max(ey, std::fabs(yl.data<double>()[i] - ysl.data<double>()[i]));
      ex = std::max(ex, std::fabs(dxl.data<double>()[i] / p - dxsl.data<double>()[i]));
      sy = std::max(sy, std::fabs(ysl.data<double>()[i]));
      sx = std::max(sx, std::fabs(dxsl.data<double>()[i]));
    }
    EXPECT_LE(ey / sy, 1e-12) << "output, iteration " << it;
    EXPECT_LE(ex / sx, 1e-11) << "input gradient, iteration " << it;
    Tensor g = ul.flat_grad().clone();
    dp.all_reduce(g, ReduceOp::Avg);
    for (int64_t k = 0; k < g.numel(); ++k)
      EXPECT_NEAR(g.data<double>()[k], ug.flat_grad().data<double>()[k], 1e-10 * (1 + std::fabs(g.data<double>()[k])))
          << "parameter gradient " << k;
    auto bg = ug.buffers(), bl = ul.buffers();
    for (size_t q = 0; q < bg.size(); ++q)
      for (int64_t k = 0; k < bg[q]->value.numel(); ++k)
        EXPECT_NEAR(bl[q]->value.at(k), bg[q]->value.at(k), 1e-12 * (1 + std::fabs(bg[q]->value.at(k)))) << bg[q]->name;
  }
}

// FSDP gathers parameters in the param dtype: the layers see the master values rounded to it.
TEST(ParallelEquivalence, FsdpParamDtypeRoundsTheGatheredParameters) {
  Comm dp(world(), "dp");
  for (DType pd : {DType::F32, DType::BF16}) {
    auto ref = build_model("dvs", DType::F64);
    auto m = build_model("dvs", DType::F64);
    Stage all(*m, 0, m->units.size());
    Fsdp f(all, dp, true, pd, DType::F32);
    f.gather_full_params();
    std::vector<double> want = flat_params(*ref), got = flat_params(*m);
    ASSERT_EQ(want.size(), got.size());
    int bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      Tensor t = Tensor::full({1}, want[i], DType::F64);
      if (pd == DType::BF16)
        round_through_bf16(t);
      else
        t.data<double>()[0] = static_cast<float>(want[i]);
      bad += t.data<double>()[0] != got[i];
    }
    EXPECT_EQ(bad, 0) << dtype_name(pd);
    f.release_full_params();
  }
  // Reduce in f32 on an f64 model: the trajectory stays within f32 accuracy of the reference.
  if (!world_fits()) return;
  LayoutOptions lo = mode("fsdp", DType::F64);
  lo.strategy.reduce_dtype = DType::F32;
  const OptimizerConfig oc = test_optimizer();
  Trajectory ref = reference_run("dvs", DType::F64, 5, kGlobal, oc);
  ParallelResult par = parallel_run(dp, "dvs", DType::F64, 5, kGlobal, oc, lo, true);
  for (size_t s = 0; s < ref.losses.size(); ++s) EXPECT_LE(rel_diff(par.tr.losses[s], ref.losses[s]), 1e-3) << s;
}

}  // namespace sm::test
