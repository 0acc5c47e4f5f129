// fsdp.h — fully sharded data parallelism (ZeRO-3, docs/architecture.md §7 "FSDP") over the dp
// comm. Each unit's flat parameter buffer is split over dp (flat_shard.h); a rank keeps only its
// chunk (the f32/f64 master copy, the optimizer steps it in place) and its gradient chunk.
//   forward:  before unit u runs its parameters are all-gathered (waiting on a prefetch when
//             one is in flight) and the gather of the next unit with parameters is started;
//             after u, its gathered copy is freed when reshard_after_forward (the last unit
//             is kept: its backward comes next), or kept until its backward otherwise.
//   backward: u is gathered again if it was freed (prefetching the unit before it), its full
//             gradient is allocated, and after its backward the gradient is reduce-scattered
//             (average over dp, in the reduce dtype) asynchronously; the gathered values and
//             the full gradient are freed. Every micro-step's reduce-scatters finish in
//             end_backward() and accumulate into the gradient chunk (no no_sync mode).
//   eval:     gather before, free after every unit.
// Mixed precision (CPU): param_dtype is the dtype parameters are gathered in (f32, f64 or
// bf16); gathered values are converted to the model dtype for the layers, i.e. rounded to
// param_dtype. reduce_dtype is the dtype of the gradient reduce-scatter (bf16 reduces in f32
// and rounds once, comm.h). Neither may be wider than the model dtype.
// Memory: with reshard_after_forward, parameter storage per rank is the chunk buffers
// (full/dp) plus at most two gathered units at a time (the running one and the prefetched
// one); without it, or when the backward is split into B and W (a unit's gradient is
// reduced after its W), every unit stays gathered from its forward to its backward. The strategy
// tracks the peak of these bytes (stats().param_peak_mb; gradients are not counted).
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/comm/comm.h"
#include "spikemesh/parallel/comm_collectives.h"
#include "spikemesh/parallel/flat_shard.h"
#include "spikemesh/parallel/strategy.h"

namespace sm {

class Fsdp final : public ParallelStrategy {
 public:
  // Collective over `dp`: checks identical initial replicas, then shards every unit and frees
  // the full flat buffers.
  Fsdp(Stage& stage, Comm& dp, bool reshard_after_forward, DType param_dtype, DType reduce_dtype);
  ~Fsdp() override;
  std::string name() const override { return "fsdp"; }
  std::vector<Param*> optimizer_params() override { return shards_.params(); }
  Collectives* shard_group() override { return &group_; }
  std::vector<ParamPlacement> placements(bool) override { return shards_.placements(); }
  bool holds_replicated(bool saving) const override { return !saving || dp_.rank() == 0; }
  bool replicated_params() const override { return false; }

  void begin_step() override;
  void before_forward(size_t unit, bool training) override;
  void after_forward(size_t unit, bool training) override;
  void before_backward(size_t unit) override;
  void after_backward(size_t unit) override;
  void end_backward() override;
  void gather_full_params() override;
  void release_full_params() override;
  StrategyStats stats() const override;

 private:
  struct UnitState {
    bool has_params = false;
    UnitShardLayout layout;
    Tensor shard_value;   // [chunk] master (model dtype)
    Tensor shard_grad;    // [chunk]
    Tensor gathered;      // [padded] model dtype, bound to the unit's Params while defined
    Tensor send, recv;    // staging of a gather in param_dtype ([chunk], [padded])
    std::unique_ptr<CommHandle> gather;  // prefetch in flight
    Tensor full_grad;     // [padded] model dtype, from before_backward to after_backward
    Tensor reduce_in;     // [padded] reduce dtype (when it differs from the model dtype)
    Tensor reduce_out;    // [chunk] reduce dtype
    std::unique_ptr<CommHandle> reduce;
  };
  void start_gather(size_t k);
  void ensure_gathered(size_t k);
  void release(size_t k);
  size_t next_with_params(size_t k, int dir) const;  // units_.size() when none
  void account(int64_t bytes);

  Model& model_;
  Stage& stage_;
  Comm& dp_;
  CommCollectives group_;
  bool reshard_after_forward_;
  DType param_dtype_, reduce_dtype_, model_dtype_;
  std::vector<UnitState> units_;
  ShardParams shards_;
  int64_t live_bytes_ = 0, peak_bytes_ = 0;
  StrategyStats stats_;
};

}  // namespace sm
