// test_checkpoint_shards.cpp — the single-rank building blocks of sharded checkpoints:
// h5_select_flat_range (every flat range of several shapes, scalar included, read through
// HDF5 equals the same range of the flattened data) and replicated_state_shards (names,
// shapes and order of the single-rank checkpoint). The shard-to-box arithmetic (flat chunks,
// tp offsets) is tested with its home, parallel/placement.h: test_placement.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "spikemesh/models/model_selection.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {
namespace {

std::string tmp_file(const std::string& tag) {
  return ::testing::TempDir() + "sm_shards_" + std::to_string(getpid()) + "_" + tag + ".h5";
}

}  // namespace

TEST(CheckpointShards, FlatRangeSelectionReadsExactlyThatRange) {
  const std::string path = tmp_file("select");
  const std::vector<Shape> shapes = {{}, {7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}, {4, 0, 2}};
  {
    H5File f = H5File::create(path);
    for (size_t k = 0; k < shapes.size(); ++k) {
      Tensor t = Tensor::empty(shapes[k], DType::I64);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = 1000 * static_cast<int64_t>(k) + i;
      f.write("d" + std::to_string(k), t);
    }
  }
  H5File f = H5File::open(path);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::string name = "d" + std::to_string(k);
    const int64_t n = shape_numel(shapes[k]);
    H5Handle ds(H5Dopen2(f.id(), name.c_str(), H5P_DEFAULT), H5Dclose);
    for (int64_t off = 0; off <= n; ++off)
      for (int64_t cnt = 0; off + cnt <= n; ++cnt) {
        H5Handle fs(H5Dget_space(ds.get()), H5Sclose);
        h5_select_flat_range(fs.get(), shapes[k], off, cnt);
        ASSERT_EQ(H5Sget_select_npoints(fs.get()), cnt) << name << " [" << off << ", " << off + cnt << ")";
        if (cnt == 0) continue;
        hsize_t m = static_cast<hsize_t>(cnt);
        H5Handle ms(H5Screate_simple(1, &m, nullptr), H5Sclose);
        std::vector<int64_t> got(static_cast<size_t>(cnt), -1);
        ASSERT_GE(H5Dread(ds.get(), H5T_NATIVE_INT64, ms.get(), fs.get(), H5P_DEFAULT, got.data()), 0);
        for (int64_t i = 0; i < cnt; ++i)
          ASSERT_EQ(got[i], 1000 * static_cast<int64_t>(k) + off + i) << name << " [" << off << ", " << off + cnt << ")";
      }
  }
  std::remove(path.c_str());
}

TEST(CheckpointShards, ReplicatedStateListsTheSingleRankCheckpointsTensors) {
  ModelSelection sel;
  sel.model = "fmnist_csnn";
  sel.vars = {"C=4"};
  auto m = sel.build();
  m->finalize(DType::F32, Device::cpu(), 1);
  OptimizerConfig oc;
  oc.name = "adam";
  auto opt = make_optimizer(oc, m->params());
  auto all = replicated_state_shards(*m, opt.get(), true);
  ASSERT_EQ(all.size(), m->params().size() + m->buffers().size() + opt->state().size());
  EXPECT_EQ(all[0].path, "params/" + m->params()[0]->name);
  EXPECT_EQ(all[0].box, full_box(all[0].shape));
  EXPECT_EQ(all[0].box.numel(), shape_numel(all[0].shape));
  EXPECT_EQ(all[0].data.raw(), m->params()[0]->value.raw());  // a view: a load writes the model
  EXPECT_EQ(all.back().path, "optim/" + opt->state().back().param_name + "/" + opt->state().back().state_name);
  for (const TensorShard& s : replicated_state_shards(*m, opt.get(), false)) EXPECT_TRUE(s.box.empty()) << s.path;
}

}  // namespace sm
