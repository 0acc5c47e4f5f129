// test_placement.cpp — the shard-to-box arithmetic of parallel/placement.h: append_flat_shards
// (a unit's flat buffer cut into dp chunks across parameter boundaries, with padding: the box
// shards, checked against a naive element-by-element owner map, tile every parameter; tp-local
// parameters placed at their tp offset, param_local_box) and buffer_held_boxes (whole buffers,
// tp channel shards, one box per block of a segmented shard).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "spikemesh/parallel/placement.h"

namespace sm {
namespace {

Param make_param(const std::string& name, const Shape& shape) {
  Param p;
  p.name = name;
  p.shape = p.local_shape = shape;
  return p;
}

}  // namespace

TEST(Placement, FlatChunksTileEveryParameterAcrossBoundaries) {
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

TEST(Placement, TpLocalFlatChunksArePlacedAtTheirTpOffset) {
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

TEST(Placement, BufferHeldBoxesAreTheTpShardOneBoxPerBlock) {
  Buffer whole;
  whole.name = "bn.num_batches_tracked";
  EXPECT_EQ(buffer_held_boxes(whole), (std::vector<Box>{full_box({})}));
  whole.shape = {6};
  EXPECT_EQ(buffer_held_boxes(whole), (std::vector<Box>{full_box({6})}));
  // [12] split into 2 along dim 0, part 1: rows [6, 12).
  Buffer half;
  half.name = "bn.running_mean";
  half.shape = {12};
  half.local_shape = {6};
  half.shard = ShardSpec{ShardSpec::Group::TP, 0, 1, 2};
  EXPECT_EQ(buffer_held_boxes(half), (std::vector<Box>{Box{{6}, {6}}}));
  // 3 blocks of 4 (q, k, v), each split into 2, part 1: rows [2, 4), [6, 8), [10, 12).
  Buffer qkv = half;
  qkv.shard.segments = 3;
  EXPECT_EQ(buffer_held_boxes(qkv), (std::vector<Box>{Box{{2}, {2}}, Box{{6}, {2}}, Box{{10}, {2}}}));
}

}  // namespace sm
