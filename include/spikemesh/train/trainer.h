// trainer.h — a training run: dataset -> sampler -> prefetch -> layout step -> metrics ->
// checkpoints, with evaluation every epoch, resume, and SIGTERM/SIGUSR1 handling (finish the
// step, checkpoint, exit 0; train/stop_signal.h). Output in <output>/<run-name>/: log.txt,
// config.toml, metrics.h5, ckpt_*.h5 (formats: output/README.md).
//
// One rank (mesh == nullptr): no communication at all. Several ranks (a Mesh): the Layout
// (parallel/layout.h) decides everything about parallelism (dp, tp, pp and their products).
// --batch-size is PER RANK and PER MICRO-STEP (as SpikingJelly's): global batch = batch-size x dp x grad-accum, unless
// --global-batch-size fixes it. One seeded permutation per epoch; dp rank r takes its slice of
// each global batch. Every run_training call with a mesh is collective over mesh->world():
// configuration checks agree (one message, every rank fails), the stop flag of a signal is
// all-reduced every step, metrics are all-reduced and written by world rank 0 (log.txt,
// metrics.h5, config.toml on rank 0 only), evaluation is split over dp and all-reduced, and
// checkpoints are written collectively in full logical shape (any layout resumes any other).
#pragma once
#include <string>

#include "spikemesh/core/stop_signal.h"
#include "spikemesh/train/train_config.h"

namespace sm {

class Mesh;
struct LayoutPlan;

struct TrainSummary {
  std::string run_dir;
  int64_t steps = 0;
  double final_test_accuracy = -1.0;  // fraction; < 0 when no evaluation ran
  double final_test_loss = 0.0;
  bool interrupted = false;          // stopped by a signal (checkpoint written)
  std::string last_checkpoint;
};

// `config_toml`: the resolved configuration (written to config.toml and checkpoints).
// `mesh`: null for a one-rank run; otherwise collective over mesh->world() (see above).
// `layout_plan`: the run's layout plan as the command resolved it at its top, before creating the
// mesh (planner/auto_choice.h; tools and tests: training_layout_plan), its batches planned.
TrainSummary run_training(const TrainConfig& cfg, const std::string& config_toml, Mesh* mesh,
                          const LayoutPlan& layout_plan);

}  // namespace sm
