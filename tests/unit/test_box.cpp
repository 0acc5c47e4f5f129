// test_box.cpp — N-d boxes of logical tensors (core/box.h): flat_range_boxes on several
// shapes and every flat range reassembles exactly that range (each box one contiguous run,
// in order, within the 2·rank−1 bound); box_flat_runs against a naive element enumeration;
// intersect / translate / full_box / empty_box; copy_box resharding a tensor from one split
// into another (dim-0 halves into dim-1 thirds, and into a flat range) element for element.
#include <gtest/gtest.h>

#include <vector>

#include "spikemesh/core/box.h"

namespace sm {
namespace {

// Row-major flat indices of every element of box `b` of `shape`, in row-major order within b.
std::vector<int64_t> naive_elements(const Shape& shape, const Box& b) {
  std::vector<int64_t> out;
  if (b.empty()) return out;
  const size_t k = shape.size();
  if (k == 0) return {0};
  std::vector<int64_t> idx(b.offset.begin(), b.offset.end());
  while (true) {
    int64_t flat = 0;
    for (size_t i = 0; i < k; ++i) flat = flat * shape[i] + idx[i];
    out.push_back(flat);
    size_t d = k;
    while (d > 0) {
      --d;
      if (++idx[d] < b.offset[d] + b.count[d]) break;
      idx[d] = b.offset[d];
      if (d == 0) return out;
    }
  }
}

// A tensor of `shape` whose element i holds i (f32).
Tensor iota(const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

// The elements of box b of a whole tensor (row-major within b), through copy_box.
Tensor cut(const Tensor& whole, const Box& b) {
  Tensor out = Tensor::empty({b.numel()}, whole.dtype());
  copy_box(whole, full_box(whole.shape()), out, b, b);
  return out;
}

}  // namespace

TEST(Box, FlatRangeBoxesReassembleExactlyTheRange) {
  const std::vector<Shape> shapes = {{}, {7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}, {4, 0, 2}, {3, 2, 2, 3}, {2, 3, 1, 2, 2}};
  for (const Shape& shape : shapes) {
    const int64_t n = shape_numel(shape);
    for (int64_t begin = 0; begin <= n; ++begin)
      for (int64_t end = begin; end <= n; ++end) {
        const std::vector<Box> boxes = flat_range_boxes(shape, begin, end);
        EXPECT_LE(boxes.size(), shape.empty() ? 1u : 2 * shape.size() - 1) << shape_str(shape);
        std::vector<int64_t> got;
        for (const Box& b : boxes) {
          ASSERT_EQ(b.offset.size(), shape.size());
          EXPECT_GT(b.numel(), 0) << "no empty boxes";
          const std::vector<int64_t> e = naive_elements(shape, b);
          // Each box is one contiguous flat run starting at box_flat_begin.
          for (size_t i = 0; i < e.size(); ++i) EXPECT_EQ(e[i], box_flat_begin(shape, b) + static_cast<int64_t>(i));
          got.insert(got.end(), e.begin(), e.end());
        }
        ASSERT_EQ(static_cast<int64_t>(got.size()), end - begin) << shape_str(shape) << " [" << begin << ", " << end << ")";
        for (int64_t i = 0; i < end - begin; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], begin + i);
      }
  }
  EXPECT_THROW(flat_range_boxes({3, 4}, 5, 13), Error);
  EXPECT_THROW(flat_range_boxes({3, 4}, 6, 5), Error);
}

TEST(Box, FlatRunsOfABoxAreItsElementsInOrder) {
  const Shape shape = {3, 4, 5};
  int checked = 0;
  for (int64_t o0 = 0; o0 < 3; ++o0)
    for (int64_t c0 = 0; o0 + c0 <= 3; ++c0)
      for (int64_t o1 = 0; o1 < 4; o1 += 1)
        for (int64_t c1 = 1; o1 + c1 <= 4; ++c1)
          for (int64_t o2 : {0, 2})
            for (int64_t c2 : {1, 3, 5}) {
              if (o2 + c2 > 5) continue;
              const Box b{{o0, o1, o2}, {c0, c1, c2}};
              std::vector<int64_t> got;
              const auto runs = box_flat_runs(shape, b);
              for (size_t i = 0; i < runs.size(); ++i) {
                EXPECT_GT(runs[i].second, 0);
                if (i) {
                  EXPECT_GT(runs[i].first, runs[i - 1].first + runs[i - 1].second) << "runs are maximal";
                }
                for (int64_t e = 0; e < runs[i].second; ++e) got.push_back(runs[i].first + e);
              }
              EXPECT_EQ(got, naive_elements(shape, b)) << b.str();
              ++checked;
            }
  EXPECT_GT(checked, 100);
  // Whole trailing dimensions make one run; a full box is one run; a scalar is {0, 1}.
  EXPECT_EQ(box_flat_runs(shape, Box{{1, 0, 0}, {2, 4, 5}}), (std::vector<std::pair<int64_t, int64_t>>{{20, 40}}));
  EXPECT_EQ(box_flat_runs(shape, full_box(shape)).size(), 1u);
  EXPECT_EQ(box_flat_runs({}, full_box({})), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  EXPECT_TRUE(box_flat_runs(shape, empty_box(3)).empty());
  EXPECT_TRUE(box_flat_runs({}, empty_box(0)).empty());
}

TEST(Box, IntersectTranslateAndSpecialBoxes) {
  const Box a{{0, 2}, {4, 4}}, b{{2, 0}, {4, 3}};
  EXPECT_EQ(intersect(a, b), (Box{{2, 2}, {2, 1}}));
  EXPECT_EQ(intersect(a, Box{{0, 6}, {4, 2}}).numel(), 0);
  EXPECT_TRUE(intersect(a, empty_box(2)).empty());
  EXPECT_EQ(translate(Box{{0, 0}, {4, 3}}, {0, 3}), (Box{{0, 3}, {4, 3}}));
  EXPECT_EQ(full_box({2, 3}).numel(), 6);
  EXPECT_EQ(full_box({}).numel(), 1);
  EXPECT_FALSE(full_box({}).empty());
  EXPECT_TRUE(empty_box(0).empty());
  EXPECT_TRUE(empty_box(3).empty());
  EXPECT_EQ(box_flat_begin({3, 4, 5}, Box{{1, 2, 3}, {1, 1, 1}}), 1 * 20 + 2 * 5 + 3);
  EXPECT_EQ((Box{{1, 2}, {3, 4}}).str(), "[1:4, 2:6]");
}

TEST(Box, CopyBoxReshardsBetweenSplits) {
  // A conv-weight-shaped tensor held as two dim-0 halves, copied into three dim-1 slices and
  // into a flat range: every destination element equals the source's.
  const Shape shape = {4, 6, 3, 3};
  const Tensor whole = iota(shape);
  std::vector<Box> halves = {{{0, 0, 0, 0}, {2, 6, 3, 3}}, {{2, 0, 0, 0}, {2, 6, 3, 3}}};
  std::vector<Tensor> held;
  for (const Box& h : halves) held.push_back(cut(whole, h));
  std::vector<Box> targets = {{{0, 0, 0, 0}, {4, 2, 3, 3}}, {{0, 2, 0, 0}, {4, 2, 3, 3}}, {{0, 4, 0, 0}, {4, 2, 3, 3}}};
  for (const Box& fb : flat_range_boxes(shape, 29, 170)) targets.push_back(fb);
  for (const Box& t : targets) {
    Tensor dst = Tensor::full({t.numel()}, -1, DType::F32);
    for (size_t h = 0; h < halves.size(); ++h) copy_box(held[h], halves[h], dst, t, intersect(halves[h], t));
    const std::vector<int64_t> want = naive_elements(shape, t);
    for (int64_t i = 0; i < t.numel(); ++i)
      ASSERT_EQ(dst.data<float>()[i], static_cast<float>(want[static_cast<size_t>(i)])) << t.str() << " element " << i;
  }
  // A scalar, and a part outside a box refused.
  Tensor s = Tensor::full({}, 5, DType::F32), d = Tensor::zeros({1}, DType::F32);
  copy_box(s, full_box({}), d, full_box({}), full_box({}));
  EXPECT_EQ(d.data<float>()[0], 5.0f);
  Tensor src = cut(whole, halves[0]), dst = Tensor::zeros({targets[0].numel()}, DType::F32);
  EXPECT_THROW(copy_box(src, halves[0], dst, targets[0], targets[0]), Error);
}

}  // namespace sm
