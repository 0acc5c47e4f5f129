// test_parallel_tensor.cpp — tensor parallelism (parallel/tp_plan.h) reproduces the
// single-rank trajectory on the same global batch: fp64, synced batch norm over dp, 20 steps,
// losses within 1e-9 relative and every rank's parameter shard equal to the matching part of
// the one-rank parameters; tensors replicated over tp bitwise identical on every tp rank and
// dp replicas bitwise identical after every step. Layouts: tp = world (2 or 4) for the three model families (the tiny VGG,
// the CSNN, a small Spikformer whose attention is split by heads at tp 2), dp 2 x tp 2 on 4
// ranks, with clipping by the global norm and dropout. The reference is reference_run (test_parallel_util.h): one rank, no communication.
#include <gtest/gtest.h>

#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/replica_check.h"
#include "spikemesh/parallel/tp_plan.h"
#include "spikemesh/train/memopt_search.h"
#include "test_parallel_util.h"

namespace sm::test {
namespace {

constexpr int kSteps = 20;
constexpr int64_t kGlobal = 8;

struct TpResult {
  Trajectory tr;                 // losses (mean over the global batch); params: this rank's shards
  std::vector<Param*> params;    // the shards' Params (for their boxes)
  int replica_mismatch_step = -1;
  std::unique_ptr<Model> model;  // keeps the Params alive
  TpPlan plan;
};

// Checksum of the tensors replicated over tp (every tp rank must hold the same bits).
uint64_t replicated_checksum(Model& m) {
  std::vector<Param*> rep;
  for (Param* p : m.params())
    if (!p->shard.sharded()) rep.push_back(p);
  return params_checksum(rep);
}

// `layout`: tp (plain dp over the dp group), zero / zero2 (ZeRO over dp of the tp-local flat
// buffers) or fsdp_tp.
TpResult tp_run(const std::string& which, const MeshShape& shape, int steps, const OptimizerConfig& oc,
                double dropout = 0.0, double clip_norm = 0.0, DType dt = DType::F64, Device dev = Device::cpu(),
                const std::string& layout_name = "tp", int accum = 1, int memopt = 0, int chain_pieces = 1) {
  auto mesh = Mesh::create(world(), shape);
  TpResult out;
  out.model = build_spec_model(which, dropout);
  TpOptions to;
  to.tp = shape.tp;
  out.plan = make_tp_plan(*out.model, to);
  apply_tp_plan(out.plan, mesh->tp().rank());
  Model& m = *out.model;
  m.finalize(dt, dev, 7);
  LayoutOptions lo;
  lo.mode = layout_name == "fsdp_tp" ? "fsdp_tp" : "tp";
  if (layout_name == "zero" || layout_name == "zero2") lo.strategy.sharding = layout_name;
  lo.strategy.param_dtype = lo.strategy.reduce_dtype = dt;
  lo.sync_bn = true;
  lo.memopt.level = memopt;
  Layout layout(m, mesh.get(), resolved_layout_plan(lo, mesh->shape(), mesh->world_size(), 0, m));
  auto opt = make_optimizer(oc, layout.optimizer_params());
  const int p = layout.groups().data_size(), r = layout.groups().data_rank();
  const int64_t b = kGlobal / (p * accum);  // rank r takes part k·p + r of micro-batch k
  if (chain_pieces > 1) {  // consecutive units chained in sample pieces (every tp rank the same)
    layout.set_memopt(chain_all(layout.stage(), layout.memopt(), chain_pieces));
    EXPECT_FALSE(layout.memopt().chains.empty()) << which << ": no chain was made";
  }
  if (memopt >= 2) {  // the search on the first step's batch (collective over the tp and dp groups)
    std::vector<MicroBatch> first;
    for (int k = 0; k < accum; ++k) first.push_back(on_device(synth_batch(m, 0, (k * p + r) * b, b, dt), dev));
    Ctx ctx;
    ctx.seed = 11;
    optimize_memopt(layout, first, ctx);
  }
  for (int s = 0; s < steps; ++s) {
    Ctx ctx;
    ctx.seed = 11;
    ctx.step = s;
    std::vector<MicroBatch> micro;
    for (int k = 0; k < accum; ++k) micro.push_back(on_device(synth_batch(m, s, (k * p + r) * b, b, dt), dev));
    StepOptions so;
    so.clip_norm = clip_norm;
    const StepResult res = train_step(layout, *opt, micro, ctx, so);
    std::vector<double> v{res.loss};
    all_reduce_doubles(mesh->dp(), v, ReduceOp::Sum);
    out.tr.losses.push_back(v[0] / p);
    if (layout_name == "fsdp_tp") continue;  // parameters live as dp shards between steps
    Tensor mine = Tensor::empty({1}, DType::I64), all = Tensor::empty({shape.tp}, DType::I64);
    mine.data<int64_t>()[0] = static_cast<int64_t>(replicated_checksum(m));
    mesh->tp().all_gather(mine, all);
    for (int q = 1; q < shape.tp; ++q)
      if (all.data<int64_t>()[q] != all.data<int64_t>()[0] && out.replica_mismatch_step < 0) out.replica_mismatch_step = s;
    // dp replicas (same tp rank, different dp rank) hold the same shards, bit for bit
    Tensor mine_dp = Tensor::empty({1}, DType::I64), all_dp = Tensor::empty({shape.dp}, DType::I64);
    mine_dp.data<int64_t>()[0] = static_cast<int64_t>(params_checksum(m.params()));
    mesh->dp().all_gather(mine_dp, all_dp);
    for (int q = 1; q < shape.dp; ++q)
      if (all_dp.data<int64_t>()[q] != all_dp.data<int64_t>()[0] && out.replica_mismatch_step < 0)
        out.replica_mismatch_step = s;
  }
  out.tr.firing = firing_over_replicas(layout, &mesh->dp());  // tp: the mean of the channel shards
  layout.gather_full_params();  // FSDP: the tp-local tensors whole again (others: a no-op)
  out.params = m.params();
  out.tr.params = flat_params(m);
  layout.release_full_params();
  return out;
}

void expect_tp_trajectory(const std::string& which, const MeshShape& shape, const std::string& optim = "adam",
                          double dropout = 0.0, double clip_norm = 0.0, DType dt = DType::F64,
                          Device dev = Device::cpu(), double tol = 1e-9, const std::string& layout = "tp",
                          int accum = 1, int memopt = 0, int chain_pieces = 1) {
  const OptimizerConfig oc = test_optimizer(optim);
  // fp64 runs on the CPU; the device variant compares the device tp run with the CPU's one rank
  const Trajectory ref = reference_run(which, dt, kSteps, kGlobal, oc, accum, dropout, clip_norm);
  const TpResult got = tp_run(which, shape, kSteps, oc, dropout, clip_norm, dt, dev, layout, accum, memopt, chain_pieces);
  EXPECT_GT(got.plan.sharded_layers(), 0) << which << ": nothing was sharded";
  ASSERT_EQ(got.tr.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_LE(rel_diff(got.tr.losses[s], ref.losses[s]), tol)
        << which << " " << layout << " " << shape.str() << " step " << s << ": " << got.tr.losses[s] << " vs " << ref.losses[s];
  EXPECT_LE(max_rel_diff(got.tr.params, matching_part(got.params, ref.params)), tol) << which << " " << shape.str();
  ASSERT_EQ(got.tr.firing.size(), ref.firing.size()) << which << " " << shape.str() << ": layer stats";
  EXPECT_LE(max_rel_diff(got.tr.firing, ref.firing), tol) << which << " " << shape.str() << ": firing rates";
  if (dev.is_cpu()) {  // (device kernels need not be bitwise reproducible across tp ranks' shapes)
    EXPECT_EQ(got.replica_mismatch_step, -1) << "replicas (over tp or dp) differed after step "
                                           << got.replica_mismatch_step;
  }
}

bool tp_world_fits() { return world_size() >= 2 && kGlobal % world_size() == 0; }

TEST(TensorParallel, TpDvsFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  expect_tp_trajectory("dvs", MeshShape{1, world_size(), 1});
}
TEST(TensorParallel, TpCsnnFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  expect_tp_trajectory("csnn", MeshShape{1, world_size(), 1});
}
TEST(TensorParallel, TpSpikformerFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  expect_tp_trajectory("sformer", MeshShape{1, world_size(), 1});
}
// Piece chains under tp (every piece's rowwise all-reduces on every tp rank) and fsdp_tp (every
// unit of a chain gathered before its backward): one rank's trajectory.
TEST(TensorParallel, MemoptPieceChainsTpFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  const MeshShape tp{1, world_size(), 1};
  expect_tp_trajectory("dvs", tp, "adam", 0.25, 0.0, DType::F64, Device::cpu(), 1e-9, "tp", 1, 1, /*chain_pieces=*/2);
  expect_tp_trajectory("sformer", tp, "adam", 0.0, 0.0, DType::F64, Device::cpu(), 1e-9, "fsdp_tp", 1, 1, 2);
}
// memopt level 1 under tp (the recompute repeats the rowwise all-reduces on every tp rank) and
// under fsdp_tp (parameters gathered again for backward before the recompute): one rank's trajectory.
TEST(TensorParallel, MemoptTpDvsAndSpikformerFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  const MeshShape tp{1, world_size(), 1};
  expect_tp_trajectory("dvs", tp, "adam", 0.25, 0.0, DType::F64, Device::cpu(), 1e-9, "tp", 1, /*memopt=*/1);
  expect_tp_trajectory("sformer", tp, "adam", 0.0, 0.0, DType::F64, Device::cpu(), 1e-9, "tp", 1, /*memopt=*/1);
  // the searches: pieces whose rowwise layers all-reduce per piece on every tp rank
  expect_tp_trajectory("dvs", tp, "adam", 0.0, 0.0, DType::F64, Device::cpu(), 1e-9, "tp", 1, /*memopt=*/3);
  expect_tp_trajectory("sformer", tp, "adam", 0.0, 0.0, DType::F64, Device::cpu(), 1e-9, "tp", 1, /*memopt=*/4);
}
TEST(TensorParallel, MemoptFsdpTpDvsFp64) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks (dp 2 x tp 2)";
  expect_tp_trajectory("dvs", MeshShape{2, 2, 1}, "adam", 0.0, 0.0, DType::F64, Device::cpu(), 1e-9, "fsdp_tp", 1, 1);
}
TEST(TensorParallel, SpikformerAttentionIsSplitByHeads) {
  auto m = build_spec_model("sformer");
  TpOptions to;
  to.tp = 2;
  const TpPlan plan = make_tp_plan(*m, to);
  int ssa = 0, qkv = 0;
  for (const TpLayerPlan& l : plan.layers) {
    if (l.type == "ssa") {
      EXPECT_EQ(l.role, TpRole::Local) << l.name;
      EXPECT_EQ(l.local_out_shape[0] * 2, l.out_shape[0]);
      ++ssa;
    }
    if (l.name.find("qkv_conv_bn.0") != std::string::npos) {
      EXPECT_EQ(l.role, TpRole::Colwise);
      EXPECT_EQ(l.segments, 3);
      ++qkv;
    }
    if (l.name.find("proj_conv_bn.0") != std::string::npos) {
      EXPECT_EQ(l.role, TpRole::Rowwise) << l.name;
    }
  }
  EXPECT_EQ(ssa, 1);
  EXPECT_EQ(qkv, 1);
}
// Weight layers without a rowwise partner (Spikformer's positional-encoding conv before its
// residual, the classifier) are colwise with their output gathered: their parameters split, the
// traffic one all-gather of the output and one all-reduce of the input gradient; kept whole by
// --tp-keep-classifier or when the output channels do not divide by tp. The trajectory tests
// above run these models, so the gathered layers are checked against one rank there.
TEST(TensorParallel, UnpairedLayersAreColwiseWithTheirOutputGathered) {
  for (const char* which : {"sformer", "dvs"}) {
    auto m = build_spec_model(which);
    TpOptions to;
    to.tp = 2;
    const TpPlan plan = make_tp_plan(*m, to);
    int gathered = 0;
    for (const TpLayerPlan& l : plan.layers) {
      if (l.role != TpRole::ColwiseGather) continue;
      ++gathered;
      EXPECT_EQ(l.local_out_shape, l.out_shape) << l.name << ": leaves whole activations";
      EXPECT_EQ(l.forward_channel_gather, shape_numel(l.out_shape)) << l.name;
      EXPECT_GT(l.backward_all_reduce, 0) << l.name;
      const TpPlan::Traffic t = plan.layer_traffic(l, 4, 2, 8);
      EXPECT_EQ(t.all_gather_calls, 1);
      EXPECT_EQ(t.all_gather_bytes, shape_numel(l.out_shape) * 4 * 2 * 8);
      EXPECT_EQ(t.all_reduce_calls, 1);
    }
    EXPECT_GT(gathered, 0) << which;
    if (std::string(which) == "sformer") {
      const TpLayerPlan& head = plan.layers.back();
      EXPECT_EQ(head.role, TpRole::ColwiseGather) << head.name;
      bool pos = false;
      for (const TpLayerPlan& l : plan.layers)
        pos |= l.name.find("positional_encoding") != std::string::npos && l.role == TpRole::ColwiseGather;
      EXPECT_TRUE(pos);
    }
    to.keep_classifier = true;
    auto m2 = build_spec_model(which);
    EXPECT_EQ(make_tp_plan(*m2, to).layers.back().role, TpRole::Replicated) << which;
  }
}
TEST(TensorParallel, TpDropoutAndClippingFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  expect_tp_trajectory("dvs", MeshShape{1, world_size(), 1}, "sgd", 0.25, 0.05);
}
// tp 2 on device buffers (CUDA kernels; NCCL when every rank has its own GPU, staged MPI
// otherwise) against the one-rank CPU run in f32.
TEST(TensorParallelGpu, Tp2OnTheDeviceEqualsTheCpuRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  if (world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  expect_tp_trajectory("dvs", MeshShape{1, 2, 1}, "adam", 0.0, 0.0, DType::F32, test_gpu(), 1e-3);
}

// ZeRO-1/2 and FSDP over dp of the tp-local flat buffers; clipping by the global norm over
// dp shards and tp shards (each element once). On 2 ranks dp is 1 (the code paths still run).
TEST(TensorParallel, ZeroAndFsdpTimesTpFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  const MeshShape shape = world_size() == 4 ? MeshShape{2, 2, 1} : MeshShape{1, world_size(), 1};
  const Device cpu = Device::cpu();
  expect_tp_trajectory("dvs", shape, "adam", 0.0, 0.0, DType::F64, cpu, 1e-9, "zero");
  expect_tp_trajectory("dvs", shape, "sgd", 0.0, 0.05, DType::F64, cpu, 1e-9, "zero2");
  expect_tp_trajectory("csnn", shape, "adam", 0.0, 0.05, DType::F64, cpu, 1e-9, "fsdp_tp");
  expect_tp_trajectory("sformer", shape, "adam", 0.0, 0.0, DType::F64, cpu, 1e-9, "fsdp_tp");
}

// Gradient accumulation: 2 micro-batches per step under tp = one rank accumulating the same 2.
TEST(TensorParallel, GradAccumulationFp64) {
  if (!tp_world_fits()) GTEST_SKIP();
  const MeshShape shape = world_size() == 4 ? MeshShape{2, 2, 1} : MeshShape{1, 2, 1};
  expect_tp_trajectory("dvs", shape, "adam", 0.0, 0.0, DType::F64, Device::cpu(), 1e-9, "tp", 2);
}

TEST(TensorParallel, DpTimesTpFp64) {
  if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  expect_tp_trajectory("dvs", MeshShape{2, 2, 1});
  expect_tp_trajectory("csnn", MeshShape{2, 2, 1}, "adam", 0.0, 0.05);
}

}  // namespace
}  // namespace sm::test
