// evaluation.h — the evaluation of a model on one split of a dataset (after every epoch of
// `train`, and `spikemesh eval`): the split is cut into global batches of eval_batch x data
// ranks in file order, each rank forwards its slice (possibly empty) through the layout in eval
// mode (BN running statistics, no dropout), and loss, accuracy, per-class counts and every
// neuron layer's firing rate are summed over the layout's metrics group.
// Invariant: the outcome depends on the samples and the per-rank batch only, never on which
// rank ran what beyond floating-point summation order (counts are exact on every layout).
// Collective over the layout's data and metrics groups (and pp/tp through the layout).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spikemesh/data/encoder.h"
#include "spikemesh/data/h5_dataset.h"

namespace sm {

class Layout;

struct EvalSettings {
  int64_t batch = 0;  // per rank
  int T = 0;
  Encoding encoding = Encoding::Direct;
  DType dtype = DType::F32, activations = DType::F32;
  uint64_t seed = 0;
  Split split = Split::Test;
  bool keep_outputs = false;  // fill EvalOutcome::outputs and labels (eval --save-outputs)
  // Each rank reads its samples on its own (H5Dataset::read) instead of one collective read per
  // batch: a training run whose checkpoints are written in the background, so that the reads
  // interleave with the write (io/hdf5_thread.h) instead of waiting for it.
  bool independent_reads = false;
  // Called on every rank after each global batch with (batches done, batches in all); may be empty.
  std::function<void(int64_t, int64_t)> progress;
};

struct EvalOutcome {
  double loss = 0.0, accuracy = 0.0;  // means over the split
  int64_t correct = 0, count = 0;
  std::vector<double> firing_rate;       // per neuron layer, sample-weighted mean
  std::vector<std::string> layer_names;  // of firing_rate
  std::vector<int64_t> class_correct, class_count;  // per class [num_classes]; sums: correct, count
  // keep_outputs: per sample of the split, in file order, the output's mean over T ([count, K]
  // row-major: logits for mean_ce models, firing rates for rate_mse) and the label; on every rank.
  std::vector<double> outputs;
  std::vector<int64_t> labels;
};

// Evaluates s.split of `ds` (collective, see above); the per-class counts have the dataset's classes.
EvalOutcome evaluate_split(Layout& layout, H5Dataset& ds, const EvalSettings& s);

}  // namespace sm
