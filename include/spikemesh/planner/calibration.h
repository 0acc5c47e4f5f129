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
// and returns the same numbers on every rank. The machine: calibration.cpp; the model's dry
// runs: model_profile.cpp; the cache file and its format: calibration_file.h.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "spikemesh/core/tensor.h"
#include "spikemesh/planner/calibration_file.h"
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

}  // namespace sm
