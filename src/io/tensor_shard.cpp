// tensor_shard.cpp — dataset paths of the checkpoint format and the conversion of flat-buffer
// chunks (ZeRO/FSDP shards, tp-local or not) into per-parameter box shards (io/tensor_shard.h).
#include "spikemesh/io/tensor_shard.h"

#include <algorithm>

#include "spikemesh/core/error.h"

namespace sm {

std::string param_dataset_path(const std::string& param_name) { return "params/" + param_name; }
std::string buffer_dataset_path(const std::string& buffer_name) { return "buffers/" + buffer_name; }
std::string optim_dataset_path(const std::string& param_name, const std::string& state_name) {
  return "optim/" + param_name + "/" + state_name;
}

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

Box param_local_box(const Param& p) {
  if (p.local_shape == p.shape) return full_box(p.shape);
  const int d = p.shard.dim;
  const bool ok = d >= 0 && static_cast<size_t>(d) < p.shape.size() && p.local_shape.size() == p.shape.size() &&
                  p.shard.count > 0 && 0 <= p.shard.index && p.shard.index < p.shard.count &&
                  p.shape[d] % p.shard.count == 0 && p.local_shape[d] == p.shape[d] / p.shard.count;
  bool others = ok;
  for (size_t i = 0; others && i < p.shape.size(); ++i)
    if (static_cast<int>(i) != d) others = p.local_shape[i] == p.shape[i];
  SM_CHECK(others, "parameter '" << p.name << "': local shape " << shape_str(p.local_shape) << " is not part "
                                 << p.shard.index << " of " << p.shard.count << " of " << shape_str(p.shape)
                                 << " split along dim " << d);
  SM_CHECK(p.shard.segments == 1, "parameter '" << p.name << "' is split in " << p.shard.segments
                                                  << " blocks: it has no single box (param_range_boxes)");
  Box b = full_box(p.local_shape);
  b.offset[d] = p.shard.index * (p.shape[d] / p.shard.count);
  return b;
}

std::vector<Box> param_range_boxes(const Param& p, int64_t begin, int64_t end) {
  std::vector<Box> boxes = flat_range_boxes(p.local_shape, begin, end);
  if (p.shard.segments == 1 || p.local_shape == p.shape) {
    const Box local = param_local_box(p);
    for (Box& b : boxes) b = translate(b, local.offset);
    return boxes;
  }
  // Blocks along dim 0: a local box is cut at block boundaries and each part placed in its
  // block (local rows of block s: [s·ls, (s+1)·ls) -> global s·gs + index·ls + ...). The parts
  // of one box follow each other in the flat order because dim 0 is the outermost.
  SM_CHECK(p.shard.dim == 0, "parameter '" << p.name << "': blocks only along dim 0");
  const int64_t ls = p.local_shape[0] / p.shard.segments, gs = p.shape[0] / p.shard.segments;
  std::vector<Box> out;
  for (const Box& b : boxes) {
    const int64_t lo = b.offset[0], hi = b.offset[0] + b.count[0];
    for (int64_t s = lo / ls; s * ls < hi; ++s) {
      const int64_t a = std::max(lo, s * ls), z = std::min(hi, (s + 1) * ls);
      Box part = b;
      part.offset[0] = s * gs + p.shard.index * ls + (a - s * ls);
      part.count[0] = z - a;
      out.push_back(part);
    }
  }
  return out;
}

void append_param_range_shards(std::vector<TensorShard>& out, const std::string& path, const Param& p, DType dtype,
                               int64_t begin, int64_t end, const Tensor& data) {
  std::vector<Box> boxes = param_range_boxes(p, begin, end);
  if (boxes.empty()) {
    TensorShard s;
    s.path = path;
    s.shape = p.shape;
    s.dtype = dtype;
    s.box = empty_box(p.shape.size());
    out.push_back(std::move(s));
    return;
  }
  SM_CHECK(data.defined() && data.numel() == end - begin,
           "'" << path << "': elements [" << begin << ", " << end << ") held in a tensor of "
               << (data.defined() ? data.numel() : 0));
  const Tensor flat = data.view({data.numel()});
  int64_t pos = 0;
  for (Box& b : boxes) {
    TensorShard s;
    s.path = path;
    s.shape = p.shape;
    s.dtype = dtype;
    s.data = flat.slice0(pos, pos + b.numel());
    pos += b.numel();
    s.box = std::move(b);
    out.push_back(std::move(s));
  }
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
