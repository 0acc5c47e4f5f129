// eval_report.h — what `spikemesh eval` found and where it keeps it: the outcome of
// evaluate_split with the facts that identify it (checkpoint, step, dataset, split, layout),
// written as eval.h5 (layout in docs/architecture.md §8 and docs/checkpoints.md) and
// printed as a short table. Local functions (the caller's root rank writes and prints).
// Invariants of a written file: sum(/class/correct) = correct and sum(/class/count) = count
// (root attributes); /firing_rate has one value per neuron layer, named in model order.
#pragma once
#include <cstdint>
#include <string>

#include "spikemesh/train/evaluation.h"

namespace sm {

struct EvalReport {
  EvalOutcome result;
  std::string checkpoint, data, split, model, precision, layout;  // layout: Layout::describe()
  int64_t step = 0, epoch = 0, T = 0;
  int64_t batch = 0;       // evaluation batch per data rank
  int64_t world_size = 1;  // ranks that evaluated
};

// Writes `path` (as path.tmp, then renamed): root attributes format "spikemesh-eval",
// format_version 1, checkpoint, data, split, model, precision, layout, step, epoch, T,
// batch_size, world_size, num_classes, loss, accuracy, correct, count; datasets
// /class/correct, /class/count (i64 [K]), /class/accuracy (f64 [K], NaN for a class with no
// sample), /firing_rate (f64 [L], attribute layer_names: the L names joined by commas); with the
// outcome's outputs (eval --save-outputs) also /outputs (f64 [N, K]: every sample's output mean
// over T, file order) and /labels (i64 [N]).
// Input error naming the file when it cannot be written.
void write_eval_h5(const EvalReport& r, const std::string& path);

// The summary line, the per-class table and the firing-rate table, newline-terminated.
std::string eval_table(const EvalReport& r);

}  // namespace sm
