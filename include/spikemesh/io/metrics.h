// metrics.h — output/<run>/metrics.h5, written by rank 0 (docs/architecture.md §8):
//   /step/<name>   [steps]          per optimizer step: step, epoch, loss, accuracy, lr,
//                                   time_ms, forward_ms, backward_ms, optimizer_ms, data_ms,
//                                   samples_per_s, peak_mem_mb, ... (any scalar logged)
//   /step/firing_rate [steps, L]    per neuron layer (attribute layer_names)
//   /eval/step, /eval/epoch, /eval/loss, /eval/accuracy [evals]; /eval/firing_rate [evals, L]
// Columns are chunked and unlimited along rows; rows are buffered and flushed every
// `flush_every` steps, at every evaluation and on close, so a killed run leaves a readable
// file. On resume, rows with step > the checkpoint's step are dropped before appending.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sm {

class MetricsWriter {
 public:
  // resume_step < 0: create a new file (replacing any); otherwise open and truncate.
  MetricsWriter(const std::string& path, int64_t resume_step = -1, int flush_every = 20);
  ~MetricsWriter();
  void log_step(const std::map<std::string, double>& scalars, const std::vector<double>& firing_rate,
                const std::vector<std::string>& layer_names);
  void log_eval(int64_t step, int64_t epoch, double loss, double accuracy, const std::vector<double>& firing_rate,
                const std::vector<std::string>& layer_names);
  void flush();
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

}  // namespace sm
