// train_plan.h — how a configuration meets a dataset: the run request (model, device,
// layout, optimizer), the batch arithmetic (per-rank micro-batch, global batch, steps) and
// the learning-rate schedule. Pure functions (no communication); every inconsistency is an
// Input error naming the flag or the file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "spikemesh/data/augment.h"
#include "spikemesh/data/encoder.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/optim/lr_schedule.h"
#include "spikemesh/train/run_setup.h"
#include "spikemesh/train/train_config.h"

namespace sm {

struct TrainPlan {
  int64_t batch = 0;         // per rank and per micro-step
  int64_t accum = 1;         // micro-steps per optimizer step
  int64_t global_batch = 0;  // batch x data ranks x accum
  int64_t per_epoch = 0;     // optimizer steps per epoch
  int64_t total_steps = 0;   // of the whole run (--epochs, --max-steps)
  Encoding encoding = Encoding::Direct;
  std::shared_ptr<const Augmenter> augment;  // --augment of the training samples; null: none
  LrScheduleConfig lr;
};

// The model flags of `cfg` (--model or --model-spec, --var, --dropout, --T as given).
ModelSelection model_selection_of(const TrainConfig& cfg);
// The optimizer settings of `cfg` (name, lr, weight decay, momentum, nesterov).
OptimizerConfig optimizer_config_of(const TrainConfig& cfg);

// The run's dataset `cfg.data`, its frames made on the fly when `cfg.frames` says so
// (event_frames_reader.h). Collective over `data_group` (nullptr: this process alone), as
// H5Dataset::open.
H5Dataset open_run_dataset(const TrainConfig& cfg, Comm* data_group, bool collective_handle = true);

// The model, device, layout and optimizer settings of `cfg`; an event dataset fixes T (its
// file's, or --frames') (Input error when --T disagrees with it).
RunRequest run_request_of(const TrainConfig& cfg, const DatasetInfo& data);

// The layout plan of a training configuration's flags (layout_plan.h, phase 1): the layout
// flags against the mesh, then the batches (BatchPlan). Pure; identical on every rank.
LayoutPlan training_layout_plan(const TrainConfig& cfg, const MeshShape& shape, int world_size);

// run_request_of with the run's layout plan (training_layout_plan): what `train` and `eval` build.
RunRequest run_request_for(const TrainConfig& cfg, const DatasetInfo& data, const LayoutPlan& plan);

// Input error naming `data_path` when the model's per-time-step input shape or its classes
// differ from the dataset's.
void check_model_fits_data(const std::string& data_path, const DatasetInfo& data, const Model& model);

// Checks that `model` fits the dataset (input shape, classes), takes the batches of the run's
// layout plan (BatchPlan: micro-steps of `micro` samples, `accum` per step, `global` over every
// replica; at least one global batch in the training split) and plans the steps and the
// learning-rate schedule. Input errors name the file and the flags.
TrainPlan plan_training(const TrainConfig& cfg, const H5Dataset& ds, const Model& model, const BatchPlan& batch);

}  // namespace sm
