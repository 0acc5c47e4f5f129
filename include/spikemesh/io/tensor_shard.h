// tensor_shard.h — "which part of which logical tensor does this rank hold": the unit of
// exchange between parallel/ (ZeRO, FSDP, DP) and the sharded checkpoint writer/reader
// (io/checkpoint.h).
// A TensorShard names one logical tensor of a checkpoint (its dataset path, full logical
// shape and file dtype, identical on every rank) and the contiguous element range
// [offset, offset + count) of its row-major flattening that this rank holds, with the data.
// Invariants expected by the collective writer: every rank lists the same tensors in the
// same order; the ranges of the ranks are disjoint and together cover the tensor (a
// replicated tensor: one rank passes the whole range, the others count 0). Readers may ask
// for overlapping ranges (every rank reading a replicated tensor whole).
// A unit's flat buffer lays its params out back to back in params() order, each
// shape_numel(p->shape) elements (layers/unit.h); ZeRO/FSDP cut that buffer into dp equal
// chunks that cross parameter boundaries. append_flat_shards() turns one such chunk into
// per-parameter TensorShards.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/param.h"

namespace sm {

class Model;
class Optimizer;

struct TensorShard {
  std::string path;          // dataset path in the file, relative to its root (see *_dataset_path)
  Shape shape;               // full logical shape (scalar: {})
  DType dtype = DType::F32;  // element type in the file: f32, f64, i32, i64 or u8
  int64_t offset = 0;        // first element of the row-major flattened logical tensor held here
  int64_t count = 0;         // elements held here; 0: none (the rank still takes part)
  // Saving: the `count` elements, in order (any shape with numel == count; CPU or CUDA;
  // dtype == `dtype`, or any floating dtype when `dtype` is f32/f64: converted on the host).
  // Loading: the destination, same rules (the file's element type is converted to data's
  // dtype). Usually a view into a flat buffer (shares storage), so a load fills it in place.
  Tensor data;
};

// Dataset paths of the checkpoint format (DESIGN §7, the single-rank format).
std::string param_dataset_path(const std::string& param_name);   // "params/<name>"
std::string buffer_dataset_path(const std::string& buffer_name); // "buffers/<name>"
std::string optim_dataset_path(const std::string& param_name, const std::string& state_name);  // "optim/<p>/<s>"

// Where [begin, end) of a flat buffer (params laid out back to back, shape_numel(p->shape)
// each) falls in each parameter. One entry per parameter of `params`, in order: the range
// [offset, offset + count) of that parameter's flattened logical tensor, and `flat_pos`, the
// position of its first element relative to `begin` (i.e. in the shard). count == 0 where the
// parameter lies outside [begin, end). Elements at or beyond the total (padding that makes
// the buffer divisible by dp) belong to no parameter and are ignored.
struct FlatPiece {
  int64_t offset = 0, count = 0, flat_pos = 0;
};
std::vector<FlatPiece> flat_range_pieces(const std::vector<const Param*>& params, int64_t begin, int64_t end);
std::vector<FlatPiece> flat_range_pieces(const std::vector<Param*>& params, int64_t begin, int64_t end);

// Appends one TensorShard per parameter of `params` (a unit's params, in params() order):
// path = param_dataset_path(p->name) when `state_name` is empty, else
// optim_dataset_path(p->name, state_name); shape = p->shape; dtype = shard's dtype; the range
// from flat_range_pieces(params, begin, end); data = a view of `shard` ([end - begin] or
// longer, this rank's chunk of the flat buffer or of a flat optimizer-state buffer; shares
// storage, so a load fills `shard` in place).
void append_flat_shards(std::vector<TensorShard>& out, const std::vector<Param*>& params, int64_t begin,
                        int64_t end, const Tensor& shard, const std::string& state_name = "");

// The whole state of an unsharded (replicated) model and optimizer as TensorShards, in the
// single-rank checkpoint's order: params, buffers, then every optimizer state tensor.
// `holds` true: this rank holds every tensor whole (count = numel; data views the model's and
// optimizer's own tensors, so a load writes into them). false: every count is 0 (a replica
// that does not write). Plain DP saves with holds = (dp rank == 0) and loads with holds = true.
// Parameters must be unsharded (p->shape == p->local_shape). `opt` may be null.
std::vector<TensorShard> replicated_state_shards(Model& model, Optimizer* opt, bool holds);

// Only the buffers (BN running stats, num_batches_tracked) as TensorShards: they are
// replicated under every layout. With ZeRO/FSDP, callers combine append_flat_shards for the
// params and optimizer state with buffer_shards(model, dp_rank == 0) for saving and
// buffer_shards(model, true) for loading.
std::vector<TensorShard> buffer_shards(Model& model, bool holds);

}  // namespace sm
