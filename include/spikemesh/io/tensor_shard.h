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
// io/ knows tensors and boxes only: which boxes a parameter's shard covers (tensor and data
// parallelism, flat buffers) is parallel/placement.h's arithmetic.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/box.h"
#include "spikemesh/core/tensor.h"

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

}  // namespace sm
