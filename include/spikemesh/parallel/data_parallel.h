// data_parallel.h — DDP-style data parallelism (docs/architecture.md §7 "DP"): every rank holds the
// whole model; gradients are cut into buckets of about --bucket-mb, in backward order (last unit
// first), and each bucket's async all-reduce (average over the dp comm) starts as soon as
// every unit it covers has finished backward, overlapping the rest of backward. With
// gradient accumulation only the last micro-step reduces (the others accumulate locally).
// Invariants: a bucket is a list of contiguous slices of units' flat grad buffers; a bucket
// of one slice is reduced in place, a bucket of several is packed into its own buffer and
// unpacked after the wait; every gradient element is in exactly one bucket.
#pragma once
#include <memory>
#include <vector>

#include "spikemesh/comm/comm.h"
#include "spikemesh/parallel/strategy.h"

namespace sm {

class DataParallel final : public ParallelStrategy {
 public:
  // Collective over `dp`: verifies that every rank starts from identical parameters.
  DataParallel(Stage& stage, Comm& dp, double bucket_mb);
  std::string name() const override { return "dp"; }
  std::vector<Param*> optimizer_params() override;
  std::vector<ParamPlacement> placements(bool saving) override;
  bool holds_replicated(bool saving) const override { return !saving || dp_.rank() == 0; }

  void begin_step() override;
  void after_backward(size_t unit) override;
  void end_backward() override;
  StrategyStats stats() const override { return stats_; }

  // Bucket layout (tests): number of buckets and each bucket's element count.
  std::vector<int64_t> bucket_sizes() const;

 private:
  struct Segment {
    size_t unit;
    int64_t begin, end;  // range of the unit's flat grad
  };
  struct Bucket {
    std::vector<Segment> segments;
    std::vector<size_t> units;  // distinct units covered
    int64_t numel = 0;
    int pending = 0;            // units still in backward
    Tensor buffer;              // packed [numel] (several segments) or the in-place view
    std::unique_ptr<CommHandle> handle;
  };
  void launch(Bucket& b);

  Model& model_;
  Stage& stage_;
  Comm& dp_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<size_t>> buckets_of_unit_;
  StrategyStats stats_;
};

}  // namespace sm
