// trainer.h — a training run on one rank: dataset -> sampler -> prefetch -> train_step ->
// metrics -> checkpoints, with evaluation every epoch, resume, and SIGTERM/SIGUSR1 handling
// (finish the step, checkpoint, exit 0). Output in <output>/<run-name>/: log.txt,
// config.toml, metrics.h5, ckpt_*.h5 (formats: output/README.md).
#pragma once
#include <string>

#include "spikemesh/train/train_config.h"

namespace sm {

struct TrainSummary {
  std::string run_dir;
  int64_t steps = 0;
  double final_test_accuracy = -1.0;  // fraction; < 0 when no evaluation ran
  double final_test_loss = 0.0;
  bool interrupted = false;          // stopped by a signal (checkpoint written)
  std::string last_checkpoint;
};

// `config_toml`: the resolved configuration (written to config.toml and checkpoints).
TrainSummary run_training(const TrainConfig& cfg, const std::string& config_toml);

// Installs SIGTERM/SIGUSR1 handlers that request a stop at the next step boundary.
void install_stop_signal_handlers();
bool stop_requested();
void request_stop_for_testing();  // as if a signal had arrived
void clear_stop_request();

}  // namespace sm
