// test_parallel_pipeline.cpp — pipeline parallelism (parallel/pipeline/pp_runtime.h through the Layout)
// reproduces the single-rank trajectory: fp64, synced batch norm, 20 steps, losses within 1e-9
// relative and every parameter a rank holds equal to the one-rank run's. The reference is one
// rank running the SAME microbatches with gradient accumulation (reference_run with accum = M):
// batch-norm statistics are per microbatch under pp. Cases by world size:
//   np 2: pp 2 × {gpipe, 1f1b, interleaved v2, zero_bubble v2} (tiny VGG), the CSNN and a small
//         Spikformer with 1f1b, dropout + clipping, a user-written schedule file;
//   np 4: pp 4 × every schedule (an 8-unit VGG; v2 where needed), dp 2 × pp 2 with ZeRO-1 and
//         clipping, tp 2 × pp 2;
//   np 8: dp 2 × tp 2 × pp 2 (run by `make test` with --gtest_filter=PipelineParallel3D.*).
// After the steps, every layer's firing rate and an evaluation through the stages equal the
// one-rank run's.
// Also: the runtime's traffic — spike activations at 1 bit per element, gradients in full.
// Transfer paths (parallel/pipeline/pp_transfer.h): on the CPU `auto` keeps the staged path (MPI tags on
// the pp comm) and `channels` runs the one-way channel comms with host buffers over MPI — the
// plumbing of the NCCL path — giving the staged trajectory bit for bit for every schedule (np 2,
// np 4, dp 2 x pp 2); a schedule file whose receives leave channel order is refused under
// `channels` naming the channel and message, and runs staged under `auto`. On GPUs (*Gpu*):
// ranks sharing a GPU keep the staged path (device spikes packed on the GPU, only their bytes
// staged); ranks with distinct GPUs take nccl-channels (device buffers, nothing staged; the
// every-schedule test needing them is *MultiGpu*), and both equal the CPU run and each other.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/pipeline/pp_runtime.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"
#include "spikemesh/parallel/replica_check.h"
#include "spikemesh/parallel/tp_plan.h"
#include "spikemesh/train/memopt_search.h"
#include "test_parallel_util.h"

namespace sm::test {
namespace {

constexpr int kSteps = 20;
constexpr int64_t kGlobal = 8;

struct PpCase {
  std::string which = "dvs";
  MeshShape shape;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  int micro = 4;
  std::string optim = "adam";
  double dropout = 0.0, clip = 0.0;
  std::string sharding = "none";
  std::string layout_text;   // "": measured
  std::string schedule_file;
  DType dt = DType::F64;
  Device dev = Device::cpu();
  double tol = 1e-9;
  std::string transport = "auto";  // pp_transfer.h: auto | staged | channels
  int memopt = 0;                  // --memopt-level
  double memopt_ratio = 1.0;       // --pp-memopt-stage-budget-ratio
  int backward_pieces = 1;         // > 1: memopt's segments in that many sample pieces, backward only
  int chain_pieces = 1;            // > 1: consecutive units of a chunk chained in that many sample pieces
};

struct PpRun {
  Trajectory tr;  // losses: mean over the global batch; params: held here (matching order)
  std::vector<double> expected_params;
  int replica_mismatch_step = -1;
  PpTraffic traffic;
  std::vector<bool> spikes;  // per logical stage boundary
  std::string path;          // the transfer path the runtime chose
  std::vector<int> memopt_stages;
  int checkpointed_units = 0;  // on this rank
  int search_trials = 0;       // memopt levels 2-4
  double pp_group_params = 0;  // numel of the parameters the stages of this pp group hold, summed
  double model_params = 0;     // numel of all the model's parameters
};

PpRun pp_run(const PpCase& c, const Trajectory& ref) {
  auto mesh = Mesh::create(world(), c.shape);
  auto model = build_spec_model(c.which, c.dropout);
  if (c.shape.tp > 1) {
    TpOptions to;
    to.tp = c.shape.tp;
    to.regions_cross_units = false;  // as layout_plan under pipelines
    apply_tp_plan(make_tp_plan(*model, to), mesh->tp().rank());
  }
  Model& m = *model;
  m.finalize(c.dt, c.dev, 7);
  LayoutOptions lo;
  lo.mode = "pp";
  lo.sync_bn = true;
  lo.strategy.sharding = c.sharding;
  lo.pp_schedule = c.schedule;
  lo.pp_virtual_stages = c.virtual_stages;
  lo.pp_microbatches = c.schedule_file.empty() ? c.micro : 0;
  lo.pp_layout = c.layout_text;
  lo.pp_schedule_file = c.schedule_file;
  lo.pp_cost_samples = kGlobal / (c.shape.dp * c.micro);
  lo.pp_transport = c.transport;
  lo.memopt.level = c.memopt;
  lo.memopt.pp_stage_budget_ratio = c.memopt_ratio;
  const int64_t replica_batch = lo.pp_microbatches * lo.pp_cost_samples;  // 0 with a schedule file: its count
  Layout layout(m, mesh.get(), resolved_layout_plan(lo, mesh->shape(), mesh->world_size(), replica_batch, m));
  auto opt = make_optimizer(test_optimizer(c.optim), layout.optimizer_params());
  const int p = layout.groups().data_size(), r = layout.groups().data_rank();
  const int64_t b = kGlobal / (p * c.micro);  // dp rank r takes part k·p + r of microbatch k
  PpRun out;
  if (c.backward_pieces > 1) {
    layout.set_memopt(split_all(layout.stage(), layout.memopt(), c.backward_pieces, SplitAxis::Batch, false));
  }
  if (c.chain_pieces > 1) {
    layout.set_memopt(chain_all(layout.stage(), layout.memopt(), c.chain_pieces));
    EXPECT_FALSE(layout.memopt().chains.empty()) << "rank " << world_rank() << ": no chain was made";
  }
  if (c.memopt >= 2) {  // the search on the first step's batch (collective), as train runs it
    std::vector<MicroBatch> first;
    for (int k = 0; k < c.micro; ++k) first.push_back(on_device(synth_batch(m, 0, (k * p + r) * b, b, c.dt), c.dev));
    Ctx ctx;
    ctx.seed = 11;
    out.search_trials = optimize_memopt(layout, first, ctx).trial_steps;
  }
  for (int s = 0; s < kSteps; ++s) {
    Ctx ctx;
    ctx.seed = 11;
    ctx.step = s;
    std::vector<MicroBatch> micro;
    for (int k = 0; k < c.micro; ++k) micro.push_back(on_device(synth_batch(m, s, (k * p + r) * b, b, c.dt), c.dev));
    StepOptions so;
    so.clip_norm = c.clip;
    const StepResult res = train_step(layout, *opt, micro, ctx, so);
    std::vector<double> v{layout.counts_in_metrics() ? res.loss : 0.0};
    all_reduce_doubles(mesh->world(), v, ReduceOp::Sum);
    out.tr.losses.push_back(v[0] / p);
    Tensor mine = Tensor::empty({1}, DType::I64), all = Tensor::empty({c.shape.dp}, DType::I64);
    mine.data<int64_t>()[0] = static_cast<int64_t>(params_checksum(layout.stage().params()));
    mesh->dp().all_gather(mine, all);  // dp replicas of a stage hold the same bits
    for (int q = 1; q < c.shape.dp; ++q)
      if (all.data<int64_t>()[q] != all.data<int64_t>()[0] && out.replica_mismatch_step < 0) out.replica_mismatch_step = s;
  }
  out.tr.params = held_params(m);
  {  // every parameter on exactly one stage of the pp group (a measured split may leave a stage
     // of parameter-free units, so this rank alone may hold none)
    std::vector<double> n{0.0};
    for (Param* q : m.params()) {
      out.model_params += static_cast<double>(shape_numel(q->shape));
      if (q->value.defined()) n[0] += static_cast<double>(shape_numel(q->shape));
    }
    all_reduce_doubles(mesh->pp(), n, ReduceOp::Sum);
    out.pp_group_params = n[0];
  }
  out.expected_params = matching_part(m.params(), ref.params, true);
  out.tr.firing = firing_over_replicas(layout, &mesh->dp());
  {  // evaluation through the stages (every dp replica the whole batch), counted by the last stage
    Ctx ctx;
    const MicroBatch e = on_device(synth_batch(m, kSteps, 0, kGlobal, c.dt), c.dev);  // [T, kGlobal, ...]
    const StepResult res = eval_step(layout, e.x, e.y, ctx);
    std::vector<double> v{layout.counts_in_metrics() ? res.loss : 0.0,
                          layout.counts_in_metrics() ? static_cast<double>(res.correct) : 0.0};
    all_reduce_doubles(mesh->world(), v, ReduceOp::Sum);
    out.tr.eval_loss = v[0] / p;
    out.tr.eval_correct = static_cast<int64_t>(v[1]) / p;
  }
  out.traffic = layout.pipeline()->traffic();
  out.path = layout.pipeline()->transfer_path();
  out.memopt_stages = layout.memopt_stages();
  for (const auto& u : layout.memopt().units) out.checkpointed_units += u.empty() ? 0 : 1;
  for (int s = 0; s < layout.pipeline()->schedule().logical_stages(); ++s)
    out.spikes.push_back(layout.pipeline()->boundary_is_spikes(s));
  return out;
}

// `run`: where the run is handed back (memopt tests look at its stages).
void expect_pp_trajectory(const PpCase& c, PpRun* run = nullptr) {
  const std::string what = c.which + " " + c.shape.str() + " " + c.schedule + " v" + std::to_string(c.virtual_stages) +
                           (c.memopt ? " memopt " + std::to_string(c.memopt) : "");
  const Trajectory ref = reference_run(c.which, DType::F64, kSteps, kGlobal, test_optimizer(c.optim), c.micro, c.dropout, c.clip);
  const PpRun got = pp_run(c, ref);
  if (run) *run = got;
  ASSERT_EQ(got.tr.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_LE(rel_diff(got.tr.losses[s], ref.losses[s]), c.tol)
        << what << " step " << s << ": " << got.tr.losses[s] << " vs " << ref.losses[s];
  EXPECT_EQ(got.pp_group_params, got.model_params) << what << ": the pp group's stages do not hold every parameter once";
  EXPECT_LE(max_rel_diff(got.tr.params, got.expected_params), c.tol) << what << ": parameters";
  ASSERT_EQ(got.tr.firing.size(), ref.firing.size()) << what << ": layer stats";
  EXPECT_LE(max_rel_diff(got.tr.firing, ref.firing), c.tol) << what << ": firing rates";
  EXPECT_LE(rel_diff(got.tr.eval_loss, ref.eval_loss), c.tol)
      << what << ": evaluation " << got.tr.eval_loss << " vs " << ref.eval_loss;
  EXPECT_EQ(got.tr.eval_correct, ref.eval_correct) << what << ": evaluation";
  EXPECT_EQ(got.replica_mismatch_step, -1) << what << ": dp replicas differed after step " << got.replica_mismatch_step;
}

bool world_is(int n) { return world_size() == n; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Two runs of one case that differ only in how messages travel: the same trajectory (within
// `tol`; 0 = bit for bit: the same arithmetic on the same bytes) and the same message bytes.
void expect_same_run(const PpRun& a, const PpRun& b, const std::string& what, double tol) {
  ASSERT_EQ(a.tr.losses.size(), b.tr.losses.size()) << what;
  for (size_t s = 0; s < a.tr.losses.size(); ++s)
    EXPECT_LE(rel_diff(a.tr.losses[s], b.tr.losses[s]), tol) << what << " step " << s;
  EXPECT_LE(max_rel_diff(a.tr.params, b.tr.params), tol) << what << ": parameters";
  EXPECT_LE(max_rel_diff(a.tr.firing, b.tr.firing), tol) << what << ": firing rates";
  EXPECT_LE(rel_diff(a.tr.eval_loss, b.tr.eval_loss), tol) << what << ": evaluation";
  EXPECT_EQ(a.tr.eval_correct, b.tr.eval_correct) << what << ": evaluation";
  EXPECT_EQ(a.traffic.activation_bytes, b.traffic.activation_bytes) << what;
  EXPECT_EQ(a.traffic.spike_bytes, b.traffic.spike_bytes) << what;
  EXPECT_EQ(a.traffic.gradient_bytes, b.traffic.gradient_bytes) << what;
}

// The staged path (auto on the CPU) and the channel comms with host buffers (channels) give
// the same trajectory bit for bit, and it is the one-rank run's. `c` fixes its --pp-layout
// (a measured split may differ between the two runs).
void expect_channels_equal_staged(PpCase c) {
  const std::string what = c.which + " " + c.shape.str() + " " + c.schedule + " v" + std::to_string(c.virtual_stages);
  const Trajectory ref = reference_run(c.which, DType::F64, kSteps, kGlobal, test_optimizer(c.optim), c.micro);
  c.transport = "auto";
  const PpRun staged = pp_run(c, ref);
  c.transport = "channels";
  const PpRun chan = pp_run(c, ref);
  EXPECT_EQ(staged.path, "staged") << what;
  EXPECT_EQ(chan.path, "mpi-channels") << what;
  expect_same_run(staged, chan, what + " staged vs channels", 0.0);
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_LE(rel_diff(chan.tr.losses[s], ref.losses[s]), c.tol) << what << " step " << s;
  EXPECT_LE(max_rel_diff(chan.tr.params, chan.expected_params), c.tol) << what << ": parameters";
  EXPECT_EQ(chan.traffic.staged_bytes, 0u) << what;  // host tensors: nothing crosses a GPU boundary
  EXPECT_EQ(chan.traffic.direct_messages, 0u) << what;
}

const char* kSchedules[][2] = {{"gpipe", "1"}, {"1f1b", "1"}, {"interleaved", "2"}, {"zero_bubble", "2"}};

// pp 2 running a schedule file `name` (in the scratch directory, written by rank 0) of 2
// microbatches.
PpCase schedule_file_case(const std::string& name, const std::string& text) {
  const std::string path = scratch_dir() + "/" + name;
  if (world_rank() == 0) std::ofstream(path) << text;
  MPI_Barrier(world());
  PpCase c;
  c.shape = MeshShape{1, 1, 2};
  c.micro = 2;
  c.schedule_file = path;
  return c;
}

// One built-in schedule (a kSchedules row) at pp `ranks`; pp 4 runs the 8-unit model with 4
// microbatches (8 with v 2).
PpCase schedule_case(const char* const (&k)[2], int ranks) {
  PpCase c;
  c.shape = MeshShape{1, 1, ranks};
  c.schedule = k[0];
  c.virtual_stages = std::atoi(k[1]);
  if (ranks == 4) {
    c.which = "deep";
    c.micro = c.virtual_stages == 2 ? 8 : 4;
  }
  return c;
}

TEST(PipelineParallel, EverySchedulePp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  for (auto& k : kSchedules) expect_pp_trajectory(schedule_case(k, 2));
}

// memopt level 1 on every stage (ratio 1), every schedule with its microbatch slots in flight,
// zero-bubble's B/W split included: the one-rank trajectory.
TEST(PipelineParallel, MemoptEverySchedulePp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  for (auto& k : kSchedules) {
    PpCase c = schedule_case(k, 2);
    c.memopt = 1;
    PpRun got;
    expect_pp_trajectory(c, &got);
    EXPECT_GT(got.checkpointed_units, 0) << k[0] << ": nothing checkpointed on rank " << world_rank();
  }
  PpCase c;  // the spikformer's residual blocks under gpipe
  c.shape = MeshShape{1, 1, 2};
  c.which = "sformer";
  c.schedule = "gpipe";
  c.layout_text = "1|2";
  c.memopt = 1;
  expect_pp_trajectory(c);
}

// Sample pieces in backward only on both stages, under 1F1B with its microbatches in flight
// and zero-bubble's B/W split: the one-rank trajectory.
TEST(PipelineParallel, MemoptBackwardPiecesPp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  for (int k : {1, 3}) {
    PpCase c = schedule_case(kSchedules[k], 2);
    c.memopt = 1;
    c.backward_pieces = 2;
    expect_pp_trajectory(c);
  }
}

// Piece chains on both stages under 1F1B (microbatches in flight: each slot's kept inputs)
// and zero-bubble (the chain's units have no W left; their gradient hooks fire with W).
TEST(PipelineParallel, MemoptPieceChainsPp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  for (int k : {1, 3}) {
    PpCase c = schedule_case(kSchedules[k], 2);
    c.which = "deep";  // two or more units in every chunk of every stage
    c.memopt = 1;
    c.chain_pieces = 2;
    expect_pp_trajectory(c);
  }
}

// The searches (levels 3 and 4) under pp: every rank runs the same trial steps whatever its
// stage decides, and the trajectory stays the one-rank one (zero-bubble's B/W split included).
TEST(PipelineParallel, MemoptSearchesPp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  for (int level : {3, 4}) {
    PpCase c = schedule_case(kSchedules[level == 3 ? 1 : 3], 2);  // 1f1b; zero_bubble v2
    c.memopt = level;
    PpRun got;
    expect_pp_trajectory(c, &got);
    EXPECT_GE(got.search_trials, 1) << "level " << level << ": the measured step";
    EXPECT_LE(got.search_trials, 2) << "level " << level << ": and at most one predicted configuration";
  }
}

// --pp-memopt-stage-budget-ratio 0.5 on 2 stages: memopt on the one keeping more activation
// bytes (the first: its conv runs at full resolution), level 0 on the other; same trajectory.
TEST(PipelineParallel, MemoptOnHalfTheStagesPp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  PpCase c;
  c.shape = MeshShape{1, 1, 2};
  c.memopt = 1;
  c.memopt_ratio = 0.5;
  c.layout_text = "2|2";
  PpRun got;
  expect_pp_trajectory(c, &got);
  EXPECT_EQ(got.memopt_stages, std::vector<int>{0});
  EXPECT_EQ(got.checkpointed_units > 0, world_rank() == 0) << "rank " << world_rank();
}

TEST(PipelineParallel, CsnnAndSpikformerPp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  PpCase c;
  c.shape = MeshShape{1, 1, 2};
  c.which = "csnn";
  expect_pp_trajectory(c);
  c.which = "sformer";
  c.schedule = "gpipe";
  c.layout_text = "1|2";  // the residual block and the head on stage 1
  expect_pp_trajectory(c);
}

TEST(PipelineParallel, DropoutClippingAndSgdPp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  PpCase c;
  c.shape = MeshShape{1, 1, 2};
  c.optim = "sgd";
  c.dropout = 0.25;
  c.clip = 0.05;
  c.schedule = "zero_bubble";
  c.virtual_stages = 2;
  expect_pp_trajectory(c);
}

// A user-written schedule (gpipe order written out by hand with 2 microbatches) runs after
// validation and gives the same trajectory.
TEST(PipelineParallel, UserScheduleFileFp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  expect_pp_trajectory(schedule_file_case("user.pp",
                                          "# rank 0 then rank 1\n"
                                          "0F0 0SF0 0F1 0SF1 0RB0 0BW0 0RB1 0BW1\n"
                                          "1RF0 1F0 1RF1 1F1 1BW0 1SB0 1BW1 1SB1\n"));
}

// Spikes leave a conv-BN-LIF stage at 1 bit per element; gradients travel in full.
TEST(PipelineParallel, SpikesTravelAsBits) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  PpCase c;
  c.shape = MeshShape{1, 1, 2};
  c.layout_text = "1|3";  // stage 0 = features.0 (conv, BN, LIF): its output is spikes
  const Trajectory ref = reference_run(c.which, DType::F64, kSteps, kGlobal, test_optimizer(c.optim), c.micro);
  const PpRun got = pp_run(c, ref);
  ASSERT_EQ(got.spikes.size(), 2u);
  EXPECT_TRUE(got.spikes[0]);
  if (world_rank() == 0) {
    // every step sends 4 microbatches of [T 3, 2, 8, 16, 16] spikes
    const uint64_t elements = static_cast<uint64_t>(kSteps) * 4 * 3 * 2 * 8 * 16 * 16;
    EXPECT_EQ(got.traffic.activation_elements, elements);
    EXPECT_EQ(got.traffic.spike_elements, elements);
    EXPECT_EQ(got.traffic.activation_bytes, elements / 8);
    EXPECT_EQ(got.traffic.gradient_bytes, 0u);
  } else {
    EXPECT_EQ(got.traffic.activation_bytes, 0u);  // the last stage sends gradients only
    EXPECT_EQ(got.traffic.gradient_bytes, static_cast<uint64_t>(kSteps) * 4 * 3 * 2 * 8 * 16 * 16 * sizeof(double));
  }
}

TEST(PipelineParallel, ChannelsEqualStagedEverySchedulePp2Fp64) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  for (auto& k : kSchedules) {
    PpCase c = schedule_case(k, 2);
    c.layout_text = c.virtual_stages == 1 ? "1|3" : "1|1|1|1";  // spikes leave stage 0 as bits
    expect_channels_equal_staged(c);
  }
}

// Receives posted out of channel order (valid with MPI tags): refused under `channels`, naming
// the channel and the first mismatching message; `auto` runs it on the staged path.
TEST(PipelineParallel, ChannelsRefuseAScheduleOutOfChannelOrder) {
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  PpCase c = schedule_file_case("unordered.pp",
                                 "0F0 0SF0 0F1 0SF1 0RB0 0BW0 0RB1 0BW1\n"
                                 "1RF1 1RF0 1F0 1F1 1BW0 1SB0 1BW1 1SB1\n");
  c.transport = "channels";
  const Trajectory ref = reference_run(c.which, DType::F64, kSteps, kGlobal, test_optimizer(c.optim), c.micro);
  const std::string err = error_of([&] { pp_run(c, ref); });
  EXPECT_NE(err.find("channel rank 0 -> rank 1 (activations): message 1 is sent as 0SF0 (stage 0 -> 1, microbatch 0) "
                     "but received as 1RF1 (stage 0 -> 1, microbatch 1)"),
            std::string::npos)
      << err;
  c.transport = "auto";
  expect_pp_trajectory(c);
  EXPECT_EQ(pp_run(c, ref).path, "staged");
}

TEST(PipelineParallel, EverySchedulePp4Fp64) {
  if (!world_is(4)) GTEST_SKIP() << "needs 4 ranks";
  for (auto& k : kSchedules) expect_pp_trajectory(schedule_case(k, 4));
  PpCase c = schedule_case(kSchedules[1], 4);  // 1f1b with stage 2 the max-pool unit f.4 alone: no parameters
  c.layout_text = "3|1|1|3";                   // (a measured split may choose this on a noisy machine)
  c.clip = 0.05;                               // the global norm over a stage with no gradients
  expect_pp_trajectory(c);
}

TEST(PipelineParallel, ChannelsEqualStagedEverySchedulePp4Fp64) {
  if (!world_is(4)) GTEST_SKIP() << "needs 4 ranks";
  for (auto& k : kSchedules) {  // a fixed split: the measured one may differ between the two runs
    PpCase c = schedule_case(k, 4);
    c.layout_text = c.virtual_stages == 1 ? "2|2|2|2" : "1|1|1|1|1|1|1|1";
    expect_channels_equal_staged(c);
  }
  PpCase c;  // two pp groups: each splits its own channels
  c.shape = MeshShape{2, 1, 2};
  c.schedule = "interleaved";
  c.virtual_stages = 2;
  c.layout_text = "1|1|1|1";
  expect_channels_equal_staged(c);
}

TEST(PipelineParallel, DpTimesPpWithZeroAndClippingFp64) {
  if (!world_is(4)) GTEST_SKIP() << "needs 4 ranks";
  PpCase c;
  c.shape = MeshShape{2, 1, 2};
  c.micro = 2;
  c.sharding = "zero";
  c.clip = 0.05;
  expect_pp_trajectory(c);
  c.sharding = "none";
  c.schedule = "interleaved";
  c.virtual_stages = 2;
  c.micro = 4;
  c.clip = 0;
  expect_pp_trajectory(c);
}

TEST(PipelineParallel, TpTimesPpFp64) {
  if (!world_is(4)) GTEST_SKIP() << "needs 4 ranks";
  PpCase c;
  c.shape = MeshShape{1, 2, 2};
  expect_pp_trajectory(c);
  c.which = "sformer";
  c.layout_text = "1|2";
  expect_pp_trajectory(c);
}

TEST(PipelineParallel3D, DpTpPpFp64) {
  if (!world_is(8)) GTEST_SKIP() << "needs 8 ranks";
  PpCase c;
  c.shape = MeshShape{2, 2, 2};
  c.micro = 2;
  c.clip = 0.05;
  expect_pp_trajectory(c);
  c.schedule = "zero_bubble";
  c.virtual_stages = 2;
  c.micro = 4;
  c.clip = 0;
  expect_pp_trajectory(c);
}

// pp 2 on device buffers against the one-rank CPU run in f32 (1e-3): losses, the parameters
// each rank holds, firing rates and an evaluation through the stages. Both boundary kinds run:
// "1|3" sends spikes bit-packed, "3|1" a pooled f32 activation through pinned host buffers.
TEST(PipelineParallelGpu, Pp2OnTheDeviceEqualsTheCpuRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  PpCase c;
  c.shape = MeshShape{1, 1, 2};
  c.dt = DType::F32;
  c.dev = test_gpu();
  c.tol = 1e-3;
  const Trajectory ref = reference_run(c.which, DType::F32, kSteps, kGlobal, test_optimizer(c.optim), c.micro);
  for (const char* layout : {"1|3", "3|1"}) {
    c.layout_text = layout;
    const PpRun got = pp_run(c, ref);
    for (size_t s = 0; s < ref.losses.size(); ++s)
      EXPECT_LE(rel_diff(got.tr.losses[s], ref.losses[s]), c.tol) << layout << " step " << s;
    EXPECT_LE(max_rel_diff(got.tr.params, got.expected_params), c.tol) << layout << ": parameters";
    EXPECT_LE(max_rel_diff(got.tr.firing, ref.firing), c.tol) << layout << ": firing rates";
    EXPECT_LE(rel_diff(got.tr.eval_loss, ref.eval_loss), c.tol) << layout << ": evaluation";
  }
}

// Spikes leaving a stage on a GPU are packed there: the staged path moves ceil(n/8) bytes per
// message through host memory (sent and received), the direct path none.
void expect_gpu_spike_traffic(const PpRun& got, const std::string& what) {
  const uint64_t staged = got.path == "nccl-channels" ? 0 : 1;
  if (world_rank() == 0) {  // sends the spikes, receives the gradients ([T 3, 2, 8, 16, 16] f32)
    EXPECT_GT(got.traffic.spike_bytes, 0u) << what;
    EXPECT_EQ(got.traffic.staged_bytes, staged * (got.traffic.spike_bytes + got.traffic.activation_elements * 4)) << what;
  } else {  // sends the gradients, receives the spikes (as many elements, 1 bit each)
    EXPECT_EQ(got.traffic.staged_bytes, staged * (got.traffic.gradient_bytes + got.traffic.gradient_bytes / 4 / 8)) << what;
  }
  EXPECT_EQ(got.traffic.direct_messages > 0, got.path == "nccl-channels") << what;
}

// pp 2 with the ranks on whatever GPUs the machine has. Sharing one GPU: `auto` keeps the
// staged path (NCCL never sees two ranks on one GPU) and `channels` runs the channel comms
// with host buffers; distinct GPUs: `auto` takes nccl-channels. Every path equals the CPU run
// (f32, 1e-3) and the forced staged path (1e-5: the same kernels on the same bytes).
TEST(PipelineParallelGpu, Pp2PathsPerGpuPlacementEqualTheStagedAndCpuRuns) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  const bool distinct = cuda_device_count() >= world_size();  // test_gpu(): world rank % visible
  PpCase c;
  c.shape = MeshShape{1, 1, 2};
  c.dt = DType::F32;
  c.dev = test_gpu();
  c.tol = 1e-3;
  c.layout_text = "1|3";  // spikes leave stage 0
  const Trajectory ref = reference_run(c.which, DType::F32, kSteps, kGlobal, test_optimizer(c.optim), c.micro);
  c.transport = "staged";
  const PpRun staged = pp_run(c, ref);
  EXPECT_EQ(staged.path, "staged");
  expect_gpu_spike_traffic(staged, "staged");
  for (const char* transport : {"auto", "channels"}) {
    c.transport = transport;
    const PpRun got = pp_run(c, ref);
    const std::string want = distinct ? "nccl-channels" : std::string(transport) == "auto" ? "staged" : "mpi-channels";
    EXPECT_EQ(got.path, want) << transport << (distinct ? " on distinct GPUs" : " on a shared GPU");
    expect_gpu_spike_traffic(got, transport);
    expect_same_run(staged, got, std::string(transport) + " vs staged", 1e-5);
    for (size_t s = 0; s < ref.losses.size(); ++s)
      EXPECT_LE(rel_diff(got.tr.losses[s], ref.losses[s]), c.tol) << transport << " step " << s;
    EXPECT_LE(max_rel_diff(got.tr.params, got.expected_params), c.tol) << transport << ": parameters";
    EXPECT_LE(rel_diff(got.tr.eval_loss, ref.eval_loss), c.tol) << transport << ": evaluation";
  }
}

// One GPU per rank: every schedule on nccl-channels (device buffers, nothing staged) equals the
// CPU run (f32, 1e-3), both boundary kinds (spikes as packed device bits, a pooled f32 tensor).
// Named *MultiGpu*: scripts/gpu_check.sh leaves such tests out on a one-GPU machine (where a
// skipped *Gpu* test counts as a failure).
TEST(PipelineParallelMultiGpu, DistinctGpusRunEveryScheduleOnNcclChannels) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  if (!world_is(2)) GTEST_SKIP() << "needs 2 ranks";
  if (cuda_device_count() < world_size()) GTEST_SKIP() << "needs one GPU per rank (NCCL is not used on a shared GPU)";
  for (auto& k : kSchedules) {
    PpCase c = schedule_case(k, 2);
    c.dt = DType::F32;
    c.dev = test_gpu();
    c.tol = 1e-3;
    c.layout_text = c.virtual_stages == 1 ? "3|1" : "1|1|1|1";
    const Trajectory ref = reference_run(c.which, DType::F32, kSteps, kGlobal, test_optimizer(c.optim), c.micro);
    const PpRun got = pp_run(c, ref);
    EXPECT_EQ(got.path, "nccl-channels") << k[0];
    EXPECT_EQ(got.traffic.staged_bytes, 0u) << k[0];
    for (size_t s = 0; s < ref.losses.size(); ++s)
      EXPECT_LE(rel_diff(got.tr.losses[s], ref.losses[s]), c.tol) << k[0] << " step " << s;
    EXPECT_LE(max_rel_diff(got.tr.params, got.expected_params), c.tol) << k[0] << ": parameters";
    EXPECT_LE(rel_diff(got.tr.eval_loss, ref.eval_loss), c.tol) << k[0] << ": evaluation";
  }
}

}  // namespace
}  // namespace sm::test
