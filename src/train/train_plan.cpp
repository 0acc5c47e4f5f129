// train_plan.cpp — run request, batch arithmetic and schedule of a training run (train_plan.h).
#include "spikemesh/train/train_plan.h"

#include <algorithm>

#include "spikemesh/data/event_frames_reader.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {

ModelSelection model_selection_of(const TrainConfig& cfg) {
  ModelSelection sel;
  sel.model = cfg.model_spec.empty() ? cfg.model : "";
  sel.spec = cfg.model_spec;
  sel.vars = cfg.vars;
  sel.dropout = cfg.dropout;
  sel.T = static_cast<int>(cfg.T);
  return sel;
}

OptimizerConfig optimizer_config_of(const TrainConfig& cfg) {
  OptimizerConfig oc;
  oc.name = cfg.optimizer;
  oc.lr = cfg.lr;
  oc.weight_decay = cfg.weight_decay;
  oc.momentum = cfg.momentum;
  oc.nesterov = cfg.nesterov;
  return oc;
}

H5Dataset open_run_dataset(const TrainConfig& cfg, Comm* data_group, bool collective_handle) {
  const FramesOption frames = parse_frames_option(cfg.frames);
  return H5Dataset::open(cfg.data, data_group, collective_handle, frames.on ? &frames : nullptr);
}

RunRequest run_request_of(const TrainConfig& cfg, const DatasetInfo& di) {
  RunRequest req;
  req.model = model_selection_of(cfg);
  if (di.is_events()) {
    if (cfg.T > 0 && cfg.T != di.T && !di.frames.empty())
      SM_INPUT_ERROR("--T " << cfg.T << " but --frames " << di.frames << " makes " << di.T << " frames per sample");
    if (cfg.T > 0 && cfg.T != di.T)
      SM_INPUT_ERROR("--T " << cfg.T << " but " << cfg.data << " holds event frames with T = " << di.T
                            << " (--frames " << cfg.T << ",SPLIT makes " << cfg.T << " frames from its events, "
                            << "when it was imported with --events)");
    req.model.T = di.T;
  }
  req.precision = cfg.precision;
  req.device = cfg.device;
  req.threads = cfg.threads;
  req.conv_algo = cfg.conv_algo;
  req.seed = static_cast<uint64_t>(cfg.seed);
  req.optimizer = optimizer_config_of(cfg);
  return req;
}

LayoutPlan training_layout_plan(const TrainConfig& cfg, const MeshShape& shape, int world_size) {
  const LayoutOptions o = layout_options(cfg.parallel, master_dtype(precision_from_name(cfg.precision)));
  return plan_layout(o, shape, world_size, batch_request(cfg.parallel, cfg.batch_size));
}

RunRequest run_request_for(const TrainConfig& cfg, const DatasetInfo& data, const LayoutPlan& plan) {
  RunRequest req = run_request_of(cfg, data);
  req.layout = plan;
  return req;
}

void check_model_fits_data(const std::string& data_path, const DatasetInfo& di, const Model& model) {
  const ModelInfo& mi = model.info;
  Shape have = di.is_events() ? Shape(di.sample_shape.begin() + 1, di.sample_shape.end()) : di.sample_shape;
  if (mi.input_shape != have)
    SM_INPUT_ERROR(data_path << ": samples are " << shape_str(have) << " per time step but model '" << mi.name
                             << "' expects " << shape_str(mi.input_shape));
  if (di.num_classes != mi.num_classes)
    SM_INPUT_ERROR(data_path << " has " << di.num_classes << " classes but model '" << mi.name << "' outputs "
                             << mi.num_classes);
}

TrainPlan plan_training(const TrainConfig& cfg, const H5Dataset& ds, const Model& model, const BatchPlan& batch) {
  check_model_fits_data(cfg.data, ds.info(), model);
  TrainPlan p;
  p.encoding = encoding_from_name(cfg.encoding);
  const AugmentSpec aug = parse_augment_spec(cfg.augment);
  if (!aug.empty()) p.augment = std::make_shared<const Augmenter>(aug, ds.info(), static_cast<uint64_t>(cfg.seed));
  p.accum = batch.accum;
  p.batch = batch.micro;
  p.global_batch = batch.global;
  SM_CHECK(batch.replica > 0 && batch.micro > 0, "plan_training: the layout plan's batches were not planned");
  const int64_t dp = batch.global / batch.replica;
  const int64_t train = ds.size(Split::Train);
  if (dp == 1 && p.accum == 1 && train < p.batch)
    SM_INPUT_ERROR(cfg.data << ": " << train << " training samples, fewer than one batch of " << p.batch);
  if (train < p.global_batch)
    SM_INPUT_ERROR(cfg.data << ": " << train << " training samples, fewer than one global batch of " << p.global_batch
                            << " (--batch-size " << p.batch << " per rank x dp " << dp << " x --grad-accum " << p.accum
                            << ")");
  p.per_epoch = train / p.global_batch;
  p.total_steps = p.per_epoch * cfg.epochs;
  if (cfg.max_steps > 0) p.total_steps = std::min(p.total_steps, cfg.max_steps);
  p.lr.kind = cfg.lr_schedule;
  p.lr.base_lr = cfg.lr;
  p.lr.warmup_steps = cfg.warmup_steps;
  p.lr.warmup_start_factor = 1.0 / (cfg.warmup_steps + 1);  // the first step already learns
  p.lr.total_steps = std::max<int64_t>(1, p.total_steps - cfg.warmup_steps);
  p.lr.step_size = cfg.lr_step_size;
  p.lr.gamma = cfg.lr_gamma;
  p.lr.min_lr = cfg.min_lr;
  LrSchedule check(p.lr);  // validates the schedule now
  return p;
}

}  // namespace sm
