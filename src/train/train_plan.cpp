// train_plan.cpp — run request, batch arithmetic and schedule of a training run (train_plan.h).
#include "spikemesh/train/train_plan.h"

#include <algorithm>

#include "spikemesh/models/model.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {

RunRequest run_request_of(const TrainConfig& cfg, const DatasetInfo& di) {
  RunRequest req;
  req.model.model = cfg.model_spec.empty() ? cfg.model : "";
  req.model.spec = cfg.model_spec;
  req.model.vars = cfg.vars;
  req.model.dropout = cfg.dropout;
  req.model.T = static_cast<int>(cfg.T);
  if (di.is_events()) {
    if (cfg.T > 0 && cfg.T != di.T)
      SM_INPUT_ERROR("--T " << cfg.T << " but " << cfg.data << " holds event frames with T = " << di.T);
    req.model.T = di.T;
  }
  req.precision = cfg.precision;
  req.device = cfg.device;
  req.threads = cfg.threads;
  req.conv_algo = cfg.conv_algo;
  req.seed = static_cast<uint64_t>(cfg.seed);
  req.optimizer.name = cfg.optimizer;
  req.optimizer.lr = cfg.lr;
  req.optimizer.weight_decay = cfg.weight_decay;
  req.optimizer.momentum = cfg.momentum;
  req.optimizer.nesterov = cfg.nesterov;
  return req;
}

int64_t replica_batch_of(const TrainConfig& cfg, int dp, int pp) {
  if (pp > 1 && cfg.grad_accum > 1)
    SM_INPUT_ERROR("--grad-accum " << cfg.grad_accum << " with pp = " << pp
                                   << ": a pipeline accumulates over its microbatches; use --pp-microbatches");
  if (cfg.global_batch_size <= 0) return cfg.batch_size;
  if (pp > 1 && cfg.global_batch_size % dp != 0)
    SM_INPUT_ERROR("--global-batch-size " << cfg.global_batch_size << " is not divisible by dp " << dp);
  return pp > 1 ? cfg.global_batch_size / dp : cfg.batch_size;
}

LayoutPlan training_layout_plan(const TrainConfig& cfg, const MeshShape& shape, int world_size) {
  const LayoutOptions o = layout_options(cfg, master_dtype(precision_from_name(cfg.precision)));
  LayoutPlan p = plan_layout(o, shape, world_size, 0);  // the flags' messages come before the batch's
  plan_pipeline_batch(p, replica_batch_of(cfg, shape.dp, shape.pp));
  return p;
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

TrainPlan plan_training(const TrainConfig& cfg, const H5Dataset& ds, const Model& model, int dp, int pp_micro) {
  check_model_fits_data(cfg.data, ds.info(), model);
  TrainPlan p;
  p.encoding = encoding_from_name(cfg.encoding);
  p.accum = cfg.grad_accum;
  p.batch = cfg.batch_size;
  if (pp_micro > 0) {  // a pipeline: the replica's batch in microbatches (training_layout_plan checked it)
    const int64_t replica = cfg.global_batch_size > 0 ? cfg.global_batch_size / dp : cfg.batch_size;
    p.accum = pp_micro;
    p.batch = replica / pp_micro;
  } else if (cfg.global_batch_size > 0) {
    if (cfg.global_batch_size % (dp * p.accum) != 0)
      SM_INPUT_ERROR("--global-batch-size " << cfg.global_batch_size << " is not divisible by dp " << dp
                                            << " x --grad-accum " << p.accum << " = " << dp * p.accum);
    p.batch = cfg.global_batch_size / (dp * p.accum);
  }
  p.global_batch = p.batch * dp * p.accum;
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
