// strategy.h — the gradient-reduction pieces a Layout (parallel/layout.h) composes: one rank
// (no communication) and the data-parallel family (docs/architecture.md §7: DP, ZeRO-1/2, FSDP),
// behind one small interface of unit hooks (models/stage.h) the Stage's unit loop calls. Each
// strategy reaches the model only through its stage's units' flat buffers and Params, and the dp
// Comm it is given; unit indices are local to the stage.
//
// Protocol of one optimizer step (Layout follows it; the calls below may communicate over
// the dp comm, so every rank makes them in the same order; name, optimizer_params,
// placements, holds_replicated and stats are local):
//   begin_step()                                   zero every gradient this rank keeps
//   for micro-step m = 0 .. M-1 (last = m == M-1):
//     begin_micro(last)
//     for units u = 0 .. U-1:   before_forward(u, true);  unit forward;  after_forward(u, true)
//     for units u = U-1 .. 0:   before_backward(u);       unit backward; after_backward(u)
//     end_backward()     this micro-step's reductions finished; after the last micro-step
//                        the grads of optimizer_params() are final
//   optimizer.step()     on optimizer_params()
//   after_optimizer_step()   ZeRO/FSDP: parameters consistent again (all-gathered / resharded)
// Evaluation forward: before_forward(u, false); unit forward; after_forward(u, false).
//
// Gradient semantics: the loss gradient of every micro-step is scaled by 1/M
// (Layout::forward_backward is handed it), gradients are averaged over the dp group (ReduceOp::Avg), so the optimizer sees
// the gradient of the mean loss over the global batch (per-rank batch × dp × M samples).
//
// Invariants: after after_optimizer_step() every rank of the group holds bitwise identical
// replicas (DP, ZeRO) or its exact shard (FSDP); Comm::all_reduce is bitwise identical on
// every rank, and every rank steps identical inputs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/dtype.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/param.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/placement.h"

namespace sm {

class Comm;
class Model;

struct StrategyStats {
  int64_t grad_reductions = 0;    // async reductions started (buckets / unit shards)
  double param_peak_mb = 0;       // FSDP: peak bytes of parameter storage on this rank
  double param_full_mb = 0;       // every parameter, unsharded, in the model dtype
  double param_shard_mb = 0;      // this rank's parameter shards (ZeRO/FSDP)
  double largest_units_mb = 0;    // FSDP: the two largest units, gathered, in the compute dtype
};

class ParallelStrategy : public UnitHooks {
 public:
  ~ParallelStrategy() override = default;
  virtual std::string name() const = 0;  // "none" | "dp" | "zero" | "zero2" | "fsdp"

  // The Params the optimizer updates on this rank: the model's own (DP) or views into this
  // rank's shards (ZeRO/FSDP; names are the full parameter names, shapes 1-d).
  virtual std::vector<Param*> optimizer_params() = 0;
  // Non-null when optimizer_params() are disjoint shards over the dp group (global-norm
  // gradient clipping all-reduces its squared sum over it).
  virtual Collectives* shard_group() { return nullptr; }
  // Where each optimizer Param's elements sit in the logical parameters (placement.h).
  // saving: a replicated tensor is listed by dp rank 0 alone (the others: empty boxes);
  // loading: every rank lists what it holds. The holders' storage is this rank's, so a load
  // fills it in place; call after_load() afterwards.
  virtual std::vector<ParamPlacement> placements(bool saving) = 0;
  // Whether this rank writes (saving) / reads (loading) replicated tensors such as BN buffers.
  virtual bool holds_replicated(bool saving) const = 0;
  // Whether the ranks of the dp group hold identical parameter replicas (dp, ZeRO: checked
  // with checksums; FSDP: distinct shards).
  virtual bool replicated_params() const { return true; }
  // After a load into placements(false): ZeRO all-gathers the loaded shards into the
  // replicas. Collective over dp.
  virtual void after_load() {}

  virtual void begin_step() = 0;
  virtual void begin_micro(bool last) { last_micro_ = last; }
  // UnitHooks: before_forward, after_forward, before_backward, after_backward.
  virtual void end_backward() = 0;
  virtual void after_optimizer_step() {}

  // FSDP: gathers every unit so that the model's Params hold their full values (collective
  // over dp) until release_full_params(); the others always hold full values (no-ops).
  virtual void gather_full_params() {}
  virtual void release_full_params() {}

  virtual StrategyStats stats() const { return {}; }

 protected:
  bool last_micro_ = true;
};

// How gradients meet over dp, from --distributed-mode and --optimizer-sharding (the layout plan
// parses the names once: layout_plan.h).
enum class GradientReduction {
  AllReduce,  // dp: bucketed all-reduce, replicated optimizer state
  Zero1,      // ZeRO-1: optimizer state sharded
  Zero2,      // ZeRO-2: gradients reduce-scattered too
  Fsdp,       // parameters, gradients and optimizer state sharded
};
const char* gradient_reduction_name(GradientReduction r);

// How the dp family is configured (train flags).
struct StrategyOptions {
  std::string sharding = "none";    // --optimizer-sharding (dp only): none | zero | zero2
  double bucket_mb = 25.0;          // --bucket-mb (dp)
  bool reshard_after_forward = true;  // --fsdp-reshard-after-forward
  DType param_dtype = DType::F32;     // --fsdp-param-dtype (compute copy of gathered params)
  DType reduce_dtype = DType::F32;    // --fsdp-reduce-dtype (gradient reduce-scatter)
};

// The strategy of one rank: no communication, the stage's own Params, replicated placement.
std::unique_ptr<ParallelStrategy> make_single_rank_strategy(Stage& stage);
// Builds the dp-family strategy over a finalised model's stage. Collective over `dp` (checks
// that the initial replicas are identical; ZeRO/FSDP shard the flat buffers). The model and
// the stage must outlive it. Options are validated by validate_parallel_flags (layout.h).
std::unique_ptr<ParallelStrategy> make_strategy(Stage& stage, Comm& dp, GradientReduction reduction,
                                                const StrategyOptions& opts);

}  // namespace sm
