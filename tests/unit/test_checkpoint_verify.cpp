// test_checkpoint_verify.cpp — `spikemesh ckpt verify | export` below the front end
// (train/checkpoint_tools.h, io/checkpoint.h scan_checkpoint): a good checkpoint is ok with its
// counts; a flipped byte in a tensor's data is a checksum problem naming that dataset; a deleted
// buffer and a deleted optimizer state are each named as missing (with the /meta count that no
// longer fits); a tensor of the wrong shape, an extra dataset, a truncated and a non-HDF5 file
// are problems, never a throw; the export holds exactly the model's parameters and buffers under
// their state-dict names, equal to the checkpoint's, with model/T/step attributes.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "checkpoint_fixture.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/train/checkpoint_tools.h"

namespace sm {
namespace {

const char* kConfig = "model = \"fmnist_csnn\"\nvar = [\"C=4\"]\nT = 3\noptimizer = \"adam\"\nthreads = 100000\n";

struct Dir {
  std::string path = ::testing::TempDir() + "sm_ckverify_" + std::to_string(getpid());
  Dir() { EXPECT_EQ(std::system(("rm -rf '" + path + "' && mkdir -p '" + path + "'").c_str()), 0); }
  ~Dir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

// A one-process checkpoint of fmnist_csnn (C=4) + Adam at step 3 whose config names the model
// (threads = 100000: a setting of another machine, which does not shape a tensor).
std::string good_checkpoint(const std::string& dir) {
  auto m = test::fmnist_model(5);
  OptimizerConfig oc;
  auto o = make_optimizer(oc, m->params());
  for (const OptimState& s : o->state()) s.value->fill(0.125);
  for (Buffer* b : m->buffers())
    if (!b->integer) b->value.fill(0.5);
  TrainState st;
  st.step = 3;
  st.batch_in_epoch = 3;
  return save_model_checkpoint(dir, *m, *o, st, kConfig, "fp32", 5);
}

std::string copy_of(const std::string& from, const std::string& to, long keep_bytes = -1) {
  std::ifstream in(from, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (keep_bytes >= 0) bytes.resize(static_cast<size_t>(keep_bytes));
  std::ofstream(to, std::ios::binary) << bytes;
  return to;
}

// One byte of dataset `ds`'s raw data flipped in place (the crc32 attribute left as it was).
void flip_byte(const std::string& file, const std::string& ds, int64_t at) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, ds.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0) << ds;
  const haddr_t off = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  ASSERT_NE(off, HADDR_UNDEF);
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(off + at));
  char c = 0;
  io.get(c);
  io.seekp(static_cast<std::streamoff>(off + at));
  io.put(static_cast<char>(c ^ 0x10));
}

void unlink_dataset(const std::string& file, const std::string& ds) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, ds.c_str(), H5P_DEFAULT), 0) << ds;
  H5Fclose(f);
}

bool mentions(const CheckpointScan& s, const std::string& a, const std::string& b = "") {
  for (const std::string& p : s.problems)
    if (p.find(a) != std::string::npos && p.find(b) != std::string::npos) return true;
  return false;
}

std::string all_problems(const CheckpointScan& s) {
  std::string out;
  for (const std::string& p : s.problems) out += "\n  " + p;
  return out;
}

TEST(CheckpointVerify, GoodCheckpointIsOkWithItsCounts) {
  Dir dir;
  const std::string path = good_checkpoint(dir.path);
  const CheckpointScan s = verify_checkpoint(path);
  EXPECT_TRUE(s.problems.empty()) << all_problems(s);
  ASSERT_TRUE(s.info_ok);
  EXPECT_EQ(s.info.state.step, 3);
  EXPECT_EQ(s.info.mesh, "dp=1 tp=1 pp=1");
  // fmnist_csnn: 8 params, 6 buffers, Adam: 2 states per param
  EXPECT_EQ(s.tensors, 8 + 6 + 16);
  EXPECT_GT(s.bytes, 13380 * 4 * 3);
}

TEST(CheckpointVerify, FlippedByteIsACrcProblemNamingTheDataset) {
  Dir dir;
  const std::string path = copy_of(good_checkpoint(dir.path), dir.path + "/flip.h5");
  flip_byte(path, "params/conv_fc.4.weight", 7);
  const CheckpointScan s = verify_checkpoint(path);
  ASSERT_EQ(s.problems.size(), 1u) << all_problems(s);
  EXPECT_TRUE(mentions(s, "/params/conv_fc.4.weight", "checksum mismatch")) << all_problems(s);
  EXPECT_TRUE(mentions(s, path));
}

TEST(CheckpointVerify, MissingTensorsAreNamed) {
  Dir dir;
  const std::string good = good_checkpoint(dir.path);
  const std::string buf = copy_of(good, dir.path + "/nobuf.h5");
  unlink_dataset(buf, "buffers/conv_fc.1.running_var");
  CheckpointScan s = verify_checkpoint(buf);
  ASSERT_EQ(s.problems.size(), 1u) << all_problems(s);
  EXPECT_TRUE(mentions(s, "/buffers/conv_fc.1.running_var", "missing")) << all_problems(s);

  // an optimizer state: /meta's count no longer fits, and the tensor is still named
  const std::string opt = copy_of(good, dir.path + "/noopt.h5");
  unlink_dataset(opt, "optim/conv_fc.0.weight/exp_avg");
  s = verify_checkpoint(opt);
  EXPECT_TRUE(mentions(s, "/optim/conv_fc.0.weight/exp_avg", "missing")) << all_problems(s);
  EXPECT_TRUE(mentions(s, "num_optim_states")) << all_problems(s);
}

TEST(CheckpointVerify, WrongShapeAndExtraDatasetAreNamed) {
  Dir dir;
  const std::string path = copy_of(good_checkpoint(dir.path), dir.path + "/odd.h5");
  unlink_dataset(path, "buffers/conv_fc.1.running_mean");  // replaced below by a [5] tensor
  {
    H5File f = H5File::open(path, true);
    H5Group b = f.open_group("buffers");
    Tensor t = Tensor::zeros({5}, DType::F32);
    b.write("conv_fc.1.running_mean", t);
    b.write("stray", t);
  }
  const CheckpointScan s = verify_checkpoint(path);
  EXPECT_TRUE(mentions(s, "/buffers/conv_fc.1.running_mean", "shape [5]")) << all_problems(s);
  EXPECT_TRUE(mentions(s, "/buffers/stray", "not a tensor")) << all_problems(s);
}

TEST(CheckpointVerify, DamagedFilesAreProblemsNotThrows) {
  Dir dir;
  const std::string good = good_checkpoint(dir.path);
  const std::string cut = copy_of(good, dir.path + "/cut.h5", 20000);
  const std::string junk = dir.path + "/junk.h5";
  std::ofstream(junk) << "not an HDF5 file\n";
  for (const std::string& p : {cut, junk, dir.path + "/absent.h5"}) {
    CheckpointScan s;
    EXPECT_NO_THROW(s = verify_checkpoint(p)) << p;
    EXPECT_FALSE(s.problems.empty()) << p;
    EXPECT_TRUE(mentions(s, p.substr(p.rfind('/') + 1))) << all_problems(s);
  }
}

TEST(CheckpointExport, FlatStateDictEqualsTheCheckpoint) {
  Dir dir;
  const std::string path = good_checkpoint(dir.path);
  const std::string out = dir.path + "/export.h5";
  const CheckpointModel cm = load_checkpoint_model(path);
  export_flat_h5(cm, out, path);
  EXPECT_EQ(cm.T, 3);
  H5File e = H5File::open(out);
  H5File c = H5File::open(path);
  EXPECT_EQ(e.attr_string("model"), "fmnist_csnn");
  EXPECT_EQ(e.attr_int("T"), 3);
  EXPECT_EQ(e.attr_int("step"), 3);
  const std::vector<std::string> names = e.list_datasets();
  EXPECT_EQ(names.size(), 14u);
  for (const std::string& n : names) {
    const std::string src = (c.has_dataset("params/" + n) ? "params/" : "buffers/") + n;
    ASSERT_TRUE(c.has_dataset(src)) << n;
    const Tensor a = e.read(n), b = c.read(src);
    ASSERT_EQ(a.dtype(), b.dtype()) << n;
    ASSERT_EQ(a.nbytes(), b.nbytes()) << n;
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << n;
  }
  // a damaged checkpoint is not exported: one Input error naming the file and the tensor
  const std::string bad = copy_of(path, dir.path + "/flip.h5");
  flip_byte(bad, "params/conv_fc.0.weight", 3);
  const std::string msg = error_of([&] { export_flat_h5(load_checkpoint_model(bad), dir.path + "/bad_export.h5", bad); });
  EXPECT_NE(msg.find("/params/conv_fc.0.weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace sm
