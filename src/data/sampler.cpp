// sampler.cpp — per-epoch Fisher–Yates permutation from the counter-based RNG.
#include "spikemesh/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "spikemesh/core/error.h"
#include "spikemesh/core/rng.h"

namespace sm {

EpochSampler::EpochSampler(int64_t n, int64_t batch, uint64_t seed, bool shuffle, bool drop_last)
    : n_(n), batch_(batch), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  SM_CHECK(batch > 0, "global batch must be positive");
}

int64_t EpochSampler::batches_per_epoch() const {
  return drop_last_ ? n_ / batch_ : (n_ + batch_ - 1) / batch_;
}

const std::vector<int64_t>& EpochSampler::permutation(int64_t epoch) {
  if (epoch == cached_epoch_) return perm_;
  perm_.resize(n_);
  std::iota(perm_.begin(), perm_.end(), 0);
  if (shuffle_) {
    CounterRng rng(seed_, "shuffle");
    for (int64_t i = n_ - 1; i > 0; --i) {
      auto j = static_cast<int64_t>(rng.uniform(static_cast<uint64_t>(i), static_cast<uint32_t>(epoch)) * (i + 1));
      std::swap(perm_[i], perm_[std::min(j, i)]);
    }
  }
  cached_epoch_ = epoch;
  return perm_;
}

std::vector<int64_t> EpochSampler::batch_indices(int64_t epoch, int64_t b, int dp_rank, int dp_size) {
  SM_CHECK(b >= 0 && b < batches_per_epoch(), "batch " << b << " of " << batches_per_epoch());
  const auto& p = permutation(epoch);
  int64_t begin = b * batch_, end = std::min(n_, begin + batch_);
  int64_t len = end - begin;
  int64_t per = len / dp_size, extra = len % dp_size;
  int64_t my_begin = begin + dp_rank * per + std::min<int64_t>(dp_rank, extra);
  int64_t my_len = per + (dp_rank < extra ? 1 : 0);
  return std::vector<int64_t>(p.begin() + my_begin, p.begin() + my_begin + my_len);
}

}  // namespace sm
