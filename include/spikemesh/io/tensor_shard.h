// tensor_shard.h — "which part of which logical tensor does this rank hold": the unit of
// exchange between the layouts (parallel/: DP, ZeRO, FSDP, TP) and the checkpoint writer and
// reader (io/checkpoint.h), plus the dataset paths of the checkpoint format.
// A TensorShard names one logical tensor of a checkpoint (its dataset path, full logical
// shape and file dtype, identical on every rank) and one N-d box of it (core/box.h) with the
// data of that box, row-major within the box. A rank may list one path several times (a
// flat range of a tensor is several boxes); every rank lists every path at least once (an
// empty box when it holds nothing of it). Writer invariant: the boxes of all ranks tile each
// tensor exactly (disjoint, covering). Readers may ask for overlapping boxes (every rank
// reading a replicated tensor whole).
// A unit's flat buffer lays its params out back to back in params() order, each
// shape_numel(p->local_shape) elements — the tp-local tensor of a tensor-parallel parameter
// (layers/unit.h); ZeRO/FSDP cut that buffer into dp equal chunks that cross parameter
// boundaries. append_flat_shards() turns one such chunk into per-parameter box shards, placing
// a tp-local tensor at its tp offset in the logical one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/box.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/param.h"

namespace sm {

struct TensorShard {
  std::string path;          // "params/<name>", "buffers/<name>", "optim/<param>/<state>" (*_dataset_path)
  Shape shape;               // full logical shape (scalar: {})
  DType dtype = DType::F32;  // element type in the file: f32, f64, i32, i64 or u8
  Box box;                   // the part of the logical tensor held here; box.empty(): nothing
                             // (use empty_box(shape.size()); a default Box is the whole of a scalar)
  // box.numel() elements, row-major within the box (any shape with that numel; CPU or CUDA).
  // Saving: dtype == `dtype`, or any floating dtype when `dtype` is f32/f64 (converted on the
  // host). Loading: the destination (the file's element type is converted to data's dtype);
  // usually a view into a flat buffer (shares storage), so a load fills it in place.
  Tensor data;
};

// Version of the root attributes model / format = "spikemesh-state-dict" / format_version /
// dtype that checkpoints and state-dict files carry (models/state_dict.h writes the same).
constexpr int kStateDictFormatVersion = 1;

// Dataset paths of the checkpoint format (docs/architecture.md §8).
std::string param_dataset_path(const std::string& param_name);   // "params/<name>"
std::string buffer_dataset_path(const std::string& buffer_name); // "buffers/<name>"
std::string optim_dataset_path(const std::string& param_name, const std::string& state_name);  // "optim/<p>/<s>"

// Where [begin, end) of a flat buffer (params laid out back to back, shape_numel(p->local_shape)
// each) falls in each parameter. One entry per parameter of `params`, in order: the range
// [offset, offset + count) of that parameter's flattened LOCAL tensor (the tp shard when
// tensor-parallel), and `flat_pos`, the position of its first element relative to `begin`
// (i.e. in the shard). count == 0 where the parameter lies outside [begin, end). Elements at or
// beyond the total (padding that makes the buffer divisible by dp) belong to no parameter.
struct FlatPiece {
  int64_t offset = 0, count = 0, flat_pos = 0;
};
std::vector<FlatPiece> flat_range_pieces(const std::vector<const Param*>& params, int64_t begin, int64_t end);
std::vector<FlatPiece> flat_range_pieces(const std::vector<Param*>& params, int64_t begin, int64_t end);

// The box of p's logical tensor (p->shape) that p->value (p->local_shape) holds: the whole
// tensor when p->local_shape == p->shape; else the tp shard, split along p->shard.dim into
// p->shard.count equal parts, part p->shard.index (checked).
Box param_local_box(const Param& p);
// The boxes, in p->shape coordinates, of elements [begin, end) of p's row-major LOCAL
// flattening (flat_range_boxes in local coordinates, translated by the tp offset), in order;
// their elements, row-major within each box, are those elements in order. None when empty.
std::vector<Box> param_range_boxes(const Param& p, int64_t begin, int64_t end);

// Appends the TensorShards of `path` (shape p.shape, file dtype `dtype`) for elements
// [begin, end) of p's local flattening held in `data` (end - begin elements, or undefined when
// begin == end): one per box of param_range_boxes, each `data` a view (slice) of `data`;
// one shard with an empty box when the range is empty, so every rank still lists the path.
void append_param_range_shards(std::vector<TensorShard>& out, const std::string& path, const Param& p, DType dtype,
                               int64_t begin, int64_t end, const Tensor& data);

// Appends the shards of every parameter of `params` (a unit's params, in params() order) for
// the flat range [begin, end) of the unit's flat buffer held in `shard` ([end - begin] or
// longer: this rank's chunk of the flat buffer or of a flat optimizer-state buffer):
// path = param_dataset_path(p->name) when `state_name` is empty, else
// optim_dataset_path(p->name, state_name); shape = p->shape; dtype = shard's dtype. A
// parameter whose piece is several boxes yields several TensorShards of one path (views of
// `shard`, so a load fills `shard` in place); one that the range misses yields one shard
// with an empty box. Tensor-parallel parameters: see param_range_boxes.
void append_flat_shards(std::vector<TensorShard>& out, const std::vector<Param*>& params, int64_t begin,
                        int64_t end, const Tensor& shard, const std::string& state_name = "");

}  // namespace sm
