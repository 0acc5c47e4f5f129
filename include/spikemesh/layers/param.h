// param.h — a named parameter: a view into its unit's flat value and gradient buffers.
// `shape` is the full logical shape (as in a PyTorch state dict); `local_shape` is what this
// rank holds after sharding (equal to `shape` when unsharded). Names follow the
// PyTorch/SpikingJelly state-dict convention, e.g. "features.3.0.weight".
#pragma once
#include <string>

#include "spikemesh/core/tensor.h"

namespace sm {

// Which dimension of the logical tensor is split, and over which group of ranks.
struct ShardSpec {
  enum class Group { None, TP, DP, TPxDP };
  Group group = Group::None;
  int dim = -1;          // split dimension of the logical shape; -1 = replicated
  int index = 0;         // this rank's shard index in the group
  int count = 1;         // number of shards
  // The split dim is `segments` equal blocks, each cut into `count` pieces; this rank holds
  // piece `index` of every block (Spikformer's fused q, k, v split by heads: segments 3).
  // segments > 1 only with dim 0.
  int segments = 1;
  bool sharded() const { return group != Group::None && count > 1; }
};

// How a parameter is initialised, element by element from its global index.
struct InitSpec {
  enum class Kind { Constant, Normal, Uniform, TruncNormal };
  Kind kind = Kind::Constant;
  double a = 0.0;  // Constant: value; Normal/TruncNormal: mean; Uniform: low
  double b = 0.0;  // Normal/TruncNormal: std; Uniform: high
  static InitSpec constant(double v) { return {Kind::Constant, v, 0.0}; }
  static InitSpec normal(double mean, double std) { return {Kind::Normal, mean, std}; }
  static InitSpec uniform(double lo, double hi) { return {Kind::Uniform, lo, hi}; }
  // Truncated to [mean - 2 std, mean + 2 std] (timm's trunc_normal_ with std 0.02 cuts at ±2).
  static InitSpec trunc_normal(double mean, double std) { return {Kind::TruncNormal, mean, std}; }
};

struct Param {
  std::string name;       // full state-dict name, set when the unit is finalised
  std::string local_name; // name within its layer, e.g. "weight"
  Shape shape;            // full logical shape
  Shape local_shape;      // this rank's shard
  ShardSpec shard;
  InitSpec init;
  bool weight_decay = true;  // PyTorch default: decay every parameter
  // Replicated over tp, but each tp rank's gradient covers only its channel shard (PLIF's w
  // inside a tensor-parallel region): the layout sums the gradient over tp after backward.
  bool grad_summed_over_tp = false;
  Tensor value;           // view into the unit's flat value buffer, local_shape
  Tensor grad;            // view into the unit's flat grad buffer, local_shape
};

// Fill p.value from its InitSpec: element i of the logical tensor is drawn from
// CounterRng(seed, "init/" + p.name) at index i, so every layout starts identical.
void init_param(Param& p, uint64_t seed);

}  // namespace sm
