// eval_run.h — `spikemesh eval` below the front end: a checkpoint evaluated on one split of an
// HDF5 dataset under any layout it loads into (train's mesh and layout flags).
// Configuration: train's defaults, then the keys of the checkpoint's resolved configuration
// that say what was trained and how it was fed (eval_checkpoint_keys: model, spec, variables,
// T, dropout, precision, optimizer, data, encoding, seed, batch sizes), then the train flags
// `eval` takes (eval_flag_keys: data, batch sizes, device, threads, every layout and comm
// flag, and the GPU numerics flags, which default to the environment, not to the checkpoint's
// record). Every other setting keeps train's default.
// The run is train's: run_request_for, setup_run, CheckpointManager::load (the resume path:
// every check, any layout into any other) and evaluate_split with train's EvalSettings — so
// the numbers equal those train logs at that step for the same layout and evaluation batch.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "spikemesh/io/checkpoint.h"
#include "spikemesh/train/eval_report.h"
#include "spikemesh/train/train_config.h"

namespace sm {

class Comm;
class Mesh;
struct LayoutPlan;

// The train flags (keys) `spikemesh eval` accepts.
const std::vector<std::string>& eval_flag_keys();
// The keys of a checkpoint's configuration an evaluation starts from.
const std::set<std::string>& eval_checkpoint_keys();

// A checkpoint file, or a run directory's newest complete checkpoint (Input error naming the
// directory when it holds none). Collective over `world` (null: alone).
std::string resolve_eval_checkpoint(Comm* world, const std::string& file_or_dir);

// Applies ci's eval_checkpoint_keys to `r` (a checkpoint that names no model gets ci.model).
// Local; Input error naming the file when its configuration is not readable.
void apply_checkpoint_settings(TrainConfigResolver& r, TrainConfig& cfg, const CheckpointInfo& ci);

// <checkpoint's directory>/eval.h5 (split test) or eval_train.h5 (split train).
std::string default_eval_path(const std::string& checkpoint, Split split);

// Loads checkpoint `ci` into the layout `cfg` and `mesh` describe and evaluates `split` of
// cfg.data; the root rank prints progress lines. Collective over mesh->world() (null: one rank,
// no MPI call); Input errors (dataset shape or classes, a checkpoint that does not fit) reach
// every rank with one message. keep_outputs: the report's outcome holds every sample's output
// time mean and label (eval --save-outputs).
EvalReport run_evaluation(const TrainConfig& cfg, const CheckpointInfo& ci, Split split, Mesh* mesh,
                          const LayoutPlan& plan, bool keep_outputs = false);

}  // namespace sm
