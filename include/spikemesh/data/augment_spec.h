// augment_spec.h — the text of `--augment` (config key `augment`): a comma-separated list of
// steps NAME[:P[:M]], each applied to a training sample with probability P (default 0.5) and
// magnitude M (per step, see augment_ops_help()). Parsing only: data/augment.h applies them.
// Invariants: a parsed spec holds the steps in the order given, with P in [0, 1] and M in the
// step's range; mixing steps (mixup, cutmix) are listed after every other step (they combine
// two samples that are transformed first); canonical_text() parses back to the same spec.
#pragma once
#include <string>
#include <vector>

namespace sm {

enum class AugmentOp { HFlip, VFlip, Translate, Roll, Rotate, Cutout, TimeShift, Jitter, DropEvent, Mixup, Cutmix };

const char* augment_op_name(AugmentOp op);
// Mixup and CutMix combine two samples and soften the targets.
bool is_mixing(AugmentOp op);

struct AugmentStep {
  AugmentOp op = AugmentOp::HFlip;
  double p = 0.5;          // probability that the step fires on a sample
  double magnitude = 0;    // pixels, degrees, time steps, channels, a drop rate or Beta's alpha
};

struct AugmentSpec {
  std::vector<AugmentStep> steps;
  bool empty() const { return steps.empty(); }
  bool mixes() const;
  bool has(AugmentOp op) const;  // timeshift needs a time axis, dropevent integer event counts
  std::string canonical_text() const;  // "hflip:0.5,roll:0.5:5" (every P and M spelt out)
};

// Parses `--augment TEXT` ("" or "none": no augmentation); an Input error names --augment,
// the step and what is wrong (an unknown name lists the valid ones).
AugmentSpec parse_augment_spec(const std::string& text);

// One line per step: name, default P and M, what M means and its range (for --help and docs).
std::string augment_ops_help();

}  // namespace sm
