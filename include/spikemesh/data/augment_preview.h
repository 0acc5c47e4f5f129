// augment_preview.h — `spikemesh data augment`: what `--augment` makes of some training
// samples in a given epoch, written to an HDF5 file for a look (or a plot) and for the test
// that re-applies every drawn parameter with an independent reference (tests/ref/augment_ref.py).
// The file: /index, /y, /x_original, /x (augmented), /partner (-1: not mixed),
// /partner_x_original, /target (soft targets, when the spec mixes), /ops and /partner_ops
// f64 [n, steps, 7] (per step: fired 0/1, then AppliedAugment::v), root attributes augment
// (canonical), seed, epoch, data, frames. Invariants: the samples are exactly what training draws for
// them in that epoch under any layout (the same augment_batch); the file appears complete or
// not at all (written aside and renamed). Local (no MPI).
#pragma once
#include <cstdint>
#include <string>

namespace sm {

struct AugmentPreviewOptions {
  std::string data, out, augment;
  std::string frames;  // train's --frames: the samples made from the stored events
  int64_t seed = 1, epoch = 0, first = 0, count = 16;  // seed: train's default
  bool overwrite = false;
};

void write_augment_preview(const AugmentPreviewOptions& o);

}  // namespace sm
