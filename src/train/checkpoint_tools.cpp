// checkpoint_tools.cpp — `spikemesh ckpt verify | export` below the front end
// (train/checkpoint_tools.h): the model and optimizer rebuilt from a checkpoint's resolved
// configuration, the verification (io's scan_checkpoint against them, then the resume's own
// load) and the flat state-dict export. One process, no MPI call.
#include "spikemesh/train/checkpoint_tools.h"

#include <cstdio>
#include <set>
#include <sstream>
#include <utility>

#include "spikemesh/core/log.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/io/h5file.h"
#include "spikemesh/models/model_selection.h"
#include "spikemesh/train/model_checkpoint.h"
#include "spikemesh/train/train_config.h"
#include "spikemesh/train/train_plan.h"

namespace sm {

namespace {

// The keys of a resolved configuration that decide the model's and optimizer's tensors (the
// others, e.g. threads, may not even be valid on this machine).
const std::set<std::string>& shaping_keys() {
  static const std::set<std::string> k = {"model",    "model-spec",   "var",      "T",        "dropout",  "optimizer",
                                          "lr",       "weight-decay", "momentum", "nesterov", "precision", "data"};
  return k;
}

// The run's configuration as far as it shapes tensors; a file that names no model (written by
// hand) gets the checkpoint's model name as a built-in one.
TrainConfig shaping_config(const CheckpointInfo& ci) {
  const std::string origin = ci.path + ": /meta config";
  const std::string kept = toml_subset(ci.config_toml, shaping_keys(), origin);
  TrainConfig cfg;
  TrainConfigResolver resolver(cfg);
  resolver.apply_toml_text(kept, origin);
  if (resolver.file_keys().count("model") == 0 && resolver.file_keys().count("model-spec") == 0) cfg.model = ci.model;
  return cfg;
}

// T of the run: --T, else the dataset's event frames (if the file is still there), else the spec's.
int64_t run_time_steps(const TrainConfig& cfg, const Model& model) {
  if (cfg.T > 0) return cfg.T;
  if (!cfg.data.empty()) try {
      H5File d = H5File::open(cfg.data);
      if (d.has_attr("T") && d.attr_int("T") > 0) return d.attr_int("T");
    } catch (const Error&) {  // moved or not readable here: the spec's
    }
  return model.info.T;
}

// What /meta says of the model and optimizer, read without validating its other fields, so
// that a file whose /meta has one damaged field still has its tensors checked. Throws when
// even that cannot be read.
CheckpointInfo model_facts(const std::string& path) {
  CheckpointInfo ci;
  ci.path = path;
  H5File f = H5File::open(path);
  H5Group m = f.open_group("/meta");
  ci.model = m.attr_string("model");
  for (auto [key, field] : {std::pair<const char*, std::string*>{"optimizer", &ci.optimizer},
                            {"precision", &ci.precision}, {"config", &ci.config_toml}})
    if (m.has_attr(key)) *field = m.attr_string(key);
  return ci;
}

}  // namespace

CheckpointModel checkpoint_model(const CheckpointInfo& ci) {
  CheckpointModel cm;
  cm.info = ci;
  const TrainConfig cfg = shaping_config(ci);
  const ModelSelection sel = model_selection_of(cfg);
  try {
    cm.model = sel.build();
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Input) throw;
    SM_INPUT_ERROR(ci.path << ": cannot rebuild its model from the configuration it records: " << e.what()
                           << (!sel.spec.empty() && sel.spec[0] != '/'
                                   ? " (the run's relative model-spec path is read from the current directory: run "
                                     "this where the training ran)"
                                   : ""));
  }
  if (cm.model->info.name != ci.model)
    SM_INPUT_ERROR(ci.path << ": its configuration builds model '" << cm.model->info.name << "', /meta names '"
                           << ci.model << "'");
  const std::string precision = ci.precision.empty() ? cfg.precision : ci.precision;
  cm.model->finalize(master_dtype(precision_from_name(precision)), Device::cpu(), 1);
  OptimizerConfig oc = optimizer_config_of(cfg);
  if (!ci.optimizer.empty()) oc.name = ci.optimizer;
  cm.optimizer = make_optimizer(oc, cm.model->params());
  cm.T = run_time_steps(cfg, *cm.model);
  return cm;
}

CheckpointScan verify_checkpoint(const std::string& path) {
  CheckpointInfo ci;
  try {
    ci = read_checkpoint_info(path);
  } catch (const Error&) {  // scan_checkpoint names that problem; the tensors are still checked if /meta names the model
    try {
      ci = model_facts(path);
    } catch (const Error&) {
      return scan_checkpoint(path, nullptr);
    }
  }
  CheckpointModel cm;
  try {
    cm = checkpoint_model(ci);
  } catch (const Error& e) {
    CheckpointScan scan = scan_checkpoint(path, nullptr);
    scan.problems.push_back(std::string(e.what()) + " (completeness not checked)");
    return scan;
  }
  const std::vector<TensorShard> expected = replicated_state_shards(*cm.model, cm.optimizer.get(), false);
  CheckpointScan scan = scan_checkpoint(path, &expected);
  if (scan.problems.empty()) try {
      load_model_checkpoint(path, *cm.model, *cm.optimizer);
    } catch (const Error& e) {
      scan.problems.push_back(e.what());
    }
  return scan;
}

CheckpointModel load_checkpoint_model(const std::string& path) {
  CheckpointModel cm = checkpoint_model(read_checkpoint_info(path));
  load_model_checkpoint(path, *cm.model, *cm.optimizer);
  return cm;
}

void export_flat_h5(const CheckpointModel& cm, const std::string& out, const std::string& source) {
  const std::string tmp = out + ".tmp";
  {
    H5File f = H5File::create(tmp);
    for (Param* p : cm.model->params()) f.write(p->name, p->value);
    for (Buffer* b : cm.model->buffers()) f.write(b->name, b->value);
    f.set_attr("model", cm.info.model);
    f.set_attr("T", cm.T);
    f.set_attr("step", cm.info.state.step);
    f.set_attr("epoch", cm.info.state.epoch);
    f.set_attr("precision", cm.info.precision);
    f.set_attr("source", source);
    f.set_attr("format", "spikemesh-flat-state-dict");
    f.flush();
    f.close();
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::remove(tmp.c_str());
    SM_INPUT_ERROR(out << ": cannot write the export (rename from " << tmp << " failed)");
  }
}

}  // namespace sm
