// test_checkpoint.cpp — training checkpoints (io/checkpoint.h through the one-process
// save/load of train/model_checkpoint.h): exact round trip of
// parameters, buffers, optimizer state, step counts and the data cursor; keep-N pruning;
// find_latest_checkpoint skipping incomplete, truncated and non-HDF5 files; checksum
// mismatches naming the dataset (bytes flipped on disk, values rewritten through HDF5);
// a different model or optimizer refused by name; a full disk while checkpointing (a forked
// child with RLIMIT_FSIZE) leaving the previous checkpoint loadable and no .tmp behind.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>

#include "error_of.h"
#include <hdf5.h>
#include <omp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint_fixture.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/spec_loader.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {
namespace {

std::string fresh_dir(const std::string& tag) {
  std::string d = ::testing::TempDir() + "sm_ckpt_" + std::to_string(getpid()) + "_" + tag;
  std::string cmd = "rm -rf '" + d + "' && mkdir -p '" + d + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return d;
}
void remove_dir(const std::string& d) { std::system(("rm -rf '" + d + "'").c_str()); }

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void copy_file(const std::string& from, const std::string& to, long max_bytes = -1) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (max_bytes >= 0) bytes.resize(static_cast<size_t>(max_bytes));
  std::ofstream(to, std::ios::binary) << bytes;
}

long file_size(const std::string& p) {
  struct stat s {};
  return stat(p.c_str(), &s) == 0 ? static_cast<long>(s.st_size) : -1;
}

const char* kTinySpec = R"([model]
name = "tiny"
input = [1, 28, 28]
num_classes = 10
T = 2
loss = "mean_ce"
input_kind = "static"

[[unit]]
name = "net"
layers = [
  { type = "conv2d", in_channels = 1, out_channels = 2, kernel_size = 3, stride = 2, padding = 1 },
  { type = "batchnorm2d", num_features = 2 },
  { type = "lif" },
  { type = "flatten" },
  { type = "linear", in_features = 392, out_features = 10 },
]
)";

std::unique_ptr<Model> fmnist(uint64_t seed = 1) { return test::fmnist_model(seed); }

std::unique_ptr<Model> tiny(uint64_t seed = 1) {
  std::string p = ::testing::TempDir() + "sm_ckpt_tiny_" + std::to_string(getpid()) + ".toml";
  std::ofstream(p) << kTinySpec;
  auto m = load_model_spec(p);
  std::remove(p.c_str());
  m->finalize(DType::F32, Device::cpu(), seed);
  return m;
}

std::unique_ptr<Optimizer> optimizer_for(Model& m, const std::string& name = "adam") {
  OptimizerConfig oc;
  oc.name = name;
  return make_optimizer(oc, m.params());
}

// Every value of t from CounterRng(seed, purpose): different from any initialisation.
void scramble(Tensor& t, uint64_t seed, const std::string& purpose) {
  CounterRng rng(seed, purpose);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u = rng.uniform(static_cast<uint64_t>(i));
    switch (t.dtype()) {
      case DType::F32: t.data<float>()[i] = static_cast<float>(u * 4 - 2); break;
      case DType::F64: t.data<double>()[i] = u * 4 - 2; break;
      case DType::I64: t.data<int64_t>()[i] = static_cast<int64_t>(u * 1000); break;
      default: FAIL() << "unexpected dtype";
    }
  }
}

// A model + optimizer whose every parameter, buffer and optimizer state holds random values.
void scramble_all(Model& m, Optimizer& opt, uint64_t seed) {
  for (Param* p : m.params()) scramble(p->value, seed, "p/" + p->name);
  for (Buffer* b : m.buffers()) scramble(b->value, seed, "b/" + b->name);
  for (const OptimState& s : opt.state()) scramble(*s.value, seed, "o/" + s.param_name + s.state_name);
  opt.set_step_count(static_cast<int64_t>(seed % 97) + 3);
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

::testing::AssertionResult same_state(Model& a, Optimizer& oa, Model& b, Optimizer& ob) {
  auto pa = a.params(), pb = b.params();
  if (pa.size() != pb.size()) return ::testing::AssertionFailure() << "param count";
  for (size_t i = 0; i < pa.size(); ++i)
    if (!same_bytes(pa[i]->value, pb[i]->value)) return ::testing::AssertionFailure() << "param " << pa[i]->name;
  auto ba = a.buffers(), bb = b.buffers();
  if (ba.size() != bb.size()) return ::testing::AssertionFailure() << "buffer count";
  for (size_t i = 0; i < ba.size(); ++i)
    if (!same_bytes(ba[i]->value, bb[i]->value)) return ::testing::AssertionFailure() << "buffer " << ba[i]->name;
  auto sa = oa.state(), sb = ob.state();
  if (sa.size() != sb.size()) return ::testing::AssertionFailure() << "optimizer state count";
  for (size_t i = 0; i < sa.size(); ++i)
    if (!same_bytes(*sa[i].value, *sb[i].value))
      return ::testing::AssertionFailure() << "optimizer state " << sa[i].param_name << "/" << sa[i].state_name;
  if (oa.step_count() != ob.step_count()) return ::testing::AssertionFailure() << "optimizer step count";
  return ::testing::AssertionSuccess();
}

TrainState state_at(int64_t step) {
  TrainState st;
  st.step = step;
  st.epoch = step / 4;
  st.batch_in_epoch = step % 4;
  st.seed = 42;
  return st;
}

// Writes checkpoints of `m`/`opt` at `steps` into `dir` (values changed before each).
std::vector<std::string> save_steps(const std::string& dir, Model& m, Optimizer& opt, std::vector<int64_t> steps,
                                    int keep = 10) {
  std::vector<std::string> out;
  for (int64_t s : steps) {
    scramble_all(m, opt, 1000 + static_cast<uint64_t>(s));
    out.push_back(save_model_checkpoint(dir, m, opt, state_at(s), "seed = 42\n", "fp32", keep));
  }
  return out;
}

// File offset of a contiguous dataset's first byte.
haddr_t dataset_offset(const std::string& file, const std::string& ds) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  haddr_t off = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  return off;
}

}  // namespace

TEST(Checkpoint, RoundTripRestoresEverythingExactly) {
  std::string dir = fresh_dir("roundtrip");
  auto a = fmnist(1);
  auto oa = optimizer_for(*a);
  scramble_all(*a, *oa, 7);
  TrainState st;
  st.step = 7;
  st.epoch = 2;
  st.batch_in_epoch = 3;
  st.seed = 1234;
  std::string path = save_model_checkpoint(dir, *a, *oa, st, "lr = 0.5\n", "fp32", 3);
  EXPECT_EQ(path, dir + "/ckpt_000000007.h5");
  EXPECT_EQ(path, checkpoint_path(dir, 7));

  auto b = fmnist(99);  // different initialisation
  auto ob = optimizer_for(*b);
  ASSERT_FALSE(same_state(*a, *oa, *b, *ob));
  CheckpointInfo ci = load_model_checkpoint(path, *b, *ob);
  EXPECT_TRUE(same_state(*a, *oa, *b, *ob));
  EXPECT_EQ(ci.state.step, 7);
  EXPECT_EQ(ci.state.epoch, 2);
  EXPECT_EQ(ci.state.batch_in_epoch, 3);
  EXPECT_EQ(ci.state.seed, 1234);
  EXPECT_EQ(ci.optimizer_step, oa->step_count());
  EXPECT_EQ(ci.model, "fmnist_csnn");
  EXPECT_EQ(ci.precision, "fp32");
  EXPECT_EQ(ci.config_toml, "lr = 0.5\n");
  EXPECT_EQ(ci.num_params, static_cast<int64_t>(a->params().size()));
  EXPECT_EQ(ci.num_optim_states, static_cast<int64_t>(oa->state().size()));
  EXPECT_EQ(ci.format_version, kCheckpointFormatVersion);
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"ckpt_000000007.h5"}));  // no .tmp left
  remove_dir(dir);
}

TEST(Checkpoint, SgdMomentumStateRoundTrips) {
  std::string dir = fresh_dir("sgd");
  auto a = tiny(1);
  auto oa = optimizer_for(*a, "sgd");
  ASSERT_FALSE(oa->state().empty());
  scramble_all(*a, *oa, 11);
  std::string path = save_model_checkpoint(dir, *a, *oa, state_at(3), "", "fp32", 1);
  auto b = tiny(2);
  auto ob = optimizer_for(*b, "sgd");
  load_model_checkpoint(path, *b, *ob);
  EXPECT_TRUE(same_state(*a, *oa, *b, *ob));
  // An adam run cannot resume from sgd state: the error names the missing state and both optimizers.
  auto oc = optimizer_for(*b, "adam");
  std::string e = error_of([&] { load_model_checkpoint(path, *b, *oc); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("sgd"), std::string::npos) << e;
  EXPECT_NE(e.find("adam"), std::string::npos) << e;
  remove_dir(dir);
}

TEST(Checkpoint, KeepsOnlyTheNewestN) {
  std::string dir = fresh_dir("keep");
  auto m = tiny();
  auto opt = optimizer_for(*m);
  save_steps(dir, *m, *opt, {1, 2, 3, 4, 5}, /*keep=*/2);
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"ckpt_000000004.h5", "ckpt_000000005.h5"}));
  save_steps(dir, *m, *opt, {6}, /*keep=*/1);
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"ckpt_000000006.h5"}));
  // Other files in the directory are never touched by pruning.
  std::ofstream(dir + "/notes.txt") << "x";
  save_steps(dir, *m, *opt, {7, 8}, /*keep=*/1);
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"ckpt_000000008.h5", "notes.txt"}));
  // A damaged file does not count as one of the `keep` complete checkpoints.
  std::remove((dir + "/notes.txt").c_str());
  std::ofstream(checkpoint_path(dir, 9)) << "damaged\n";
  save_steps(dir, *m, *opt, {10}, /*keep=*/2);
  EXPECT_EQ(files_in(dir),
            (std::vector<std::string>{"ckpt_000000008.h5", "ckpt_000000009.h5", "ckpt_000000010.h5"}));
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir), checkpoint_path(dir, 10));
  remove_dir(dir);
}

TEST(Checkpoint, LatestSkipsIncompleteTruncatedAndForeignFiles) {
  std::string dir = fresh_dir("latest");
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir), "");
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir + "/missing"), "");
  auto m = tiny();
  auto opt = optimizer_for(*m);
  auto paths = save_steps(dir, *m, *opt, {1, 2});
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir), paths[1]);

  // A copy of step 2 without the `complete` attribute, as step 3.
  std::string incomplete = checkpoint_path(dir, 3);
  copy_file(paths[1], incomplete);
  {
    hid_t f = H5Fopen(incomplete.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Adelete_by_name(f, "/meta", "complete", H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir), paths[1]);
  std::string e = error_of([&] { read_checkpoint_info(incomplete); });
  EXPECT_NE(e.find(incomplete), std::string::npos) << e;
  EXPECT_NE(e.find("incomplete"), std::string::npos) << e;

  // Step 4: the first half of a good file (a crash without the atomic rename).
  std::string truncated = checkpoint_path(dir, 4);
  copy_file(paths[1], truncated, file_size(paths[1]) / 2);
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir), paths[1]);
  EXPECT_NE(error_of([&] { read_checkpoint_info(truncated); }).find(truncated), std::string::npos);

  // Step 5: not HDF5 at all; step 9's unfinished .tmp is not a candidate either.
  std::ofstream(checkpoint_path(dir, 5)) << "not an hdf5 file\n";
  copy_file(paths[1], checkpoint_path(dir, 9) + ".tmp");
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir), paths[1]);

  // Loading the incomplete one directly is refused and leaves the model as it was.
  auto m2 = tiny(5);
  auto o2 = optimizer_for(*m2);
  Tensor before = m2->params()[0]->value.clone();
  EXPECT_NE(error_of([&] { load_model_checkpoint(incomplete, *m2, *o2); }).find("incomplete"), std::string::npos);
  EXPECT_TRUE(same_bytes(before, m2->params()[0]->value));
  remove_dir(dir);
}

TEST(Checkpoint, FlippedBytesOnDiskAreAChecksumErrorNamingTheDataset) {
  std::string dir = fresh_dir("crc_bytes");
  auto m = fmnist();
  auto opt = optimizer_for(*m);
  auto paths = save_steps(dir, *m, *opt, {1});
  std::string bad = dir + "/bad.h5";
  copy_file(paths[0], bad);
  const std::string ds = "/params/conv_fc.4.weight";
  haddr_t off = dataset_offset(bad, ds);
  ASSERT_NE(off, HADDR_UNDEF);
  {
    int fd = ::open(bad.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char b[8];
    ASSERT_EQ(::pread(fd, b, sizeof b, static_cast<off_t>(off + 40)), 8);
    for (unsigned char& c : b) c ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, b, sizeof b, static_cast<off_t>(off + 40)), 8);
    ::close(fd);
  }
  auto m2 = fmnist(3);
  auto o2 = optimizer_for(*m2);
  Tensor before = m2->params()[0]->value.clone();
  std::string e = error_of([&] { load_model_checkpoint(bad, *m2, *o2); });
  EXPECT_NE(e.find(bad), std::string::npos) << e;
  EXPECT_NE(e.find(ds), std::string::npos) << e;
  EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  EXPECT_TRUE(same_bytes(before, m2->params()[0]->value)) << "a corrupted checkpoint must not be half-loaded";
  // The original is untouched and loads.
  EXPECT_NO_THROW(load_model_checkpoint(paths[0], *m2, *o2));
  remove_dir(dir);
}

TEST(Checkpoint, ValuesRewrittenWithoutChecksumAreDetected) {
  std::string dir = fresh_dir("crc_h5");
  auto m = fmnist();
  auto opt = optimizer_for(*m);
  auto paths = save_steps(dir, *m, *opt, {1});
  // Optimizer state and a buffer, rewritten through HDF5 (crc32 attribute left stale).
  for (std::string ds : {std::string("/optim/conv_fc.9.weight/exp_avg_sq"), std::string("/buffers/conv_fc.1.running_var")}) {
    std::string bad = dir + "/bad.h5";
    copy_file(paths[0], bad);
    {
      hid_t f = H5Fopen(bad.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      ASSERT_GE(f, 0) << ds;
      hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
      ASSERT_GE(d, 0) << ds;
      hid_t sp = H5Dget_space(d);
      std::vector<float> v(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
      H5Sclose(sp);
      ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
      v[v.size() / 2] += 1.0f;
      ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
      H5Dclose(d);
      H5Fclose(f);
    }
    auto m2 = fmnist(3);
    auto o2 = optimizer_for(*m2);
    std::string e = error_of([&] { load_model_checkpoint(bad, *m2, *o2); });
    EXPECT_NE(e.find(ds), std::string::npos) << ds << ": " << e;
    EXPECT_NE(e.find("checksum"), std::string::npos) << e;
  }
  remove_dir(dir);
}

TEST(Checkpoint, DifferentModelIsRefusedNamingBoth) {
  std::string dir = fresh_dir("model");
  auto t = tiny();
  auto ot = optimizer_for(*t);
  auto paths = save_steps(dir, *t, *ot, {1});
  auto f = fmnist();
  auto of = optimizer_for(*f);
  std::string e = error_of([&] { load_model_checkpoint(paths[0], *f, *of); });
  EXPECT_NE(e.find(paths[0]), std::string::npos) << e;
  EXPECT_NE(e.find("tiny"), std::string::npos) << e;
  EXPECT_NE(e.find("fmnist_csnn"), std::string::npos) << e;
  // Same model name, different widths: refused (shape mismatch), naming the parameter.
  auto g = fmnist();
  auto og = optimizer_for(*g);
  auto gpaths = save_steps(dir, *g, *og, {2});
  ModelSelection sel;
  sel.model = "fmnist_csnn";
  sel.vars = {"C=6"};
  auto wide = sel.build();
  wide->finalize(DType::F32, Device::cpu(), 1);
  auto ow = optimizer_for(*wide);
  e = error_of([&] { load_model_checkpoint(gpaths[0], *wide, *ow); });
  EXPECT_NE(e.find("conv_fc.0.weight"), std::string::npos) << e;
  remove_dir(dir);
}

TEST(Checkpoint, DiskFullLeavesThePreviousCheckpointLoadable) {
  std::string dir = fresh_dir("diskfull");
  auto m = fmnist();
  auto opt = optimizer_for(*m);
  auto paths = save_steps(dir, *m, *opt, {1});
  const long one = file_size(paths[0]);
  ASSERT_GT(one, 100000);  // the limit below must cut the next checkpoint short
  scramble_all(*m, *opt, 2);

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Child: a file-size limit well below one checkpoint; SIGXFSZ ignored so writes fail
    // with EFBIG the way a full disk fails with ENOSPC.
    omp_set_num_threads(1);
    signal(SIGXFSZ, SIG_IGN);
    rlimit rl{};
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(one / 3);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
    int code = 3;  // 3: no error (the bug this test catches)
    try {
      save_model_checkpoint(dir, *m, *opt, state_at(2), "", "fp32", 1);
    } catch (const Error& e) {
      code = std::string(e.what()).find("ckpt_000000002") != std::string::npos ? 0 : 4;
    } catch (...) {
      code = 5;
    }
    // Shut HDF5 down as exit() would: a file left half-closed by a failed write crashes here.
    H5close();
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: save succeeded, 4: error does not name the file, 5: not an sm::Error";
  // The previous checkpoint is still there (keep=1 must not have pruned it), complete and loadable.
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"ckpt_000000001.h5"}));
  EXPECT_EQ(find_latest_checkpoint(nullptr, dir), paths[0]);
  auto m2 = fmnist(9);
  auto o2 = optimizer_for(*m2);
  EXPECT_NO_THROW(load_model_checkpoint(paths[0], *m2, *o2));
  remove_dir(dir);
}

}  // namespace sm
