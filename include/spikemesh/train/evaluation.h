// evaluation.h — the test-split evaluation of a run: the split is cut into global batches of
// eval_batch x data ranks, each rank forwards its slice (possibly empty) through the layout in
// eval mode, and loss, accuracy and every neuron layer's firing rate are summed over the
// layout's metrics group. Collective over the layout's data and metrics groups.
#pragma once
#include <cstdint>
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
};

struct EvalOutcome {
  double loss = 0.0, accuracy = 0.0;  // means over the split
  int64_t correct = 0, count = 0;
  std::vector<double> firing_rate;       // per neuron layer, sample-weighted mean
  std::vector<std::string> layer_names;  // of firing_rate
};

EvalOutcome evaluate_test_split(Layout& layout, H5Dataset& ds, const EvalSettings& s);

}  // namespace sm
