// sequence_parallel.h — tensor parallelism's sharding of the replicated regions over samples
// (docs/architecture.md §7 "TP", sequence parallelism). Activations are [T, N, ...]; after a
// ROWWISE layer the layers that follow (batch norm, neurons, pooling, flatten, mean: a REGION,
// parallel/tp_plan.h finds it) would run whole and identical on every tp rank. Instead:
//   forward   the rowwise layer REDUCE-SCATTERS its partial sums along N (T kept whole: neurons
//             run along time), so tp rank r holds samples [r·N/tp, (r+1)·N/tp) of every step;
//             the region runs on that shard (batch norm sums its statistics over tp); the
//             region's LAST layer ALL-GATHERS its output, whole again for what follows.
//   backward  the mirror image: the last layer takes its rows of the incoming gradient — a
//             reduce-scatter when the next layer is colwise and left its input gradient
//             unreduced (partial_grad_in), a slice when it is whole; the rowwise layer
//             all-gathers its output gradient before its own backward. That colwise layer
//             keeps only this rank's samples of its (gathered) input and all-gathers them again
//             for its weight gradient, so the region's cut reaches the tensor it saves too.
// Bytes: a rowwise all-reduce (2(tp-1)/tp of S) becomes a reduce-scatter of S and an
// all-gather of the region's output, (tp-1)/tp each; with partial_grad_in the colwise
// all-reduce of the backward becomes the last layer's reduce-scatter, plus the rowwise
// all-gather of S and the colwise layer's all-gather of its saved input.
// Whether a forward shards is decided per slot by the rowwise layer (N divisible by tp, no
// synced batch norm over another group, ctx.tp_shard_regions: memopt splits nothing) and read by every
// member through the shared SpRegion, so Ctx copies (memopt segments) cannot lose it.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/core/tensor.h"

namespace sm {

class Collectives;
struct Ctx;

struct SpRegion {
  bool partial_grad_in = false;  // the layer after the region leaves its input gradient unreduced
  bool sharded(int slot) const { return slot >= 0 && slot < static_cast<int>(sharded_.size()) && sharded_[slot]; }
  void set_sharded(int slot, bool s);
  // Whether some slot's last forward sharded (every slot decides alike for equal batches).
  bool any_sharded() const {
    for (char c : sharded_)
      if (c) return true;
    return false;
  }

 private:
  std::vector<char> sharded_;  // per microbatch slot
};

enum class SpRole {
  None,
  Start,          // the rowwise layer: reduce-scatter forward, all-gather of dy backward
  Member,         // runs on the shard (batch norm: statistics summed over tp)
  Last,           // a member that all-gathers its output and shards the incoming gradient
  DeferColwise,   // the colwise layer after a region with partial_grad_in: no all-reduce of dx
};

// Whether a layer of this role runs on the region's shard (Member or Last).
inline bool sp_member(SpRole r) { return r == SpRole::Member || r == SpRole::Last; }

struct SpLink {
  SpRole role = SpRole::None;
  std::shared_ptr<SpRegion> region;
  bool sharded(int slot) const { return region && region->sharded(slot); }
  // A member running on a shard: its batch norm sums statistics over tp.
  bool member_sharded(int slot) const { return sp_member(role) && sharded(slot); }
};

// The context a region member runs with: ctx.bn_sync becomes ctx.tp while its slot is sharded
// (batch norm then sums its statistics over the tp group); restores ctx on destruction.
class SpStatsScope {
 public:
  SpStatsScope(const SpLink& link, Ctx& ctx);
  ~SpStatsScope();
  SpStatsScope(const SpStatsScope&) = delete;
  SpStatsScope& operator=(const SpStatsScope&) = delete;

 private:
  Ctx& ctx_;
  Collectives* saved_;
};

// Time step t of x [T, N, ...] as a [1, N, ...] view (shares storage).
Tensor sp_step(const Tensor& x, int64_t t);

// x [T, N, ...] -> [T, N/tp, ...]: samples [rank·N/tp, (rank+1)·N/tp) of every step (a copy).
Tensor sp_rows_of(const Tensor& x, int rank, int tp);
// Collective over `tp` (one call per time step, T in all): x [T, N, ...] partial sums on every
// rank -> [T, N/tp, ...], this rank's samples summed over the group.
Tensor sp_reduce_scatter_rows(const Tensor& x, Collectives& tp);
// Collective over `tp` (one call per time step): x [T, n, ...] on every rank -> [T, tp·n, ...],
// rank r's rows at [r·n, (r+1)·n); keeps x's binary flag.
Tensor sp_all_gather_rows(const Tensor& x, Collectives& tp);

}  // namespace sm
