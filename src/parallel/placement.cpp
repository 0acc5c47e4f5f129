// placement.cpp — the shard-to-box arithmetic of parallel/placement.h: tp shards, flat ranges
// of tp-local tensors as boxes, placed pieces, and flat chunks as checkpoint tensors.
#include "spikemesh/parallel/placement.h"

#include <algorithm>

#include "spikemesh/core/error.h"

namespace sm {

namespace {

// What a Param or a Buffer holds of its logical tensor: `held` of `shape`, cut by `shard`.
struct Held {
  const char* kind;  // "parameter" | "buffer" (messages)
  const std::string& name;
  const Shape& shape;
  const Shape& held;
  const ShardSpec& shard;
};

// The box of the logical tensor that the held tensor is (one block only).
Box held_box(const Held& t) {
  if (t.held == t.shape) return full_box(t.shape);
  const int d = t.shard.dim;
  const bool ok = d >= 0 && static_cast<size_t>(d) < t.shape.size() && t.held.size() == t.shape.size() &&
                  t.shard.count > 0 && 0 <= t.shard.index && t.shard.index < t.shard.count &&
                  t.shape[d] % t.shard.count == 0 && t.held[d] == t.shape[d] / t.shard.count;
  bool others = ok;
  for (size_t i = 0; others && i < t.shape.size(); ++i)
    if (static_cast<int>(i) != d) others = t.held[i] == t.shape[i];
  SM_CHECK(others, t.kind << " '" << t.name << "': local shape " << shape_str(t.held) << " is not part "
                          << t.shard.index << " of " << t.shard.count << " of " << shape_str(t.shape)
                          << " split along dim " << d);
  SM_CHECK(t.shard.segments == 1, t.kind << " '" << t.name << "' is split in " << t.shard.segments
                                         << " blocks: it has no single box (param_range_boxes)");
  Box b = full_box(t.held);
  b.offset[d] = t.shard.index * (t.shape[d] / t.shard.count);
  return b;
}

// The boxes of elements [begin, end) of the held tensor's row-major flattening.
std::vector<Box> held_range_boxes(const Held& t, int64_t begin, int64_t end) {
  std::vector<Box> boxes = flat_range_boxes(t.held, begin, end);
  if (t.shard.segments == 1 || t.held == t.shape) {
    const Box local = held_box(t);
    for (Box& b : boxes) b = translate(b, local.offset);
    return boxes;
  }
  // Blocks along dim 0: a local box is cut at block boundaries and each part placed in its
  // block (local rows of block s: [s·ls, (s+1)·ls) -> global s·gs + index·ls + ...). The parts
  // of one box follow each other in the flat order because dim 0 is the outermost.
  SM_CHECK(t.shard.dim == 0, t.kind << " '" << t.name << "': blocks only along dim 0");
  const int64_t ls = t.held[0] / t.shard.segments, gs = t.shape[0] / t.shard.segments;
  std::vector<Box> out;
  for (const Box& b : boxes) {
    const int64_t lo = b.offset[0], hi = b.offset[0] + b.count[0];
    for (int64_t s = lo / ls; s * ls < hi; ++s) {
      const int64_t a = std::max(lo, s * ls), z = std::min(hi, (s + 1) * ls);
      Box part = b;
      part.offset[0] = s * gs + t.shard.index * ls + (a - s * ls);
      part.count[0] = z - a;
      out.push_back(part);
    }
  }
  return out;
}

Held held_of(const Param& p) { return Held{"parameter", p.name, p.shape, p.local_shape, p.shard}; }

// The TensorShards of `path` for elements [begin, end) of p's local flattening held in `data`
// (end - begin elements, or undefined when begin == end): one per box, each a view of `data`;
// one shard with an empty box when the range is empty, so every rank still lists the path.
void append_param_range_shards(std::vector<TensorShard>& out, const std::string& path, const Param& p, DType dtype,
                               int64_t begin, int64_t end, const Tensor& data) {
  std::vector<Box> boxes = param_range_boxes(p, begin, end);
  if (boxes.empty()) {
    out.push_back(TensorShard{path, p.shape, dtype, empty_box(p.shape.size()), Tensor()});
    return;
  }
  SM_CHECK(data.defined() && data.numel() == end - begin,
           "'" << path << "': elements [" << begin << ", " << end << ") held in a tensor of "
               << (data.defined() ? data.numel() : 0));
  const Tensor flat = data.view({data.numel()});
  int64_t pos = 0;
  for (Box& b : boxes) {
    const int64_t n = b.numel();
    out.push_back(TensorShard{path, p.shape, dtype, std::move(b), flat.slice0(pos, pos + n)});
    pos += n;
  }
}

}  // namespace

std::vector<FlatPiece> flat_range_pieces(const std::vector<const Param*>& params, int64_t begin, int64_t end) {
  SM_CHECK(0 <= begin && begin <= end, "flat range [" << begin << ", " << end << ")");
  std::vector<FlatPiece> out;
  out.reserve(params.size());
  int64_t start = 0;  // first flat element of the current parameter
  for (const Param* p : params) {
    const int64_t n = shape_numel(p->local_shape);
    const int64_t lo = std::max(begin, start), hi = std::min(end, start + n);
    FlatPiece fp;
    if (lo < hi) {
      fp.offset = lo - start;
      fp.count = hi - lo;
      fp.flat_pos = lo - begin;
    }
    out.push_back(fp);
    start += n;
  }
  return out;
}

std::vector<FlatPiece> flat_range_pieces(const std::vector<Param*>& params, int64_t begin, int64_t end) {
  return flat_range_pieces(std::vector<const Param*>(params.begin(), params.end()), begin, end);
}

Box param_local_box(const Param& p) { return held_box(held_of(p)); }

std::vector<Box> param_range_boxes(const Param& p, int64_t begin, int64_t end) {
  return held_range_boxes(held_of(p), begin, end);
}

std::vector<Box> buffer_held_boxes(const Buffer& b) {
  if (!b.shard.sharded()) return {full_box(b.held_shape())};
  return held_range_boxes(Held{"buffer", b.name, b.shape, b.held_shape(), b.shard}, 0, shape_numel(b.held_shape()));
}

std::vector<PlacedPiece> flat_range_pieces_of(const Param& p, int64_t begin, int64_t end, int64_t pos) {
  std::vector<PlacedPiece> out;
  for (const Box& b : param_range_boxes(p, begin, end)) {
    out.push_back(PlacedPiece{&p, b, pos});
    pos += b.numel();
  }
  return out;
}

void append_flat_shards(std::vector<TensorShard>& out, const std::vector<Param*>& params, int64_t begin,
                        int64_t end, const Tensor& shard, const std::string& state_name) {
  const std::vector<FlatPiece> pieces = flat_range_pieces(params, begin, end);
  int64_t used = 0;  // elements of `shard` that belong to some parameter
  for (const FlatPiece& fp : pieces)
    if (fp.count) used = std::max(used, fp.flat_pos + fp.count);
  SM_CHECK(used == 0 || (shard.defined() && shard.numel() >= used),
           "flat shard [" << begin << ", " << end << ") needs " << used << " elements, the tensor holds "
                          << (shard.defined() ? shard.numel() : 0));
  const Tensor flat = used ? shard.view({shard.numel()}) : Tensor();
  for (size_t i = 0; i < params.size(); ++i) {
    const Param* p = params[i];
    const FlatPiece& fp = pieces[i];
    const std::string path = state_name.empty() ? param_dataset_path(p->name) : optim_dataset_path(p->name, state_name);
    const DType dt = shard.defined() ? shard.dtype() : p->value.dtype();
    append_param_range_shards(out, path, *p, dt, fp.offset, fp.offset + fp.count,
                              fp.count ? flat.slice0(fp.flat_pos, fp.flat_pos + fp.count) : Tensor());
  }
}

}  // namespace sm
