// box.h — an N-d box (hyperslab) of a logical tensor: offset and count per dimension.
// The one vocabulary for "which part of a tensor is held here" (docs/architecture.md §5, §8): a dp
// flat range of a row-major tensor is a short list of boxes (flat_range_boxes), a tensor-parallel
// split is one box, and their composition is a translated list; resharding is box intersection.
// Invariants: offset.size() == count.size() == rank of the logical shape; counts >= 0; the
// elements of a box are enumerated row-major within the box.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

struct Box {
  Shape offset;  // first index per dimension
  Shape count;   // extent per dimension
  bool none = false;  // holds nothing (needed for rank-0 tensors, whose only box is {})
  int64_t numel() const;
  bool empty() const { return numel() == 0; }
  std::string str() const;  // "[0:4, 8:16]"
  bool operator==(const Box& o) const { return none == o.none && offset == o.offset && count == o.count; }
};

// The whole tensor of `shape` (a scalar shape {} gives the box of one element with no dims).
Box full_box(const Shape& shape);
// A box with zero elements in a tensor of rank `ndim` (a rank that holds nothing).
Box empty_box(size_t ndim);
// The elements common to a and b (possibly empty); both of the same rank.
Box intersect(const Box& a, const Box& b);
// `b` moved by `delta` per dimension (a box of a tp-local tensor placed in the global one).
Box translate(const Box& b, const Shape& delta);
// The boxes that make up the row-major flat range [begin, end) of a tensor of `shape`, in flat
// order; each box is itself one contiguous flat run (so its elements, row-major in the box,
// are consecutive in the flattening). At most 2·rank − 1 boxes; none for an empty range.
std::vector<Box> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end);
// Row-major flat index in `shape` of the box's first element.
int64_t box_flat_begin(const Shape& shape, const Box& b);
// The maximal contiguous flat runs [begin, length) of `shape` that box `b` covers, in flat
// order (a box spanning whole trailing dimensions is few runs; one of inner slices, many).
std::vector<std::pair<int64_t, int64_t>> box_flat_runs(const Shape& shape, const Box& b);
// Copies the elements of box `part` (part ⊆ both boxes) from `src` (holding box `src_box`,
// row-major within it) into `dst` (holding `dst_box`). Host tensors of one dtype, any shape
// with the boxes' numel. Used to reshard: the read box and the held box intersect.
void copy_box(const Tensor& src, const Box& src_box, Tensor& dst, const Box& dst_box, const Box& part);

}  // namespace sm
