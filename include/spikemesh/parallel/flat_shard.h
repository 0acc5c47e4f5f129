// flat_shard.h — how a unit's flat parameter buffer is split over a data-parallel group
// (ZeRO and FSDP), the shard Params handed to a normal Optimizer, and the small dtype casts
// the FSDP mixed-precision policy needs. No communication here except waiting for a
// reduction already in flight (finish_shard_reduction).
//
// Layout of one unit over p ranks: the flat buffer (numel n, params in Unit::params() order)
// is padded with zeros to n_pad = padded_numel(n, p); rank r owns elements
// [r·chunk, (r+1)·chunk), chunk = n_pad / p. A Param intersects a chunk in one contiguous
// range of its row-major flattening, so each shard Param is a 1-d view into the rank's
// shard buffers; optimizers are element-wise, so stepping shards equals stepping the whole.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "spikemesh/comm/comm.h"
#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/param.h"
#include "spikemesh/parallel/strategy.h"

namespace sm {

class Model;
class Unit;

struct UnitShardLayout {
  int64_t numel = 0;   // the unit's parameter elements (unpadded)
  int64_t padded = 0;  // numel rounded up to a multiple of the group size
  int64_t chunk = 0;   // padded / group size
  int64_t begin = 0;   // this rank's chunk: [begin, begin + chunk) of the padded buffer
};
UnitShardLayout unit_shard_layout(int64_t numel, int rank, int size);
// Calls f(k, unit, layout) for every unit k of `stage` that has parameters, with its layout
// over `rank` of `size` ranks (ZeRO's and FSDP's set-up walk). Local.
void for_each_unit_to_shard(Stage& stage, int rank, int size,
                            const std::function<void(size_t, Unit&, const UnitShardLayout&)>& f);

// Rebinds every Param of `u` to views of `flat_value` / `flat_grad` (either may be undefined:
// the Params' tensors become undefined too) at their offsets in params() order, and makes
// them the unit's flat buffers. The buffers may be longer than the unit's numel (padding).
void bind_unit_flat(Unit& u, const Tensor& flat_value, const Tensor& flat_grad);
// The unit's parameter element count from the Params' local shapes (unaffected by padding).
int64_t unit_param_numel(Unit& u);

// Shard Params of one rank over a set of units: each a 1-d view into the unit's shard value
// and shard grad buffers ([chunk] each), named like the full parameter.
class ShardParams {
 public:
  // One entry per full parameter of the added units, in order: its shard Param on this rank
  // (null when the chunk misses it) and the range [offset, offset + count) of its row-major
  // flattening that the shard holds.
  struct Entry {
    Param* full = nullptr;
    Param* shard = nullptr;
    int64_t offset = 0, count = 0;
  };
  // Adds the pieces of u's params inside `lay`'s chunk; shard_value/shard_grad are [chunk].
  void add_unit(Unit& u, const UnitShardLayout& lay, const Tensor& shard_value, const Tensor& shard_grad);
  std::vector<Param*> params();
  const std::vector<Entry>& entries() const { return entries_; }
  // Every shard Param with the boxes of its parameter it holds (placement.h); a parameter
  // this rank holds nothing of is listed with a null holder.
  std::vector<ParamPlacement> placements() const;

 private:
  std::vector<std::unique_ptr<Param>> params_;
  std::vector<Entry> entries_;
};

// Waits for a unit's in-flight gradient reduce-scatter `h` (if any; reset afterwards) and
// adds its result `received` into `shard_grad` (null: it reduced into the shard itself).
// Returns whether there was one.
bool finish_shard_reduction(std::unique_ptr<CommHandle>& h, Tensor& shard_grad, const Tensor* received);

// Element-wise casts between tensors of equal numel on one device: f32, f64 and bf16 (round
// to nearest even; NaN stays NaN; CUDA: f32, bf16, f16). Same dtype: a plain copy.
void cast_copy(const Tensor& src, Tensor& dst);
// dst += src (f32/f64 dst; src f32, f64 or bf16), element-wise in dst's type; on CUDA an f32
// dst, enqueued on the device's compute stream.
void add_into(Tensor& dst, const Tensor& src);
// Rounds every element of an f32/f64 tensor to bf16 precision and back (in place).
void round_through_bf16(Tensor& t);

}  // namespace sm
