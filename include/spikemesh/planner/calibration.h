// calibration.h — measures what the cost model (planner/cost_model.h) needs, on the job's own ranks, and
// caches it in a small JSON file (docs/architecture.md §5b):
//   * the machine: per collective and group size, alpha and beta fitted over three payloads,
//     every group of that size running at once; the optimizer's time per element; the memory
//     one rank may use. Keyed by a fingerprint of the hardware and the job's shape (CPU model,
//     cores, GPU, ranks per node, world size, threads per rank).
//   * each model: dry runs (pp_costs.h) of its tp-local copy at every tp size and memopt level
//     asked for, at two microbatch sizes, with every rank running the same dry run at once;
//     times are the maximum over the ranks. Keyed by the model, its variables, T, dtypes,
//     sizes and the tp options.
// Every measuring function is collective over `world` (nullptr: one process, no communication)
// and returns the same numbers on every rank.
// File format (version 1): {"format": "spikemesh-calibration", "version": 1, "fingerprint": ...,
// "machine": {...}, "models": {key: profile}}. Written by world rank 0 atomically (a temporary
// file renamed over the old one).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/planner/cost_model.h"

namespace sm {

class Comm;
class Model;

// The hardware and the job's shape, one line; the same on every rank (rank 0's, broadcast).
// Collective over `world`.
std::string machine_fingerprint(Comm* world, Device dev);

// Collective over `world`: group sizes 2..world (divisors), three payloads each.
MachineCosts measure_machine(Comm* world, Device dev);

struct ProfileRequest {
  std::function<std::unique_ptr<Model>()> build;  // a fresh model, built, not finalised
  std::string key;                                // model name and variables (part of the cache key)
  DType dtype = DType::F32;                       // the model's dtype
  DType activations = DType::F32;                 // the run's activation dtype
  Device device = Device::cpu();
  bool tp_keep_first = false, tp_keep_classifier = false;
  int optimizer_states = 2;
  // tp size -> the microbatch sizes (lo, hi) to measure at; each at every level of memopt_levels.
  std::map<int, std::pair<int64_t, int64_t>> sizes;
  std::vector<int> memopt_levels = {0, 1};
  std::string cache_key() const;  // key + dtypes + device + sizes + tp options
};

// The tp sizes whose tp plan of the model splits at least one layer, among the divisors of
// `world` (pure: builds the model, nothing runs).
std::vector<int> splittable_tp_sizes(const ProfileRequest& r, int world);

// Collective over `world`: the dry runs of ProfileRequest, with progress lines on rank 0.
ModelProfile measure_model_profile(Comm* world, const ProfileRequest& r);

struct CalibrationCache {
  std::string fingerprint;  // of the machine entry ("" when none)
  MachineCosts machine;
  std::map<std::string, ModelProfile> models;  // by ProfileRequest::cache_key()
  std::string note;  // why a file's contents were set aside (an older version), else ""
};

// $SPIKEMESH_CALIBRATION, else ${XDG_CACHE_HOME:-$HOME/.cache}/spikemesh/calibration.json.
std::string default_calibration_path();
// A missing file gives an empty cache, and so does a file of an older version (with a note);
// a file that is not a calibration file of this version or older is an Input error naming it.
CalibrationCache read_calibration(const std::string& path);
// The same in two parts (one rank reads, every rank parses what it broadcast): the file's text
// ("" when missing), and its parse ("" gives an empty cache); `path` names it in errors.
std::string read_calibration_text(const std::string& path);
CalibrationCache parse_calibration(const std::string& text, const std::string& path);
// Creates the directory if needed; Input error naming the file when it cannot be written.
void write_calibration(const std::string& path, const CalibrationCache& c);

}  // namespace sm
