// eval_run.cpp — `spikemesh eval` below the front end (eval_run.h): configuration from the
// checkpoint and the flags, train's run set-up, the resume's load, the split's evaluation
// with progress lines on the root rank.
#include "spikemesh/train/eval_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/train/run_checkpoints.h"
#include "spikemesh/train/run_dir.h"
#include "spikemesh/train/train_plan.h"

namespace sm {

const std::vector<std::string>& eval_flag_keys() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> keys = {"data", "frames", "batch-size", "eval-batch-size", "device", "threads", "conv-algo",
                                     "allow-nonfinite-checkpoint",
                                     // the GPU numerics (train/gpu_numerics_flags.h): the evaluation's own
                                     "conv-algos", "conv-fp32-precision", "matmul-fp32-precision"};
    for (const std::string& p : parallel_keys()) keys.push_back(p);  // the layout, as train takes it
    return keys;
  }();
  return k;
}

const std::set<std::string>& eval_checkpoint_keys() {
  static const std::set<std::string> k = {"model",     "model-spec", "var",      "T",        "dropout",
                                          "precision", "optimizer",  "lr",       "weight-decay", "momentum",
                                          "nesterov",  "data",       "frames",   "encoding", "seed",     "batch-size",
                                          "eval-batch-size"};
  return k;
}

std::string resolve_eval_checkpoint(Comm* world, const std::string& arg) {
  struct stat st {};
  if (::stat(arg.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return arg;  // a file (read_checkpoint_info names a missing one)
  const std::string latest = find_latest_checkpoint(world, arg);  // collective over world
  if (latest.empty()) SM_INPUT_ERROR(arg << ": the directory holds no complete checkpoint (ckpt_*.h5)");
  return latest;
}

void apply_checkpoint_settings(TrainConfigResolver& r, TrainConfig& cfg, const CheckpointInfo& ci) {
  const std::string origin = ci.path + ": /meta config";
  r.apply_toml_text(toml_subset(ci.config_toml, eval_checkpoint_keys(), origin), origin);
  if (r.file_keys().count("model") == 0 && r.file_keys().count("model-spec") == 0) cfg.model = ci.model;
}

std::string default_eval_path(const std::string& checkpoint, Split split) {
  const size_t slash = checkpoint.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : checkpoint.substr(0, slash);
  return dir + (split == Split::Train ? "/eval_train.h5" : "/eval.h5");
}

namespace {
// Root rank: a progress line at every tenth of the batches (on a terminal, one line redrawn).
std::function<void(int64_t, int64_t)> progress_printer(bool root, Split split) {
  if (!root) return {};
  auto timer = std::make_shared<Timer>();
  const bool tty = isatty(STDOUT_FILENO);
  return [timer, tty, split](int64_t done, int64_t total) {
    if (!tty && done != total && (done * 10 / total) == ((done - 1) * 10 / total)) return;
    const double s = timer->ms() / 1000.0, eta = done > 0 ? s * static_cast<double>(total - done) / done : 0.0;
    std::printf("%seval %s: batch %lld/%lld, %s elapsed, ETA %s%s", tty ? "\r" : "",
                split == Split::Train ? "train" : "test", static_cast<long long>(done), static_cast<long long>(total),
                format_duration(s).c_str(), format_duration(eta).c_str(), tty && done < total ? "   " : "\n");
    std::fflush(stdout);
  };
}
}  // namespace

EvalReport run_evaluation(const TrainConfig& cfg, const CheckpointInfo& ci, Split split, Mesh* mesh,
                          const LayoutPlan& plan, bool keep_outputs) {
  Comm* world = mesh ? &mesh->world() : nullptr;
  H5Dataset ds = open_run_dataset(cfg, data_group_of(mesh));  // collective over the data group
  RunRequest req;
  agree_on_error(world, [&] {
    req = run_request_for(cfg, ds.info(), plan);
    if (ds.size(split) == 0)
      SM_INPUT_ERROR(cfg.data << ": its " << (split == Split::Train ? "train" : "test") << " split holds no sample");
  });
  RunParts parts = setup_run(req, mesh, [&](Model& m) { check_model_fits_data(cfg.data, ds.info(), m); });
  Layout& layout = *parts.layout;
  CheckpointManager ckpt(layout, *parts.optimizer, ".", "", cfg.precision, 1);  // no settings compared: "" config
  ckpt.allow_nonfinite(cfg.allow_nonfinite_checkpoint);
  const CheckpointInfo loaded = ckpt.load(ci.path, parts.scaler);  // collective over the checkpoint group
  EvalReport rep;
  rep.checkpoint = ci.path;
  rep.data = cfg.data;
  rep.split = split == Split::Train ? "train" : "test";
  rep.model = parts.model->info.name;
  rep.precision = cfg.precision;
  rep.layout = layout.describe();
  rep.step = loaded.state.step;
  rep.epoch = loaded.state.epoch;
  rep.T = parts.model->info.T;
  rep.batch = cfg.eval_batch_size > 0 ? cfg.eval_batch_size : cfg.batch_size;  // as train's evaluation
  rep.world_size = layout.groups().world_size();
  EvalSettings es{rep.batch,    static_cast<int>(rep.T), encoding_from_name(cfg.encoding), parts.dtype,
                  parts.activations, static_cast<uint64_t>(cfg.seed), split, keep_outputs, {}};
  es.progress = progress_printer(layout.groups().is_root(), split);
  rep.result = evaluate_split(layout, ds, es);
  return rep;
}

}  // namespace sm
