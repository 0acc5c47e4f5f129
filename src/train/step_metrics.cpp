// step_metrics.cpp — reduction, metrics row and progress line of a training step.
#include "spikemesh/train/step_metrics.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/train/run_dir.h"

namespace sm {

void reduce_step_report(Comm* comm, StepReport& p) {
  if (!comm) return;
  StepResult& r = p.r;
  std::vector<double> s{r.loss * r.count, double(r.correct), double(r.count)};
  for (double f : p.firing_rate) s.push_back(f * r.count);
  all_reduce_doubles(*comm, s, ReduceOp::Sum);
  r.count = static_cast<int64_t>(s[2]);
  const double n = static_cast<double>(std::max<int64_t>(1, r.count));
  r.loss = s[0] / n;
  r.correct = static_cast<int64_t>(s[1]);
  for (size_t i = 0; i < p.firing_rate.size(); ++i) p.firing_rate[i] = s[3 + i] / n;
  std::vector<double> m{p.step_ms, r.forward_ms, r.backward_ms, r.optimizer_ms, r.reset_ms, p.wait_ms,
                        p.load_ms, p.peak_mb, p.rss_mb, p.comm_ms, p.comm_mb, p.stop ? 1.0 : 0.0, p.step_peak_mb,
                        p.rss_now_mb, p.open_fds, p.threads, p.ckpt_writing ? 1.0 : 0.0, p.ckpt_failed ? 1.0 : 0.0,
                        p.ckpt_window_open ? 1.0 : 0.0};
  all_reduce_doubles(*comm, m, ReduceOp::Max);
  p.step_ms = m[0], r.forward_ms = m[1], r.backward_ms = m[2], r.optimizer_ms = m[3], r.reset_ms = m[4];
  p.wait_ms = m[5], p.load_ms = m[6], p.peak_mb = m[7], p.rss_mb = m[8], p.comm_ms = m[9], p.comm_mb = m[10];
  p.stop = m[11] > 0;
  p.step_peak_mb = m[12];
  p.rss_now_mb = m[13], p.open_fds = m[14], p.threads = m[15];
  p.ckpt_writing = m[16] > 0, p.ckpt_failed = m[17] > 0, p.ckpt_window_open = m[18] > 0;
}

std::map<std::string, double> step_row(const StepReport& p, int64_t step, int64_t epoch, double lr, bool distributed) {
  const StepResult& r = p.r;
  std::map<std::string, double> row{{"step", double(step)},
                                    {"epoch", double(epoch)},
                                    {"loss", r.loss},
                                    {"accuracy", r.count ? double(r.correct) / r.count : 0.0},
                                    {"lr", lr},
                                    {"time_ms", p.step_ms},
                                    {"forward_ms", r.forward_ms},
                                    {"backward_ms", r.backward_ms},
                                    {"optimizer_ms", r.optimizer_ms},
                                    {"reset_ms", r.reset_ms},
                                    {"data_ms", p.wait_ms},
                                    {"load_ms", p.load_ms},
                                    {"samples_per_s", p.step_ms > 0 ? 1000.0 * r.count / p.step_ms : 0.0},
                                    {"peak_mem_mb", p.peak_mb},
                                    {"step_peak_mem_mb", p.step_peak_mb},
                                    {"peak_rss_mb", p.rss_mb},
                                    {"rss_mb", p.rss_now_mb},
                                    {"open_fds", p.open_fds},
                                    {"threads", p.threads},
                                    {"ckpt_writing", p.ckpt_writing ? 1.0 : 0.0}};
  if (distributed) {
    row["comm_ms"] = p.comm_ms;
    row["comm_mb"] = p.comm_mb;
  }
  return row;
}

void ProgressWindow::add(const StepReport& p) {
  samples_ += p.r.count;
  ms_ += p.step_ms;
  loss_ += p.r.loss;
  correct_ += p.r.correct;
  count_ += p.r.count;
  ++steps_;
}

std::string ProgressWindow::line(int64_t epoch, int64_t epochs, int64_t step, int64_t total_steps,
                                 int64_t global_batch) {
  const double sps = ms_ > 0 ? 1000.0 * samples_ / ms_ : 0;
  const double eta = sps > 0 ? (total_steps - step) * global_batch / sps : 0;
  std::ostringstream os;
  os << "epoch " << epoch + 1 << "/" << epochs << " step " << step << "/" << total_steps << " | loss " << std::fixed
     << std::setprecision(4) << loss_ / std::max<int64_t>(1, steps_) << " acc " << std::setprecision(1)
     << 100.0 * correct_ / std::max<int64_t>(1, count_) << "% | " << sps << " samples/s | ETA "
     << format_duration(eta);
  *this = ProgressWindow();
  return os.str();
}

}  // namespace sm
