// augment.h — training-time augmentation (`--augment`, data/augment_spec.h) applied to the raw
// samples of a batch before encoding, on the prefetch thread (train/batch_io.h).
// Invariants (docs/architecture.md §3, docs/datasets.md "Augmentation"):
//  * every draw is a pure function of (seed, epoch, the sample's global index) through
//    core/rng.h's counter streams, never of the rank, the thread, the batch or its split into
//    ranks, micro-batches or stages: every layout and rank count sees the same augmented samples,
//    and a resumed run continues the same sequence;
//  * per sample the steps run in the spec's order, each firing with its probability; at most one
//    mixing step fires (the first listed that does), mixing the sample with a partner drawn
//    from the whole training split (not from the batch, so the partner does not depend on the
//    layout); the partner row goes through the same non-mixing steps with its own draws;
//  * spatial steps act on the last two axes (H, W) identically at every time step and channel;
//    timeshift on the time axis of event/spike data, jitter on the last axis;
//  * evaluation is never augmented.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/data/augment_spec.h"
#include "spikemesh/data/h5_dataset.h"

namespace sm {

// What a step did to one sample: the op and the parameters drawn (the preview writes them;
// its test re-applies them with an independent reference). v: translate/roll (dy, dx); rotate
// (degrees, cos, sin); cutout and cutmix's box (y0, y1, x0, x1) after (partner, lam) for
// mixing; timeshift/jitter (s); dropevent (events dropped).
struct AppliedAugment {
  int step = 0;  // its index in the spec
  AugmentOp op = AugmentOp::HFlip;
  double v[6] = {0, 0, 0, 0, 0, 0};
};
using AugmentRecord = std::vector<std::vector<AppliedAugment>>;  // per sample of a batch

// The shape a step sees: [T, C, H, W] (T = 1 for static images [C, H, W]).
struct SampleGeometry {
  int64_t T = 1, C = 1, H = 1, W = 1;
  bool has_time = false;
  int64_t numel() const { return T * C * H * W; }
};

// What a sample's mixing steps drew: the step that fired (-1: none), the partner (a training
// index), lam and, for cutmix, the box centre.
struct MixDraw {
  int step = -1;
  int64_t partner = -1;
  double lam = 1;
  int64_t cy = 0, cx = 0;
};

class Augmenter {
 public:
  // Checks `spec` against the dataset `info` (an Input error naming --augment and the file for
  // a step the data cannot take: timeshift on static images, dropevent on frames that are not
  // integer counts). Draws are keyed by `seed`.
  Augmenter(AugmentSpec spec, const DatasetInfo& info, uint64_t seed);

  const AugmentSpec& spec() const { return spec_; }
  const SampleGeometry& geometry() const { return geo_; }
  bool mixes() const { return spec_.mixes(); }

  // Per sample of `idx` (training indices), what its mixing steps draw in `epoch`.
  std::vector<MixDraw> mix_draws(const std::vector<int64_t>& idx, int64_t epoch) const;
  // The non-mixing steps, in place on rows x [n, ...sample] (f32). `as_partner`: the rows are
  // the partners of the samples `idx` (their own draw streams). `record`: what each row drew.
  void transform(Tensor& x, const std::vector<int64_t>& idx, int64_t epoch, bool as_partner,
                 AugmentRecord* record = nullptr) const;
  // Mixes row i of x, for every sample i whose draw fired, with the next row of partner_x
  // (those samples' partners in order, labels partner_y) and returns the soft targets f64
  // [n, K] (one-hot rows for unmixed samples). `record` gets the mixing step's parameters.
  Tensor mix(Tensor& x, const Tensor& partner_x, const Tensor& partner_y, const std::vector<MixDraw>& draws,
             const Tensor& y, AugmentRecord* record = nullptr) const;

 private:
  AugmentSpec spec_;
  SampleGeometry geo_;
  int64_t train_size_ = 0;
  int num_classes_ = 0;
  uint64_t seed_ = 0;
};

// What augment_batch did to a batch, for the preview: per sample the steps it drew, its
// partner (-1: none), the partner's row as read (zeros when none) and the partner's steps.
struct AugmentTrace {
  AugmentRecord record, partner_record;
  std::vector<int64_t> partner;
  Tensor partner_raw;  // [n, ...sample]
};

// Augments the batch `raw` = samples `idx` of `split` of `ds` just read (with labels y): reads
// the partners of mixing steps from `ds` (independently: safe on the prefetch thread), applies
// every step and returns the soft targets (undefined when the spec does not mix).
Tensor augment_batch(const Augmenter& aug, const H5Dataset& ds, Split split, Tensor& raw,
                     const std::vector<int64_t>& idx, const Tensor& y, int64_t epoch, AugmentTrace* trace = nullptr);

}  // namespace sm
