// test_checkpoint_damage.cpp — damaged checkpoints loaded by a group of real ranks:
// a truncated file and a file holding NaN/Inf (checksums recomputed) give the SAME Input error on
// every rank — Input, so the front end prints it once and every rank exits non-zero without
// MPI_Abort (a Library error was printed by every rank, then Open MPI's abort noise) — before
// anything is written into any rank's tensors, also when the poisoned tensor is read by one rank
// only; with allow_nonfinite the file loads with one warning, on rank 0 only.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "../unit/checkpoint_fixture.h"
#include "mpi_test_env.h"
#include "mpi_test_files.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/log.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {
namespace {

using test::world;
using test::world_rank;
using test::world_size;

Comm* group() { return test::world_group(); }
std::string shared_dir(const std::string& tag) { return test::shared_dir("sm_mpi_ckdmg", tag); }
std::unique_ptr<Model> fmnist(uint64_t seed) { return test::fmnist_model(seed); }
std::unique_ptr<Optimizer> adam(Model& m) { return test::adam_of(m, 0.25); }

// Rank 0 writes a one-process checkpoint of fmnist_csnn (C=4) + Adam into `dir`; its path everywhere.
std::string saved(const std::string& dir) {
  std::string path = checkpoint_path(dir, 3);
  if (world_rank() == 0) {
    auto m = fmnist(1);
    auto o = adam(*m);
    TrainState st;
    st.step = 3;
    st.seed = 42;
    save_model_checkpoint(dir, *m, *o, st, "seed = 42\n", "fp32", 5);
  }
  MPI_Barrier(world());
  return path;
}

// Rank 0: value `v` at element `at` of float dataset `ds`, crc32 recomputed.
void poison(const std::string& file, const std::string& ds, int64_t at, float v) {
  if (world_rank() == 0) {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    std::vector<float> x(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
    H5Sclose(sp);
    EXPECT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
    x[static_cast<size_t>(at)] = v;
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0);
    const int64_t crc = static_cast<int64_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(x.data()), static_cast<uInt>(x.size() * sizeof(float))));
    hid_t a = H5Aopen(d, "crc32", H5P_DEFAULT);
    EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &crc), 0);
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(f);
  }
  MPI_Barrier(world());
}

struct Outcome {
  bool input = false;
  std::string message;
};
Outcome outcome_of(const std::function<void()>& f) {
  Outcome o;
  try {
    f();
  } catch (const Error& e) {
    o.input = e.kind() == ErrorKind::Input;
    o.message = e.what();
  }
  return o;
}

// True on every rank when every rank holds rank 0's `s`.
bool same_everywhere(const std::string& s) {
  int n = static_cast<int>(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, world());
  std::string r0 = s;
  r0.resize(static_cast<size_t>(n));
  MPI_Bcast(&r0[0], n, MPI_CHAR, 0, world());
  int same = r0 == s, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, world());
  return all == 1;
}

// The model's whole state, but rank r requests only the tensors i with i % size == r (the
// others' boxes empty): a tensor is then read by exactly one rank.
std::vector<TensorShard> split_request(Model& m, Optimizer& o) {
  std::vector<TensorShard> s = replicated_state_shards(m, &o, true);
  for (size_t i = 0; i < s.size(); ++i)
    if (static_cast<int>(i % static_cast<size_t>(world_size())) != world_rank()) {
      s[i].box = empty_box(s[i].shape.size());
      s[i].data = Tensor();
    }
  return s;
}

}  // namespace

TEST(CheckpointDamage, TruncatedFileIsOneInputErrorOnEveryRank) {
  const std::string dir = shared_dir("trunc");
  const std::string good = saved(dir), bad = dir + "/trunc.h5";
  if (world_rank() == 0) {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(bad, std::ios::binary) << bytes.substr(0, bytes.size() * 6 / 10);
  }
  MPI_Barrier(world());
  auto m = fmnist(7);
  auto o = adam(*m);
  std::vector<TensorShard> shards = replicated_state_shards(*m, o.get(), true);
  const Outcome out = outcome_of([&] { read_checkpoint(group(), bad, shards, checkpoint_meta_of(*m, *o)); });
  EXPECT_TRUE(out.input) << "not an Input error (the front end would print it on every rank and abort): "
                         << out.message;
  EXPECT_NE(out.message.find(bad), std::string::npos) << out.message;
  EXPECT_TRUE(same_everywhere(out.message)) << out.message;
  const Outcome info = outcome_of([&] { read_checkpoint_info(group(), bad); });
  EXPECT_TRUE(info.input) << info.message;
  EXPECT_TRUE(same_everywhere(info.message));
  test::remove_shared_dir(dir);
}

TEST(CheckpointDamage, NonFiniteValueIsRefusedOnEveryRankBeforeAnyWrite) {
  const std::string dir = shared_dir("nan");
  const std::string path = saved(dir);
  poison(path, "/optim/conv_fc.9.weight/exp_avg", 17, std::numeric_limits<float>::quiet_NaN());
  auto m = fmnist(7);
  auto o = adam(*m);
  for (int request = 0; request < 2; ++request) {  // every rank reads everything / one rank per tensor
    std::vector<TensorShard> shards = request == 0 ? replicated_state_shards(*m, o.get(), true) : split_request(*m, *o);
    std::vector<Tensor> before;
    for (const TensorShard& s : shards) before.push_back(s.data.defined() ? s.data.clone() : Tensor());
    const Outcome out = outcome_of([&] { read_checkpoint(group(), path, shards, checkpoint_meta_of(*m, *o)); });
    EXPECT_TRUE(out.input) << out.message;
    EXPECT_NE(out.message.find(path), std::string::npos) << out.message;
    EXPECT_NE(out.message.find("/optim/conv_fc.9.weight/exp_avg (first at element 17"), std::string::npos)
        << out.message;
    EXPECT_TRUE(same_everywhere(out.message)) << out.message;
    for (size_t i = 0; i < shards.size(); ++i)
      if (before[i].defined())
        EXPECT_EQ(std::memcmp(before[i].raw(), shards[i].data.raw(), before[i].nbytes()), 0) << shards[i].path;
    // Allowed: loads on every rank, one warning from rank 0 only.
    CheckpointReadOptions allow;
    allow.allow_nonfinite = true;
    const int warnings = log_warning_count();
    const Outcome ok = outcome_of([&] { read_checkpoint(group(), path, shards, checkpoint_meta_of(*m, *o), allow); });
    EXPECT_EQ(ok.message, "");
    EXPECT_EQ(log_warning_count() - warnings, world_rank() == 0 ? 1 : 0);
  }
  test::remove_shared_dir(dir);
}

}  // namespace sm
