// step_metrics.h — what one training step reports: this rank's measurements, their
// reduction over the ranks (sums for loss, counts and firing rates; maxima for times, memory
// and the stop flag: the slowest rank sets the pace, any rank's signal stops everyone), the
// metrics.h5 row, and the rolling progress line of the log.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "spikemesh/train/train_step.h"

namespace sm {

class Comm;

struct StepReport {
  StepResult r;                          // this rank's step (after reduce: over all ranks)
  double step_ms = 0, wait_ms = 0, load_ms = 0, peak_mb = 0, rss_mb = 0, comm_ms = 0, comm_mb = 0;
  double step_peak_mb = 0;               // the allocator's peak bytes in use during this step
  double rss_now_mb = 0, open_fds = 0, threads = 0;  // core/process_stats.h (after reduce: the largest)
  bool stop = false;                     // a stop signal arrived (after reduce: on any rank)
  bool ckpt_writing = false;             // a checkpoint was being written in the background (any rank)
  bool ckpt_failed = false;              // that write ended with an error (after reduce: on any rank)
  bool ckpt_window_open = false;         // that write is not yet waiting to finish (after reduce: on any rank)
  std::vector<double> firing_rate;       // per neuron layer
  std::vector<std::string> layer_names;
};

// Collective over `comm` (no-op alone): every rank ends with the same report.
void reduce_step_report(Comm* comm, StepReport& rep);

// The metrics.h5 row of step `step` (comm columns only when `distributed`).
std::map<std::string, double> step_row(const StepReport& rep, int64_t step, int64_t epoch, double lr,
                                       bool distributed);

// Averages over the steps since the last progress line.
class ProgressWindow {
 public:
  void add(const StepReport& rep);
  // "epoch E/N step S/M | loss … acc …% | … samples/s | ETA …"; resets the window.
  std::string line(int64_t epoch, int64_t epochs, int64_t step, int64_t total_steps, int64_t global_batch);

 private:
  double samples_ = 0, ms_ = 0, loss_ = 0;
  int64_t correct_ = 0, count_ = 0, steps_ = 0;
};

}  // namespace sm
