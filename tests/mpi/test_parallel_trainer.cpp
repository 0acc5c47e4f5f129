// test_parallel_trainer.cpp — `spikemesh train` with a mesh (run_training collective over the
// world) against the one-rank trainer on tiny Fashion-MNIST-shaped files: dp reproduces the
// single-rank run (metrics written by rank 0, comm columns present), same-layout resume is
// bitwise exact for dp, ZeRO and FSDP, a stop request on one rank stops every rank at the
// same step with a checkpoint, checkpoints reshard across dp sizes (4 -> 2 -> 1), and bad
// configurations give every rank the same Input error without a hang or a written file.
#include <gtest/gtest.h>

#include <csignal>
#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "spikemesh/comm/comm.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/error.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/train_plan.h"
#include "spikemesh/train/trainer.h"
#include "test_parallel_util.h"

namespace sm::test {
namespace {

std::string dataset_path() { return scratch_dir() + "/fm32.h5"; }

// Fashion-MNIST-shaped u8 dataset (class c brightens row band c, plus noise), 32 train and
// 12 test samples, written by rank 0. Collective: every test calls it first on every rank.
std::string dataset() {
  const int64_t train = 32, test = 12;
  const std::string path = dataset_path();
  if (world_rank() == 0 && access(path.c_str(), F_OK) != 0) {
    DatasetInfo info;
    info.num_classes = 10;
    info.layout = "NCHW";
    info.encoding = "image";
    info.source = "test_parallel_trainer";
    info.x_scale = 1.0 / 255.0;
    info.sample_shape = {1, 28, 28};
    info.stored = DType::U8;
    info.train_size = train;
    info.test_size = test;
    H5DatasetWriter w(path, info);
    uint32_t state = 4242;
    auto rnd = [&state] {
      state = state * 1664525u + 1013904223u;
      return state >> 24;
    };
    for (Split s : {Split::Train, Split::Test}) {
      const int64_t n = s == Split::Train ? train : test;
      Tensor x = Tensor::zeros({n, 1, 28, 28}, DType::U8), y = Tensor::zeros({n}, DType::I64);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t c = static_cast<int64_t>(rnd() % 10);
        y.data<int64_t>()[i] = c;
        uint8_t* px = x.data<uint8_t>() + i * 784;
        for (int k = 0; k < 784; ++k) px[k] = static_cast<uint8_t>(rnd() / 2);
        for (int r = 2 * static_cast<int>(c) + 4; r < 2 * static_cast<int>(c) + 7; ++r)
          for (int col = 0; col < 28; ++col) px[r * 28 + col] = 250;
      }
      w.write(s, 0, x, y);
    }
    w.commit();
  }
  MPI_Barrier(world());
  return path;
}

struct TrainRun {
  TrainConfig cfg;
  TrainConfigResolver resolver{cfg};
  explicit TrainRun(const std::vector<std::pair<std::string, std::string>>& kv) {
    std::vector<std::pair<std::string, std::string>> base = {
        {"model", "fmnist_csnn"}, {"var", "C=4"},          {"data", dataset_path()},      {"global-batch-size", "8"},
        {"lr", "0.01"},           {"output", scratch_dir()}, {"log-every", "100"},   {"keep", "10"},
        {"precision", "fp64"},    {"sync-bn", "true"},       {"seed", "5"}};
    for (auto& [k, v] : base) resolver.set(k, v, "test");
    for (auto& [k, v] : kv) resolver.set(k, v, "test");
    validate_train_config(cfg);
  }
  TrainSummary go(Mesh* mesh) {
    return run_training(cfg, resolver.to_toml(), mesh,
                        training_layout_plan(cfg, mesh ? mesh->shape() : MeshShape{}, mesh ? mesh->world_size() : 1));
  }
  std::string dir() const { return cfg.output + "/" + cfg.run_name; }
};

std::unique_ptr<Mesh> world_mesh() {
  MeshShape s;
  s.dp = world_size();
  return Mesh::create(world(), s);
}

std::vector<double> column(const std::string& run_dir, const std::string& name) {
  H5File f = H5File::open(run_dir + "/metrics.h5");
  Tensor t = f.read(name, DType::F64);
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

// Every Input error message of `f` (or "" when none), checked equal over the world.
std::string input_error_of(const std::function<void()>& f) {
  std::string msg;
  try {
    f();
  } catch (const Error& e) {
    msg = e.kind() == ErrorKind::Input ? e.what() : std::string("NOT AN INPUT ERROR: ") + e.what();
  }
  Comm w(world(), "check");
  EXPECT_NO_THROW(check_same_text(w, msg, "the error message")) << msg;
  return msg;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

void clear(const std::vector<std::string>& runs) {
  if (world_rank() == 0)
    for (auto& r : runs) std::system(("rm -rf '" + scratch_dir() + "/" + r + "'").c_str());
  MPI_Barrier(world());
}

bool fits() { return 8 % world_size() == 0; }

// Removes the scratch directory of the parallel tests after the last test (every rank takes
// part: the barrier keeps rank 0 from deleting files another rank still reads).
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string dir = scratch_dir();
    MPI_Barrier(world());
    if (world_rank() == 0) std::system(("rm -rf '" + dir + "'").c_str());
  }
};
::testing::Environment* const g_cleanup = ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

}  // namespace

TEST(ParallelTrainer, DpRunMatchesTheSingleRankRun) {
  dataset();
  if (!fits()) GTEST_SKIP();
  clear({"pt_single", "pt_dp"});
  std::vector<std::pair<std::string, std::string>> common = {{"epochs", "2"}, {"eval-batch-size", "5"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> e) {
    e.insert(e.begin(), common.begin(), common.end());
    return e;
  };
  double single_acc = -1;
  if (world_rank() == 0) {
    TrainRun single(with({{"run-name", "pt_single"}}));
    single_acc = single.go(nullptr).final_test_accuracy;
  }
  MPI_Bcast(&single_acc, 1, MPI_DOUBLE, 0, world());
  auto mesh = world_mesh();
  TrainRun dp(with({{"run-name", "pt_dp"}, {"distributed-mode", "dp"}, {"bucket-mb", "0.01"}, {"check-replicas", "1"}}));
  TrainSummary s = dp.go(mesh.get());
  EXPECT_EQ(s.steps, 8);
  EXPECT_EQ(s.final_test_accuracy, single_acc) << "every rank reports the all-reduced evaluation";
  if (world_rank() == 0) {
    const std::string a = scratch_dir() + "/pt_single", b = dp.dir();
    std::vector<double> la = column(a, "/step/loss"), lb = column(b, "/step/loss");
    ASSERT_EQ(la.size(), 8u);
    ASSERT_EQ(lb.size(), 8u);
    for (size_t i = 0; i < la.size(); ++i) EXPECT_LE(rel_diff(la[i], lb[i]), 1e-9) << "step " << i + 1;
    EXPECT_EQ(column(a, "/step/accuracy"), column(b, "/step/accuracy"));
    EXPECT_EQ(column(a, "/eval/accuracy"), column(b, "/eval/accuracy"));
    std::vector<double> ea = column(a, "/eval/loss"), eb = column(b, "/eval/loss");
    for (size_t i = 0; i < ea.size(); ++i) EXPECT_LE(rel_diff(ea[i], eb[i]), 1e-9);
    EXPECT_LE(max_rel_diff(column(b, "/step/firing_rate"), column(a, "/step/firing_rate")), 1e-9);
    EXPECT_LE(max_rel_diff(column(b, "/eval/firing_rate"), column(a, "/eval/firing_rate")), 1e-9);
    for (double v : column(b, "/step/comm_mb")) EXPECT_GT(v, 0);
    for (double v : column(b, "/step/comm_ms")) EXPECT_GE(v, 0);
  }
}

TEST(ParallelTrainer, SameLayoutResumeIsBitwiseExact) {
  dataset();
  if (!fits()) GTEST_SKIP();
  auto mesh = world_mesh();
  for (const char* layout : {"dp", "zero", "fsdp"}) {
    const std::string L(layout);
    clear({"rs_full_" + L, "rs_part_" + L});
    std::vector<std::pair<std::string, std::string>> common = {
        {"epochs", "3"},          {"ckpt-every", "3"},        {"optimizer", "sgd"},
        {"nesterov", "true"},     {"lr-schedule", "step"},    {"lr-step-size", "4"},
        {"warmup-steps", "2"}};  // (cosine's horizon would depend on --max-steps)
    if (L == "fsdp") common.push_back({"distributed-mode", "fsdp"});
    else common.push_back({"distributed-mode", "dp"});
    if (L == "zero") common.push_back({"optimizer-sharding", "zero"});
    if (L == "dp") common.push_back({"sync-bn", "false"});  // rank 0's BN statistics everywhere
    auto with = [&](std::vector<std::pair<std::string, std::string>> e) {
      e.insert(e.begin(), common.begin(), common.end());
      return e;
    };
    TrainRun full(with({{"run-name", "rs_full_" + L}}));
    TrainSummary sf = full.go(mesh.get());
    ASSERT_EQ(sf.steps, 12);
    TrainRun part(with({{"run-name", "rs_part_" + L}, {"max-steps", "5"}}));
    EXPECT_EQ(part.go(mesh.get()).steps, 5);
    TrainRun rest(with({{"run-name", "rs_part_" + L}, {"resume", "auto"}}));
    TrainSummary sr = rest.go(mesh.get());
    EXPECT_EQ(sr.steps, 12);
    EXPECT_EQ(sr.final_test_accuracy, sf.final_test_accuracy) << L;
    if (world_rank() == 0) {
      EXPECT_TRUE(same_bits(column(full.dir(), "/step/loss"), column(rest.dir(), "/step/loss"))) << L;
      // The interrupted run also evaluated at its stop (step 5): compare the full run's rows.
      std::vector<double> fs = column(full.dir(), "/eval/step"), rs = column(rest.dir(), "/eval/step");
      std::vector<double> fl = column(full.dir(), "/eval/loss"), rl = column(rest.dir(), "/eval/loss"), picked;
      for (double want : fs)
        for (size_t i = 0; i < rs.size(); ++i)
          if (rs[i] == want) {
            picked.push_back(rl[i]);
            break;
          }
      EXPECT_TRUE(same_bits(fl, picked)) << L;
      // The final checkpoints hold the same state, byte for byte.
      H5File fa = H5File::open(sf.last_checkpoint), fb = H5File::open(sr.last_checkpoint);
      int compared = 0;
      for (const std::string& n : fa.open_group("/params").list_datasets()) {
        Tensor ta = fa.read("/params/" + n), tb = fb.read("/params/" + n);
        EXPECT_TRUE(ta.nbytes() == tb.nbytes() && std::memcmp(ta.raw(), tb.raw(), ta.nbytes()) == 0) << L << " " << n;
        ++compared;
      }
      EXPECT_GE(compared, 4);
    }
  }
}

TEST(ParallelTrainer, AStopOnOneRankStopsEveryRankAtTheSameStep) {
  dataset();
  if (!fits()) GTEST_SKIP();
  clear({"stop_full", "stop_part"});
  auto mesh = world_mesh();
  std::vector<std::pair<std::string, std::string>> common = {{"epochs", "2"}, {"distributed-mode", "fsdp"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> e) {
    e.insert(e.begin(), common.begin(), common.end());
    return e;
  };
  clear_stop_request();
  TrainRun full(with({{"run-name", "stop_full"}}));
  ASSERT_EQ(full.go(mesh.get()).steps, 8);
  TrainRun part(with({{"run-name", "stop_part"}}));
  if (world_rank() == world_size() - 1) {  // a real signal to one rank
    install_stop_signal_handlers();
    std::raise(SIGUSR1);
  }
  TrainSummary s1 = part.go(mesh.get());
  clear_stop_request();
  EXPECT_TRUE(s1.interrupted);
  EXPECT_EQ(s1.steps, 1);
  EXPECT_EQ(s1.last_checkpoint, checkpoint_path(part.dir(), 1));
  TrainRun again(with({{"run-name", "stop_part"}, {"resume", "auto"}}));
  TrainSummary s2 = again.go(mesh.get());
  EXPECT_FALSE(s2.interrupted);
  EXPECT_EQ(s2.steps, 8);
  if (world_rank() == 0) {
    EXPECT_TRUE(same_bits(column(full.dir(), "/step/loss"), column(again.dir(), "/step/loss")));
  }
}

// dp = world (ZeRO) -> dp = 2 (FSDP, on a sub-communicator) -> one rank, each resuming the
// previous run's checkpoint, against one uninterrupted single-rank run.
TEST(ParallelTrainer, CheckpointsReshardAcrossDpSizes) {
  dataset();
  if (!fits()) GTEST_SKIP();
  clear({"rh_ref", "rh_a", "rh_b", "rh_c"});
  std::vector<std::pair<std::string, std::string>> common = {{"epochs", "3"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> e) {
    e.insert(e.begin(), common.begin(), common.end());
    return e;
  };
  if (world_rank() == 0) TrainRun(with({{"run-name", "rh_ref"}, {"max-steps", "9"}})).go(nullptr);
  auto mesh = world_mesh();
  TrainRun a(with({{"run-name", "rh_a"}, {"max-steps", "3"}, {"distributed-mode", "dp"}, {"optimizer-sharding", "zero"}}));
  TrainSummary sa = a.go(mesh.get());
  ASSERT_EQ(sa.steps, 3);
  std::string from_b = sa.last_checkpoint;
  int last_b = 3;
  if (world_size() > 2) {  // dp 2 on ranks 0 and 1
    MPI_Comm sub;
    MPI_Comm_split(world(), world_rank() < 2 ? 0 : MPI_UNDEFINED, world_rank(), &sub);
    if (sub != MPI_COMM_NULL) {
      MeshShape s2;
      s2.dp = 2;
      auto m2 = Mesh::create(sub, s2);
      TrainRun b(with({{"run-name", "rh_b"}, {"max-steps", "6"}, {"distributed-mode", "fsdp"}, {"resume", sa.last_checkpoint}}));
      TrainSummary sb = b.go(m2.get());
      EXPECT_EQ(sb.steps, 6);
      from_b = sb.last_checkpoint;
      m2.reset();
      MPI_Comm_free(&sub);
    }
    last_b = 6;
  }
  if (world_rank() == 0) {
    TrainRun c(with({{"run-name", "rh_c"}, {"max-steps", "9"}, {"resume", from_b}}));
    EXPECT_EQ(c.go(nullptr).steps, 9);
    std::vector<double> ref = column(scratch_dir() + "/rh_ref", "/step/loss");
    std::vector<double> got = column(a.dir(), "/step/loss");
    if (last_b == 6) {
      std::vector<double> b = column(scratch_dir() + "/rh_b", "/step/loss");
      got.insert(got.end(), b.begin(), b.end());
    }
    std::vector<double> cl = column(c.dir(), "/step/loss");
    got.insert(got.end(), cl.begin(), cl.end());
    ASSERT_EQ(got.size(), 9u);
    ASSERT_EQ(ref.size(), 9u);
    for (size_t i = 0; i < 9; ++i) EXPECT_LE(rel_diff(got[i], ref[i]), 1e-9) << "step " << i + 1;
    EXPECT_NE(ref.front(), ref.back());
  }
  MPI_Barrier(world());
}

// Tensor parallelism: checkpoints hold full logical tensors (tp shards written as
// hyperslabs, whole tensors by tp rank 0), so a run saved at (dp W/2, tp 2) continues at
// (1, tp W), at (dp W, 1) and on one rank, on the uninterrupted one-rank trajectory (fp64,
// sync-bn; BN running statistics and Adam moments split over tp included).
TEST(ParallelTrainer, TensorParallelCheckpointsReshard) {
  dataset();
  if (!fits() || world_size() < 2) GTEST_SKIP();
  clear({"tr_ref", "tr_a", "tr_b", "tr_c", "tr_d"});
  std::vector<std::pair<std::string, std::string>> common = {{"epochs", "3"}};
  auto with = [&](std::vector<std::pair<std::string, std::string>> e) {
    e.insert(e.begin(), common.begin(), common.end());
    return e;
  };
  if (world_rank() == 0) TrainRun(with({{"run-name", "tr_ref"}, {"max-steps", "9"}})).go(nullptr);
  MeshShape sa;
  sa.dp = world_size() / 2;
  sa.tp = 2;
  auto mesh_a = Mesh::create(world(), sa);
  TrainRun a(with({{"run-name", "tr_a"}, {"max-steps", "3"}, {"distributed-mode", "tp"}}));
  TrainSummary ra = a.go(mesh_a.get());
  ASSERT_EQ(ra.steps, 3);
  MeshShape sb;
  sb.tp = world_size();
  auto mesh_b = Mesh::create(world(), sb);
  TrainRun b(with({{"run-name", "tr_b"}, {"max-steps", "6"}, {"distributed-mode", "tp"}, {"resume", ra.last_checkpoint}}));
  TrainSummary rb = b.go(mesh_b.get());
  EXPECT_EQ(rb.steps, 6);
  auto mesh_d = world_mesh();
  TrainRun d(with({{"run-name", "tr_d"}, {"max-steps", "9"}, {"distributed-mode", "dp"}, {"resume", ra.last_checkpoint}}));
  EXPECT_EQ(d.go(mesh_d.get()).steps, 9);
  if (world_rank() == 0) {
    TrainRun c(with({{"run-name", "tr_c"}, {"max-steps", "9"}, {"resume", rb.last_checkpoint}}));
    EXPECT_EQ(c.go(nullptr).steps, 9);
    const std::vector<double> ref = column(scratch_dir() + "/tr_ref", "/step/loss");
    std::vector<double> abc = column(a.dir(), "/step/loss"), ad = abc;
    for (const std::string& r : {"tr_b", "tr_c"}) {
      const std::vector<double> more = column(scratch_dir() + "/" + r, "/step/loss");
      abc.insert(abc.end(), more.begin(), more.end());
    }
    const std::vector<double> dl = column(d.dir(), "/step/loss");
    ad.insert(ad.end(), dl.begin(), dl.end());
    ASSERT_EQ(ref.size(), 9u);
    ASSERT_EQ(abc.size(), 9u);
    ASSERT_EQ(ad.size(), 9u);
    for (size_t i = 0; i < 9; ++i) {
      EXPECT_LE(rel_diff(abc[i], ref[i]), 1e-9) << "tp 2 -> tp " << world_size() << " -> 1, step " << i + 1;
      EXPECT_LE(rel_diff(ad[i], ref[i]), 1e-9) << "tp 2 -> dp " << world_size() << ", step " << i + 1;
    }
    // The checkpoint saved under tp holds every tensor whole: h5py-style reads see full shapes.
    H5File f = H5File::open(ra.last_checkpoint);
    const Tensor w = f.read("/params/conv_fc.0.weight");  // fmnist_csnn C=4: [C, 1, 3, 3], colwise over tp
    EXPECT_EQ(w.shape(), (Shape{4, 1, 3, 3}));
    const Tensor rm = f.read("/buffers/conv_fc.1.running_mean");  // BN inside the split region
    EXPECT_EQ(rm.shape(), (Shape{4}));
  }
  MPI_Barrier(world());
}

TEST(ParallelTrainer, BadConfigurationsFailOnEveryRankWithOneMessage) {
  dataset();
  auto mesh = world_mesh();
  auto exists = [](const std::string& p) { return access(p.c_str(), F_OK) == 0; };
  clear({"bad_div", "bad_small", "bad_tp", "bad_none", "bad_ckpt_src", "bad_ckpt"});
  if (world_size() > 1) {
    TrainRun div({{"run-name", "bad_div"}, {"distributed-mode", "dp"}, {"global-batch-size", std::to_string(world_size() * 2 + 1)}});
    std::string e = input_error_of([&] { div.go(mesh.get()); });
    EXPECT_NE(e.find("not divisible"), std::string::npos) << e;
    EXPECT_FALSE(exists(div.dir()));
  }
  TrainRun small({{"run-name", "bad_small"}, {"distributed-mode", "dp"}, {"global-batch-size", "64"}});
  std::string e = input_error_of([&] { small.go(mesh.get()); });
  EXPECT_NE(e.find("fewer than one global batch of 64"), std::string::npos) << e;
  EXPECT_FALSE(exists(small.dir()));
  TrainRun none({{"run-name", "bad_none"}, {"distributed-mode", "none"}});
  e = input_error_of([&] { none.go(mesh.get()); });
  EXPECT_NE(e.find("--distributed-mode"), std::string::npos) << e;
  if (world_size() > 1) {
    MeshShape tp;
    tp.tp = world_size();
    auto tp_mesh = Mesh::create(world(), tp);
    TrainRun t({{"run-name", "bad_tp"}, {"distributed-mode", "fsdp"}});  // with tp: fsdp_tp
    e = input_error_of([&] { t.go(tp_mesh.get()); });
    EXPECT_NE(e.find("--distributed-mode fsdp_tp"), std::string::npos) << e;
  }
  {  // ranks disagreeing on the configuration; one rank failing alone
    Comm w(world(), "w");
    const int last = world_size() - 1;
    if (world_size() > 1) {
      e = input_error_of([&] { check_same_text(w, world_rank() == last ? "lr = 2" : "lr = 1", "the configuration"); });
      EXPECT_NE(e.find("disagree"), std::string::npos) << e;
      EXPECT_NE(e.find(std::to_string(last)), std::string::npos) << e;
    }
    e = input_error_of([&] {
      collective_check(w, [&] {
        if (world_rank() == last) SM_INPUT_ERROR("data.h5: missing on this node");
      });
    });
    EXPECT_NE(e.find("data.h5: missing on this node"), std::string::npos) << e;
    if (last != 0) {
      EXPECT_EQ(e.rfind("rank " + std::to_string(last) + ": ", 0), 0u) << e;
    }
  }
  // A checkpoint of another model width: one clear message naming the file, on every rank.
  TrainRun src({{"run-name", "bad_ckpt_src"}, {"distributed-mode", "dp"}, {"max-steps", "1"}, {"var", "C=6"}});
  src.cfg.vars = {"C=6"};
  TrainSummary s = src.go(mesh.get());
  TrainRun bad({{"run-name", "bad_ckpt"}, {"distributed-mode", "fsdp"}, {"resume", s.last_checkpoint}});
  e = input_error_of([&] { bad.go(mesh.get()); });
  EXPECT_NE(e.find(s.last_checkpoint), std::string::npos) << e;
}

}  // namespace sm::test
