// placement.h — where the pieces of every logical parameter live on this rank: the shared
// language between a layout (which knows the sharding) and the checkpoint writer/reader
// (which knows files) and the optimizer (which knows its state tensors). No communication.
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
#include <vector>

#include "spikemesh/core/box.h"
#include "spikemesh/io/tensor_shard.h"
#include "spikemesh/layers/param.h"

namespace sm {

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
// tensor (io/tensor_shard.h param_range_boxes), starting at holder position `pos`; nothing
// when the range is empty. A whole replicated or tp-local tensor: param_local_box(p).
std::vector<PlacedPiece> flat_range_pieces_of(const Param& p, int64_t begin, int64_t end, int64_t pos);

}  // namespace sm
