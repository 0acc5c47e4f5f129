// sampler.h — which samples form each global batch (docs/architecture.md §2). One permutation per
// epoch, a pure function of (seed, epoch), identical on every rank; a data-parallel rank takes its
// contiguous slice of each global batch. Training drops the last incomplete global batch so
// every step sees exactly `global_batch` samples whatever the layout.
#pragma once
#include <cstdint>
#include <vector>

namespace sm {

class EpochSampler {
 public:
  EpochSampler(int64_t num_samples, int64_t global_batch, uint64_t seed, bool shuffle, bool drop_last = true);
  int64_t batches_per_epoch() const;
  int64_t num_samples() const { return n_; }
  int64_t global_batch() const { return batch_; }
  // Global sample indices of batch `b` of `epoch` taken by dp rank `dp_rank` of `dp_size`
  // (the global batch must be divisible by dp_size; the last batch of an epoch without
  // drop_last is split as evenly as possible, earlier ranks taking one more).
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t b, int dp_rank = 0, int dp_size = 1);
  // The whole permutation of an epoch (identity when not shuffling).
  const std::vector<int64_t>& permutation(int64_t epoch);

 private:
  int64_t n_, batch_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace sm
