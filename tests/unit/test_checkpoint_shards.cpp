// test_checkpoint_shards.cpp — the single-rank building blocks of sharded checkpoints:
// h5_select_flat_range (every flat range of several shapes, scalar included, read through
// HDF5 equals the same range of the flattened data), append_flat_shards (a unit's flat
// buffer cut into dp chunks across parameter boundaries, with padding: the box shards,
// checked against a naive element-by-element owner map, tile every parameter; tp-local
// parameters placed at their tp offset) and replicated_state_shards (names, shapes and
// order of the single-rank checkpoint; tp boxes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "spikemesh/models/model_selection.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/io/tensor_shard.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/checkpoint_state.h"
#include "spikemesh/train/optimizer.h"

namespace sm {
namespace {

std::string tmp_file(const std::string& tag) {
  return ::testing::TempDir() + "sm_shards_" + std::to_string(getpid()) + "_" + tag + ".h5";
}

Param make_param(const std::string& name, const Shape& shape) {
  Param p;
  p.name = name;
  p.shape = p.local_shape = shape;
  return p;
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

TEST(CheckpointShards, FlatChunksTileEveryParameterAcrossBoundaries) {
  Param a = make_param("a", {3, 2}), b = make_param("b", {5}), c = make_param("c", {}), d = make_param("d", {2, 2, 2});
  std::vector<Param*> ps = {&a, &b, &c, &d};
  const int64_t total = 6 + 5 + 1 + 8;
  for (int dp : {1, 2, 3, 4, 7, 32}) {
    const int64_t chunk = (total + dp - 1) / dp;
    // Naive owner map: flat element e belongs to parameter k at offset e - start_k.
    std::vector<std::vector<int>> covered(ps.size());
    for (size_t k = 0; k < ps.size(); ++k) covered[k].assign(static_cast<size_t>(shape_numel(ps[k]->shape)), 0);
    for (int r = 0; r < dp; ++r) {
      const int64_t begin = r * chunk, end = begin + chunk;
      Tensor shard = Tensor::empty({chunk}, DType::F32);
      for (int64_t i = 0; i < chunk; ++i) shard.data<float>()[i] = static_cast<float>(begin + i);
      std::vector<TensorShard> out;
      append_flat_shards(out, ps, begin, end, shard, r % 2 ? "exp_avg" : "");
      // Every parameter listed, in order: one shard per box of its piece, or one empty box.
      size_t at = 0;
      int64_t start = 0;
      for (size_t k = 0; k < ps.size(); ++k) {
        const std::string path = r % 2 ? "optim/" + ps[k]->name + "/exp_avg" : "params/" + ps[k]->name;
        ASSERT_LT(at, out.size());
        const size_t first = at;
        for (; at < out.size() && out[at].path == path; ++at) {
          const TensorShard& s = out[at];
          EXPECT_EQ(s.path, path);
          EXPECT_EQ(s.shape, ps[k]->shape);
          if (s.box.empty()) {
            EXPECT_EQ(at, first) << "an empty box is the parameter's only shard";
            continue;
          }
          ASSERT_EQ(s.data.numel(), s.box.numel());
          int64_t i = 0;
          for (const auto& run : box_flat_runs(s.shape, s.box))
            for (int64_t e = run.first; e < run.first + run.second; ++e, ++i) {
              // The data view holds flat element start + e (row-major within the box).
              EXPECT_EQ(s.data.data<float>()[i], static_cast<float>(start + e));
              covered[k][static_cast<size_t>(e)]++;
            }
        }
        EXPECT_GT(at, first) << path << " listed";
        start += shape_numel(ps[k]->shape);
      }
      EXPECT_EQ(at, out.size());
    }
    for (size_t k = 0; k < ps.size(); ++k)
      for (size_t i = 0; i < covered[k].size(); ++i)
        EXPECT_EQ(covered[k][i], 1) << "dp " << dp << " param " << ps[k]->name << " element " << i;
  }
}

TEST(CheckpointShards, TpLocalFlatChunksArePlacedAtTheirTpOffset) {
  // w: [4, 6] split along dim 1 into 2, part 1 held here ([4, 3] local); b: [6] split along
  // dim 0 into 3, part 2 ([2] local); c: [3] unsharded. The flat buffer holds the LOCAL tensors.
  Param w = make_param("w", {4, 6}), b = make_param("b", {6}), c = make_param("c", {3});
  w.local_shape = {4, 3};
  w.shard = ShardSpec{ShardSpec::Group::TP, 1, 1, 2};
  b.local_shape = {2};
  b.shard = ShardSpec{ShardSpec::Group::TP, 0, 2, 3};
  EXPECT_EQ(param_local_box(w), (Box{{0, 3}, {4, 3}}));
  EXPECT_EQ(param_local_box(b), (Box{{4}, {2}}));
  EXPECT_EQ(param_local_box(c), full_box({3}));
  std::vector<Param*> ps = {&w, &b, &c};
  const int64_t total = 12 + 2 + 3;
  for (int dp : {1, 2, 3, 5}) {
    const int64_t chunk = (total + dp - 1) / dp;
    std::vector<std::vector<int>> covered(ps.size());  // per LOCAL element
    for (size_t k = 0; k < ps.size(); ++k) covered[k].assign(static_cast<size_t>(shape_numel(ps[k]->local_shape)), 0);
    for (int r = 0; r < dp; ++r) {
      const int64_t begin = r * chunk;
      Tensor shard = Tensor::empty({chunk}, DType::F32);
      for (int64_t i = 0; i < chunk; ++i) shard.data<float>()[i] = static_cast<float>(begin + i);
      std::vector<TensorShard> out;
      append_flat_shards(out, ps, begin, begin + chunk, shard);
      int64_t start = 0;
      size_t at = 0;
      for (size_t k = 0; k < ps.size(); ++k) {
        const Param& p = *ps[k];
        const Box local = param_local_box(p);
        for (; at < out.size() && out[at].path == "params/" + p.name; ++at) {
          const TensorShard& s = out[at];
          EXPECT_EQ(s.shape, p.shape);
          if (s.box.empty()) continue;
          EXPECT_EQ(intersect(s.box, local), s.box) << p.name << ": a box inside the tp part";
          int64_t i = 0;
          for (const auto& run : box_flat_runs(s.shape, s.box))
            for (int64_t e = run.first; e < run.first + run.second; ++e, ++i) {
              // Global flat e -> global multi-index -> local multi-index -> local flat.
              int64_t rest = e, lflat = 0, stride = 1;
              std::vector<int64_t> gidx(p.shape.size());
              for (size_t d = p.shape.size(); d-- > 0;) gidx[d] = rest % p.shape[d], rest /= p.shape[d];
              for (size_t d = p.shape.size(); d-- > 0;) {
                lflat += (gidx[d] - local.offset[d]) * stride;
                stride *= p.local_shape[d];
              }
              EXPECT_EQ(s.data.data<float>()[i], static_cast<float>(start + lflat)) << p.name << " element " << e;
              covered[k][static_cast<size_t>(lflat)]++;
            }
        }
        start += shape_numel(p.local_shape);
      }
      EXPECT_EQ(at, out.size());
    }
    for (size_t k = 0; k < ps.size(); ++k)
      for (size_t i = 0; i < covered[k].size(); ++i)
        EXPECT_EQ(covered[k][i], 1) << "dp " << dp << " param " << ps[k]->name << " local element " << i;
  }
  // A local shape that is not a tp part is refused.
  Param bad = make_param("bad", {4, 6});
  bad.local_shape = {4, 4};
  bad.shard = ShardSpec{ShardSpec::Group::TP, 1, 0, 2};
  EXPECT_THROW(param_local_box(bad), Error);
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
