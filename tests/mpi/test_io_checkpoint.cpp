// test_io_checkpoint.cpp — the one checkpoint writer/reader (io/checkpoint.h, io/tensor_shard.h;
// flat chunks as shards: parallel/placement.h) over a group of real ranks:
// a ZeRO/FSDP-like layout (each unit's flat buffer and flat Adam state cut into dp equal
// chunks that cross parameter boundaries, plus padding) saved at dp = world / 2 and loaded
// at dp = 1 / 2 / world gives back exactly the reference state (bytes); the single-rank
// load_model_checkpoint reads a sharded file; the datasets and crc32s of a sharded save are byte
// for byte those of a single-rank save of the same state; an incompatible model, a truncated
// file, flipped bytes, and a file-size limit too small for the checkpoint each give the same
// error on every rank (and leave the previous checkpoint loadable); tensor-parallel slices
// (dim 1) written by the ranks read back at a dim-0 split and as flat ranges.
// Reference state: every rank builds the same model + optimizer and scrambles every value
// from CounterRng(seed, name) — identical on every rank without communication.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include "../unit/checkpoint_fixture.h"
#include "mpi_test_env.h"
#include "mpi_test_files.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/placement.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {
namespace {

using test::world;
using test::world_rank;
using test::world_size;

Comm* group() { return test::world_group(); }  // the checkpoint group: the whole world
std::string shared_dir(const std::string& tag) { return test::shared_dir("sm_mpi_ckpt", tag); }
std::unique_ptr<Model> fmnist(uint64_t seed, const std::string& width = "C=4") { return test::fmnist_model(seed, width); }
std::unique_ptr<Optimizer> adam(Model& m) { return test::adam_of(m); }

void scramble(Tensor& t, uint64_t seed, const std::string& purpose) {
  CounterRng rng(seed, purpose);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u = rng.uniform(static_cast<uint64_t>(i));
    if (t.dtype() == DType::F32) t.data<float>()[i] = static_cast<float>(u * 4 - 2);
    else if (t.dtype() == DType::I64) t.data<int64_t>()[i] = static_cast<int64_t>(u * 1000);
    else ADD_FAILURE() << "dtype";
  }
}

void scramble_all(Model& m, Optimizer& opt, uint64_t seed) {
  for (Param* p : m.params()) scramble(p->value, seed, "p/" + p->name);
  for (Buffer* b : m.buffers()) scramble(b->value, seed, "b/" + b->name);
  for (const OptimState& s : opt.state()) scramble(*s.value, seed, "o/" + s.param_name + s.state_name);
  opt.set_step_count(static_cast<int64_t>(seed % 97) + 3);
}

CheckpointMeta meta_for(Model& m, Optimizer& opt, int64_t step, const std::string& mesh) {
  CheckpointMeta cm = checkpoint_meta_of(m, opt);
  cm.state.step = step;
  cm.state.epoch = step / 4;
  cm.state.batch_in_epoch = step % 4;
  cm.state.seed = 42;
  cm.precision = "fp32";
  cm.mesh = mesh;
  cm.config_toml = "seed = 42\n";
  return cm;
}

// A ZeRO-like layout of (m, opt) for dp rank r of d: per unit, the flat value buffer and the
// flat buffer of each Adam state (params() order), padded to a multiple of d, rank r holding
// chunk r — copied into tensors owned here. `fill`: copy the model's values in (saving);
// else the chunks start at a sentinel (loading, compared afterwards).
struct ZeroLayout {
  std::vector<Tensor> chunks;       // owned copies; shards view them
  std::vector<Tensor> expected;     // what each chunk must hold (the model's values, padding 0)
  std::vector<int64_t> used;        // elements of each chunk that belong to parameters
  std::vector<TensorShard> shards;
};

ZeroLayout zero_layout(Model& m, Optimizer& opt, int r, int d, bool fill, bool saving) {
  ZeroLayout z;
  std::map<std::string, Tensor*> state;  // "param/state" -> tensor
  std::vector<std::string> state_names;
  for (const OptimState& s : opt.state()) {
    state[s.param_name + "/" + s.state_name] = s.value;
    if (std::find(state_names.begin(), state_names.end(), s.state_name) == state_names.end())
      state_names.push_back(s.state_name);
  }
  for (auto& u : m.units) {
    std::vector<Param*> ps = u->params();
    if (ps.empty()) continue;
    const int64_t total = u->num_params(), chunk = (total + d - 1) / d, begin = r * chunk, end = begin + chunk;
    auto add = [&](const std::function<const Tensor&(Param*)>& of, const std::string& state_name) {
      Tensor flat = Tensor::zeros({chunk * d}, DType::F32);  // the padded flat buffer
      int64_t off = 0;
      for (Param* p : ps) {
        const Tensor& t = of(p);
        std::memcpy(flat.data<float>() + off, t.raw(), t.nbytes());
        off += t.numel();
      }
      Tensor mine = flat.slice0(begin, end).clone();
      z.expected.push_back(mine.clone());
      z.used.push_back(std::max<int64_t>(0, std::min(end, total) - begin));
      if (!fill) mine.fill(-7.0);
      z.chunks.push_back(mine);
      append_flat_shards(z.shards, ps, begin, end, mine, state_name);
    };
    add([](Param* p) -> const Tensor& { return p->value; }, "");
    for (const std::string& sn : state_names)
      add([&](Param* p) -> const Tensor& { return *state.at(p->name + "/" + sn); }, sn);
  }
  for (TensorShard& s : buffer_shards(m, saving ? r == 0 : true)) z.shards.push_back(s);
  return z;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A communicator of the first n ranks of the world (MPI_COMM_NULL on the others).
MPI_Comm first_ranks(int n) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(world(), world_rank() < n ? 0 : MPI_UNDEFINED, world_rank(), &c);
  return c;
}

std::string error_of(const std::function<void()>& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

// Every rank's string, on rank 0 joined by '\n' (for "same error on every rank" checks).
std::vector<std::string> gather_strings(const std::string& s) {
  int n = static_cast<int>(s.size());
  std::vector<int> counts(world_size()), displs(world_size());
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, world());
  int total = 0;
  for (int r = 0; r < world_size(); ++r) displs[r] = total, total += counts[r];
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(s.data(), n, MPI_CHAR, &all[0], counts.data(), displs.data(), MPI_CHAR, world());
  std::vector<std::string> out;
  for (int r = 0; r < world_size(); ++r) out.push_back(all.substr(displs[r], counts[r]));
  return out;
}

// Saves the reference state (seed) sharded over the first `dp` ranks into dir; returns the path.
std::string save_sharded(const std::string& dir, int dp, uint64_t seed, int64_t step, int keep = 10) {
  std::string path;
  MPI_Comm c = first_ranks(dp);
  if (c != MPI_COMM_NULL) {
    auto m = fmnist(1);
    auto o = adam(*m);
    scramble_all(*m, *o, seed);
    ZeroLayout z = zero_layout(*m, *o, world_rank(), dp, true, true);
    try {
      Comm cc(c, "ckpt");
      path = write_checkpoint(&cc, dir, z.shards, meta_for(*m, *o, step, "dp=" + std::to_string(dp)), keep);
    } catch (...) {
      MPI_Comm_free(&c);
      throw;  // every rank of c throws alike
    }
    MPI_Comm_free(&c);
  }
  int n = static_cast<int>(path.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, world());
  path.resize(static_cast<size_t>(n));
  MPI_Bcast(&path[0], n, MPI_CHAR, 0, world());
  return path;
}

// Loads `path` over the first `dp` ranks in the ZeRO layout and checks every chunk and buffer
// against the reference state of `seed`.
void expect_loads_exactly(const std::string& path, int dp, uint64_t seed, int64_t step) {
  MPI_Comm c = first_ranks(dp);
  if (c == MPI_COMM_NULL) return;
  auto ref = fmnist(1);
  auto oref = adam(*ref);
  scramble_all(*ref, *oref, seed);
  ZeroLayout want = zero_layout(*ref, *oref, world_rank(), dp, true, false);
  auto m = fmnist(5);  // different values everywhere before the load
  auto o = adam(*m);
  ZeroLayout got = zero_layout(*m, *o, world_rank(), dp, false, false);
  CheckpointInfo ci;
  std::string err;  // the same on every rank of c, so all of them return together
  try {
    Comm cc(c, "ckpt");
    ci = read_checkpoint(&cc, path, got.shards, checkpoint_meta_of(*m, *o));
  } catch (const Error& e) {
    err = e.what();
  }
  MPI_Comm_free(&c);
  if (!err.empty()) {
    ADD_FAILURE() << "load at dp " << dp << ": " << err;
    return;
  }
  EXPECT_EQ(ci.optimizer_step, oref->step_count());
  EXPECT_EQ(ci.state.step, step);
  EXPECT_EQ(ci.model, "fmnist_csnn");
  ASSERT_EQ(got.chunks.size(), want.expected.size());
  for (size_t i = 0; i < got.chunks.size(); ++i) {
    // Padding beyond the last parameter is not in the file: compare the used prefix only.
    const int64_t used = got.used[i];
    EXPECT_TRUE(same_bytes(got.chunks[i].slice0(0, used), want.expected[i].slice0(0, used)))
        << "chunk " << i << " at dp " << dp << " rank " << world_rank();
  }
  auto bg = m->buffers(), br = ref->buffers();
  for (size_t i = 0; i < bg.size(); ++i) EXPECT_TRUE(same_bytes(bg[i]->value, br[i]->value)) << bg[i]->name;
}

}  // namespace

TEST(IoCheckpoint, ShardedSaveLoadsExactlyAtEveryDpSize) {
  std::string dir = shared_dir("reshard");
  std::vector<int> saves = {world_size()};
  if (world_size() > 2) saves.push_back(2);
  for (int dp_save : saves) {
    const uint64_t seed = 100 + static_cast<uint64_t>(dp_save);
    std::string sub = dir + "/save" + std::to_string(dp_save);
    if (world_rank() == 0) mkdir(sub.c_str(), 0755);
    MPI_Barrier(world());
    std::string path = save_sharded(sub, dp_save, seed, 7);
    EXPECT_EQ(path, checkpoint_path(sub, 7));
    for (int dp_load : {1, 2, world_size()}) expect_loads_exactly(path, dp_load, seed, 7);
    // The single-rank loader reads a sharded file into a whole model.
    if (world_rank() == 0) {
      auto ref = fmnist(1);
      auto oref = adam(*ref);
      scramble_all(*ref, *oref, seed);
      auto m = fmnist(3);
      auto o = adam(*m);
      EXPECT_NO_THROW(load_model_checkpoint(path, *m, *o));
      auto pm = m->params(), pr = ref->params();
      for (size_t i = 0; i < pm.size(); ++i) EXPECT_TRUE(same_bytes(pm[i]->value, pr[i]->value)) << pm[i]->name;
      auto sm_ = o->state(), sr = oref->state();
      for (size_t i = 0; i < sm_.size(); ++i) EXPECT_TRUE(same_bytes(*sm_[i].value, *sr[i].value)) << sm_[i].param_name;
      EXPECT_EQ(o->step_count(), oref->step_count());
    }
    MPI_Barrier(world());
  }
  test::remove_shared_dir(dir);
}

TEST(IoCheckpoint, ReplicatedDpSaveAndLoadRoundTrips) {
  // Plain DP: rank 0 writes every tensor, every rank loads every tensor whole.
  std::string dir = shared_dir("replicated");
  auto m = fmnist(1);
  auto o = adam(*m);
  scramble_all(*m, *o, 31);
  auto shards = replicated_state_shards(*m, o.get(), world_rank() == 0);
  std::string path = write_checkpoint(group(), dir, shards, meta_for(*m, *o, 3, "dp"), 2);
  auto m2 = fmnist(9);
  auto o2 = adam(*m2);
  auto into = replicated_state_shards(*m2, o2.get(), true);
  CheckpointInfo ci = read_checkpoint(group(), path, into, checkpoint_meta_of(*m2, *o2));
  o2->set_step_count(ci.optimizer_step);
  auto pa = m->params(), pb = m2->params();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bytes(pa[i]->value, pb[i]->value)) << pa[i]->name;
  auto sa = o->state(), sb = o2->state();
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(same_bytes(*sa[i].value, *sb[i].value)) << sa[i].param_name;
  EXPECT_EQ(o2->step_count(), o->step_count());
  // keep = 2: a third save prunes the first, only after the new one is complete.
  write_checkpoint(group(), dir, shards, meta_for(*m, *o, 4, "dp"), 2);
  write_checkpoint(group(), dir, shards, meta_for(*m, *o, 5, "dp"), 2);
  MPI_Barrier(world());
  struct stat st {};
  EXPECT_NE(stat(checkpoint_path(dir, 3).c_str(), &st), 0);
  EXPECT_EQ(stat(checkpoint_path(dir, 4).c_str(), &st), 0);
  EXPECT_EQ(find_latest_checkpoint(group(), dir), checkpoint_path(dir, 5));
  test::remove_shared_dir(dir);
}

TEST(IoCheckpoint, DatasetsEqualASingleRankSaveByteForByte) {
  std::string dir = shared_dir("bitwise");
  const uint64_t seed = 77;
  std::string serial;
  if (world_rank() == 0) {
    auto m = fmnist(1);
    auto o = adam(*m);
    scramble_all(*m, *o, seed);
    TrainState st = meta_for(*m, *o, 7, "").state;
    mkdir((dir + "/serial").c_str(), 0755);
    serial = save_model_checkpoint(dir + "/serial", *m, *o, st, "seed = 42\n", "fp32", 5);
  }
  std::vector<int> sizes = {world_size()};
  if (world_size() > 2) sizes.push_back(2);
  for (int dp : sizes) {
    const std::string sub = dir + "/dp" + std::to_string(dp);
    if (world_rank() == 0) mkdir(sub.c_str(), 0755);
    MPI_Barrier(world());
    std::string sharded = save_sharded(sub, dp, seed, 7);
    if (world_rank() != 0) continue;
    H5File a = H5File::open(serial), b = H5File::open(sharded);
    std::vector<std::string> na, nb;
    auto collect = [](const H5Group& g, std::vector<std::string>& out) {
      std::function<void(const H5Group&, const std::string&)> walk = [&](const H5Group& x, const std::string& pre) {
        for (const std::string& d : x.list_datasets()) out.push_back(pre + d);
        for (const std::string& s : x.list_groups()) walk(x.open_group(s), pre + s + "/");
      };
      walk(g, "");
    };
    collect(a.root(), na);
    collect(b.root(), nb);
    EXPECT_EQ(na, nb) << "dp " << dp;
    if (na != nb) continue;
    EXPECT_GT(na.size(), 20u);
    for (const std::string& p : na) {
      Tensor ta = a.read(p), tb = b.read(p);
      EXPECT_EQ(ta.shape(), tb.shape()) << p;
      EXPECT_TRUE(same_bytes(ta, tb)) << p << " differs at dp " << dp;
      H5Handle da(H5Dopen2(a.id(), p.c_str(), H5P_DEFAULT), H5Dclose), db(H5Dopen2(b.id(), p.c_str(), H5P_DEFAULT), H5Dclose);
      int64_t ca = -1, cb = -2;
      H5Aread(H5Handle(H5Aopen(da.get(), "crc32", H5P_DEFAULT), H5Aclose).get(), H5T_NATIVE_INT64, &ca);
      H5Aread(H5Handle(H5Aopen(db.get(), "crc32", H5P_DEFAULT), H5Aclose).get(), H5T_NATIVE_INT64, &cb);
      EXPECT_EQ(ca, cb) << p << " crc32 at dp " << dp;
    }
    H5Group ma = a.open_group("meta"), mb = b.open_group("meta");
    for (const char* k : {"step", "epoch", "batch_in_epoch", "seed", "optimizer_step", "num_optim_states", "format_version", "complete"})
      EXPECT_EQ(ma.attr_int(k), mb.attr_int(k)) << k;
    for (const char* k : {"model", "optimizer", "precision", "config"}) EXPECT_EQ(ma.attr_string(k), mb.attr_string(k)) << k;
  }
  test::remove_shared_dir(dir);
}

TEST(IoCheckpoint, IncompatibleModelFailsOnEveryRankNamingFileAndTensor) {
  std::string dir = shared_dir("incompatible");
  std::string path = save_sharded(dir, world_size(), 5, 7);
  auto wide = fmnist(1, "C=8");
  auto o = adam(*wide);
  ZeroLayout z = zero_layout(*wide, *o, world_rank(), world_size(), false, false);
  ErrorKind kind = ErrorKind::Internal;
  std::string e = error_of([&] { read_checkpoint(group(), path, z.shards, checkpoint_meta_of(*wide, *o)); }, &kind);
  EXPECT_EQ(kind, ErrorKind::Input);
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("/params/"), std::string::npos) << e;  // the first mismatching tensor
  EXPECT_NE(e.find("[8, 1, 3, 3]"), std::string::npos) << e;
  for (const std::string& other : gather_strings(e)) EXPECT_EQ(other, e);
  // Nothing was written into the chunks.
  int64_t touched = 0;
  for (const Tensor& t : z.chunks)
    for (int64_t i = 0; i < t.numel(); ++i) touched += t.data<float>()[i] != -7.0f;
  EXPECT_EQ(touched, 0);
  // A model with the same tensors but another name is refused too.
  auto same = fmnist(1);
  auto os = adam(*same);
  ZeroLayout z2 = zero_layout(*same, *os, world_rank(), world_size(), false, false);
  CheckpointMeta other = checkpoint_meta_of(*same, *os);
  other.model = "not_fmnist";
  e = error_of([&] { read_checkpoint(group(), path, z2.shards, other); }, &kind);
  EXPECT_EQ(kind, ErrorKind::Input);
  EXPECT_NE(e.find("not_fmnist"), std::string::npos) << e;
  for (const std::string& o2 : gather_strings(e)) EXPECT_EQ(o2, e);
  test::remove_shared_dir(dir);
}

TEST(IoCheckpoint, TruncatedAndCorruptFilesFailOnEveryRank) {
  std::string dir = shared_dir("corrupt");
  std::string path = save_sharded(dir, world_size(), 11, 7);
  const std::string truncated = dir + "/truncated.h5", flipped = dir + "/flipped.h5";
  std::string victim;
  if (world_rank() == 0) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    // Flip bytes inside the largest parameter dataset.
    H5File f = H5File::open(path);
    int64_t best = -1;
    for (const std::string& d : f.open_group("params").list_datasets()) {
      int64_t n = shape_numel(f.open_group("params").dataset_shape(d));
      if (n > best) best = n, victim = "params/" + d;
    }
    H5Handle ds(H5Dopen2(f.id(), victim.c_str(), H5P_DEFAULT), H5Dclose);
    haddr_t off = H5Dget_offset(ds.get());
    for (int k = 0; k < 8; ++k) bytes[off + 40 + k] ^= 0x5a;
    std::ofstream(flipped, std::ios::binary) << bytes;
  }
  int n = static_cast<int>(victim.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, world());
  victim.resize(static_cast<size_t>(n));
  MPI_Bcast(&victim[0], n, MPI_CHAR, 0, world());
  MPI_Barrier(world());
  auto m = fmnist(1);
  auto o = adam(*m);
  for (const std::string& bad : {truncated, flipped}) {
    // The ZeRO layout (ranges tile every tensor: crc combined from the ranks' reads) and a
    // request of nothing at all (every crc then comes from a whole read by one rank).
    for (int layout = 0; layout < 2; ++layout) {
      ZeroLayout z = zero_layout(*m, *o, world_rank(), world_size(), false, false);
      std::vector<TensorShard> shards = layout == 0 ? z.shards : replicated_state_shards(*m, o.get(), false);
      std::string e = error_of([&] { read_checkpoint(group(), bad, shards, checkpoint_meta_of(*m, *o)); });
      EXPECT_NE(e.find(bad), std::string::npos) << e;
      if (bad == flipped) {
        EXPECT_NE(e.find("/" + victim + " is corrupted"), std::string::npos) << e;
      }
      for (const std::string& other : gather_strings(e)) EXPECT_EQ(other, e);
    }
  }
  test::remove_shared_dir(dir);
}

// Rank r of p holds a dim-1 slice (tensor-parallel style) of a [6, 8] and a conv-weight-shaped
// [8, 4, 3, 3] tensor; the file holds the whole tensors (datasets and crc32s); read back at a
// dim-0 split and as flat ranges of a unit holding both (FSDP style), every element is exact.
TEST(IoCheckpoint, TpSlicesReadBackAtADim0SplitAndAsFlatRanges) {
  const std::string dir = shared_dir("tp");
  const int p = world_size(), r = world_rank();
  struct Ref {
    std::string path;
    Shape shape;
    Tensor whole;
  };
  std::vector<Ref> refs = {{"params/fc.weight", {6, 8}, Tensor()}, {"params/conv.weight", {8, 4, 3, 3}, Tensor()}};
  for (size_t k = 0; k < refs.size(); ++k) {
    refs[k].whole = Tensor::empty(refs[k].shape, DType::F32);
    for (int64_t i = 0; i < refs[k].whole.numel(); ++i)
      refs[k].whole.data<float>()[i] = 0.5f * static_cast<float>(i) + 100.0f * static_cast<float>(k);
  }
  auto part = [](const Shape& shape, size_t dim, int i, int n) {
    Box b = full_box(shape);
    b.offset[dim] = i * shape[dim] / n;
    b.count[dim] = (i + 1) * shape[dim] / n - b.offset[dim];
    return b;
  };
  auto cut = [](const Tensor& whole, const Box& b) {
    Tensor out = Tensor::empty({b.numel()}, whole.dtype());
    copy_box(whole, full_box(whole.shape()), out, b, b);
    return out;
  };
  CheckpointMeta cm;
  cm.model = "tp_synthetic";
  cm.state.step = 4;
  std::vector<TensorShard> mine;
  for (const Ref& t : refs) {
    const Box b = part(t.shape, 1, r, p);
    mine.push_back(TensorShard{t.path, t.shape, DType::F32, b, cut(t.whole, b)});
  }
  const std::string path = write_checkpoint(group(), dir, mine, cm, 1);
  EXPECT_EQ(path, checkpoint_path(dir, 4));
  if (r == 0) {
    H5File f = H5File::open(path);
    for (const Ref& t : refs) {
      EXPECT_TRUE(same_bytes(f.read(t.path), t.whole)) << t.path;
      H5Handle ds(H5Dopen2(f.id(), t.path.c_str(), H5P_DEFAULT), H5Dclose);
      int64_t crc = -1;
      H5Aread(H5Handle(H5Aopen(ds.get(), "crc32", H5P_DEFAULT), H5Aclose).get(), H5T_NATIVE_INT64, &crc);
      EXPECT_EQ(crc, static_cast<int64_t>(crc32(0, static_cast<const Bytef*>(t.whole.raw()), static_cast<uInt>(t.whole.nbytes()))))
          << t.path;
    }
  }
  // A dim-0 split (uneven where p does not divide the rows).
  std::vector<TensorShard> rows;
  std::vector<std::pair<Tensor, Tensor>> check;  // (read, expected)
  for (const Ref& t : refs) {
    const Box b = part(t.shape, 0, r, p);
    Tensor dst = Tensor::full({b.numel()}, -7, DType::F32);
    rows.push_back(TensorShard{t.path, t.shape, DType::F32, b, dst});
    check.emplace_back(dst, cut(t.whole, b));
  }
  CheckpointInfo ci = read_checkpoint(group(), path, rows, cm);
  EXPECT_EQ(ci.state.step, 4);
  // Flat ranges: chunk r of p of the unit's flat buffer [fc.weight | conv.weight], padded.
  std::vector<Param> params(refs.size());
  std::vector<Param*> ps;
  int64_t total = 0;
  for (size_t k = 0; k < refs.size(); ++k) {
    params[k].name = refs[k].path.substr(7);
    params[k].shape = params[k].local_shape = refs[k].shape;
    ps.push_back(&params[k]);
    total += refs[k].whole.numel();
  }
  const int64_t chunk = (total + p - 1) / p, begin = r * chunk;
  Tensor flat = Tensor::zeros({chunk * p}, DType::F32);
  std::memcpy(flat.data<float>(), refs[0].whole.raw(), refs[0].whole.nbytes());
  std::memcpy(flat.data<float>() + refs[0].whole.numel(), refs[1].whole.raw(), refs[1].whole.nbytes());
  Tensor got = Tensor::full({chunk}, -7, DType::F32);
  std::vector<TensorShard> flat_shards;
  append_flat_shards(flat_shards, ps, begin, begin + chunk, got);
  read_checkpoint(group(), path, flat_shards, cm);
  const int64_t used = std::max<int64_t>(0, std::min(begin + chunk, total) - begin);
  check.emplace_back(got.slice0(0, used), flat.slice0(begin, begin + used));
  for (size_t i = 0; i < check.size(); ++i)
    EXPECT_TRUE(same_bytes(check[i].first, check[i].second)) << "piece " << i << " on rank " << r;
  test::remove_shared_dir(dir);
}

TEST(IoCheckpoint, FileSizeLimitFailsEverywhereAndKeepsThePreviousCheckpoint) {
  std::string dir = shared_dir("diskfull");
  std::string first = save_sharded(dir, world_size(), 21, 1, 1);
  struct stat st {};
  EXPECT_EQ(stat(first.c_str(), &st), 0);
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = static_cast<rlim_t>(st.st_size / 3);  // soft limit only: restored below
  auto prev = signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &small);
  ErrorKind kind = ErrorKind::Internal;
  std::string e = error_of([&] { save_sharded(dir, world_size(), 22, 2, 1); }, &kind);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  EXPECT_EQ(kind, ErrorKind::Input);
  EXPECT_NE(e.find("ckpt_000000002"), std::string::npos) << e;
  EXPECT_NE(e.find("previous checkpoint is intact"), std::string::npos) << e;
  MPI_Barrier(world());
  EXPECT_NE(stat((checkpoint_path(dir, 2) + ".tmp").c_str(), &st), 0);
  EXPECT_NE(stat(checkpoint_path(dir, 2).c_str(), &st), 0);
  EXPECT_EQ(find_latest_checkpoint(group(), dir), first);
  expect_loads_exactly(first, world_size(), 21, 1);
  test::remove_shared_dir(dir);
}

}  // namespace sm

namespace sm {

// Synthetic shards of one [5, 7] f32 tensor and one i64 scalar, every rank holding a chunk of
// the first (the last rank the remainder) and rank 0 the scalar; data on `dev`.
TEST(IoCheckpoint, GpuShardsOnTheDeviceSaveAndLoad) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  std::string dir = shared_dir("gpu");
  const Shape shape = {5, 7};
  const int64_t n = 35, per = (n + world_size() - 1) / world_size();
  const int64_t begin = std::min(n, per * world_rank()), end = std::min(n, begin + per);
  Tensor host = Tensor::empty({end - begin}, DType::F32);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = 0.5f * static_cast<float>(begin + i) - 3;
  Tensor scalar = Tensor::full({}, 1234, DType::I64);
  // The flat range [begin, end) of w: one shard per box, each a slice of `a`.
  auto shards_on = [&](const Tensor& a, const Tensor& b) {
    std::vector<TensorShard> v;
    int64_t pos = 0;
    for (const Box& box : flat_range_boxes(shape, begin, end)) {
      v.push_back(TensorShard{"params/w", shape, DType::F32, box, a.slice0(pos, pos + box.numel())});
      pos += box.numel();
    }
    if (v.empty()) v.push_back(TensorShard{"params/w", shape, DType::F32, empty_box(2), Tensor()});
    const bool holds = world_rank() == 0;
    v.push_back(TensorShard{"buffers/steps", {}, DType::I64, holds ? full_box({}) : empty_box(0), holds ? b : Tensor()});
    return v;
  };
  CheckpointMeta cm;
  cm.model = "synthetic";
  cm.state.step = 1;
  std::string path = write_checkpoint(group(), dir, shards_on(host.to(Device::cuda(0)), scalar.to(Device::cuda(0))), cm, 1);
  Tensor back = Tensor::zeros({end - begin}, DType::F32, Device::cuda(0));
  Tensor sback = Tensor::zeros({}, DType::I64, Device::cuda(0));
  auto into = shards_on(back, sback);
  into.back().box = full_box({});  // every rank reads the replicated scalar
  into.back().data = sback;
  read_checkpoint(group(), path, into, cm);
  EXPECT_TRUE(same_bytes(back.to(Device::cpu()), host));
  EXPECT_EQ(sback.to(Device::cpu()).data<int64_t>()[0], 1234);
  test::remove_shared_dir(dir);
}

}  // namespace sm
