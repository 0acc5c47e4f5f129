// placement.h — THE shard-to-box arithmetic: where the pieces of every logical parameter and
// buffer live on this rank, as N-d boxes of the full logical tensors (core/box.h). The shared
// language between a layout (which knows the sharding), the checkpoint writer/reader (which
// knows files and boxes only: io/tensor_shard.h) and the optimizer (which knows its state
// tensors). No communication.
//
// Tensor parallelism: a Param (or Buffer) holds `local_shape` of its logical `shape`, cut by
// its ShardSpec: split along shard.dim into shard.count equal parts, part shard.index; with
// shard.segments > 1 (dim 0 only) every one of the `segments` equal blocks is so cut and the
// rank holds its part of each block (Spikformer's fused q, k, v).
// Flat buffers: a unit's flat buffer lays its params out back to back in params() order, each
// shape_numel(p->local_shape) elements — the tp-local tensor of a tensor-parallel parameter
// (layers/unit.h); ZeRO/FSDP cut that buffer into dp equal chunks that cross parameter
// boundaries (flat_range_pieces), and a chunk of a parameter's local flattening is a short
// list of boxes of its logical tensor (param_range_boxes).
//
// A `holder` is a Param the optimizer steps on this rank: a model Param (replicated or
// tensor-parallel local) or a 1-d shard view (ZeRO/FSDP). Each PlacedPiece says which box of
// which logical parameter a contiguous run of the holder's flattened value holds: elements
// [pos, pos + box.numel()) of the holder, row-major within the box. Every optimizer state
// tensor of a holder (same numel as its value) is placed identically.
// Invariant: over all ranks that WRITE (saving == true), the boxes of each logical parameter
// tile it exactly once; when loading, every rank lists the boxes it needs (overlaps allowed).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/box.h"
#include "spikemesh/io/tensor_shard.h"
#include "spikemesh/layers/layer.h"
#include "spikemesh/layers/param.h"

namespace sm {

// ---- tensor-parallel shards and flat ranges -------------------------------------------------

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
// p->shard.count equal parts, part p->shard.index (checked; one block only).
Box param_local_box(const Param& p);
// The boxes, in p->shape coordinates, of elements [begin, end) of p's row-major LOCAL
// flattening (flat_range_boxes in local coordinates, translated by the tp offset; with
// segments, cut at block boundaries), in order; their elements, row-major within each box,
// are those elements in order. None when empty.
std::vector<Box> param_range_boxes(const Param& p, int64_t begin, int64_t end);
// The boxes, in b.shape coordinates, of the whole of b.value (b.held_shape()), in b.value's
// flat order: the whole tensor unless b is tp-sharded; then its tp shard, one box per block.
std::vector<Box> buffer_held_boxes(const Buffer& b);

// ---- placed pieces ----------------------------------------------------------------------------

struct PlacedPiece {
  const Param* logical = nullptr;  // the model's Param: name and full logical shape
  Box box;                         // part of the logical tensor (empty: this rank holds none)
  int64_t pos = 0;                 // first element in the holder's flattened value
};

struct ParamPlacement {
  Param* holder = nullptr;          // null when this rank holds nothing of these pieces
  std::vector<PlacedPiece> pieces;  // in the holder's flat order
};

// Pieces of the flat range [begin, end) of `p`'s local (tp) flattening, placed in the logical
// tensor (param_range_boxes), starting at holder position `pos`; nothing when the range is
// empty. A whole replicated or tp-local tensor: [0, shape_numel(p.local_shape)).
std::vector<PlacedPiece> flat_range_pieces_of(const Param& p, int64_t begin, int64_t end, int64_t pos);

// ---- flat chunks as checkpoint tensors (tools and tests that build shard lists by hand) ------

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
