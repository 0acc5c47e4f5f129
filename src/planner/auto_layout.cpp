// auto_layout.cpp — the automatic layout choice (auto_layout.h): the candidates that agree with
// the fixed flags, the calibration they need (read, or measured and saved), every candidate
// predicted, ordered by the preference with its reason; the fixed-flag rules and SpikingJelly's
// recommender beside it, and the report.
#include "spikemesh/planner/auto_layout.h"

#include "spikemesh/parallel/pipeline/pp_partition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/parallel/pipeline/pp_schedule.h"

namespace sm {

namespace {
// The calibration every rank uses: rank 0 reads the file, every rank parses its text.
CalibrationCache load_cache(Comm* world, const std::string& path) {
  if (!world) return read_calibration(path);
  std::string text;
  collective_check(*world, [&] {
    if (world->rank() == 0) text = read_calibration_text(path);
  });
  text = broadcast_string(*world, text, 0);
  CalibrationCache c;
  collective_check(*world, [&] { c = parse_calibration(text, path); });
  return c;
}

void save_cache(Comm* world, const std::string& path, const CalibrationCache& c) {
  auto write = [&] {
    if (!world || world->rank() == 0) write_calibration(path, c);
  };
  if (world) collective_check(*world, write);
  else write();
}
}  // namespace

CalibrationCache calibrate_machine(Comm* world, Device dev, const std::string& path_in) {
  const std::string path = path_in.empty() ? default_calibration_path() : path_in;
  CalibrationCache cache = load_cache(world, path);
  const std::string fp = machine_fingerprint(world, dev);
  if (cache.fingerprint != fp) cache.models.clear();
  cache.machine = measure_machine(world, dev);
  cache.fingerprint = fp;
  save_cache(world, path, cache);
  return cache;
}

bool LayoutConstraints::allows(const LayoutCandidate& c) const {
  if (!mode.empty() && c.mode() != mode) return false;
  if (!mesh_shape.empty()) {
    int64_t s[3] = {1, 1, 1};
    for (size_t i = 0; i < mesh_shape.size() && i < 3; ++i) s[i] = mesh_shape[i];
    if (c.mesh.dp != s[0] || c.mesh.tp != s[1] || c.mesh.pp != s[2]) return false;
  }
  if (!sharding.empty() && c.sharding() != sharding && c.reduction != GradientReduction::Fsdp) return false;
  if (!pp_schedule.empty() && (c.mesh.pp == 1 || c.schedule != pp_schedule)) return false;
  if (pp_virtual_stages > 0 && c.mesh.pp > 1 && c.virtual_stages != pp_virtual_stages) return false;
  if (pp_microbatches > 0 && c.mesh.pp > 1 && c.microbatches != pp_microbatches) return false;
  if (memopt_level >= 0 && c.memopt_level != memopt_level) return false;
  return true;
}

bool LayoutConstraints::any() const {
  return !mode.empty() || !mesh_shape.empty() || !sharding.empty() || !pp_schedule.empty() || pp_virtual_stages > 0 ||
         pp_microbatches > 0 || memopt_level >= 0;
}

bool LayoutConstraints::all_set() const {
  const bool pp = mesh_shape.size() >= 3 && mesh_shape[2] > 1;
  return !mode.empty() && !mesh_shape.empty() && !sharding.empty() && memopt_level >= 0 &&
         (!pp || (!pp_schedule.empty() && pp_microbatches > 0));
}

LayoutCandidate spikingjelly_rule(const std::string& model_name, int world, int64_t global_batch, Preference p,
                                  int units) {
  LayoutCandidate c;
  c.mesh = MeshShape{world, 1, 1};
  if (world == 1) {
    c.memopt_level = p == Preference::Speed ? 0 : 1;
    return c;
  }
  const bool even4 = world >= 4 && world % 2 == 0;
  switch (p) {
    case Preference::Speed:
      if (even4 && model_name == "cifar10dvs_vgg") {
        c.mesh = MeshShape{world / 2, 2, 1};
        c.reduction = GradientReduction::Fsdp;
      } else {
        c.reduction = GradientReduction::Zero1;
      }
      break;
    case Preference::Memory:
      c.memopt_level = 1;
      if (even4) c.mesh = MeshShape{world / 2, 2, 1}, c.reduction = GradientReduction::Fsdp;
      else c.mesh = MeshShape{1, world, 1};
      break;
    case Preference::Capacity:
      c.memopt_level = 1;
      c.mesh = MeshShape{1, 1, world};
      c.virtual_stages = global_batch >= 2 * world && units >= 2 * world ? 2 : 1;
      c.schedule = c.virtual_stages == 2 ? "interleaved" : "1f1b";
      try {
        c.microbatches = default_microbatches(static_cast<int>(global_batch), world * c.virtual_stages,
                                              c.virtual_stages > 1 ? world : 1);
      } catch (const Error&) {
        c.microbatches = 0;  // SpikingJelly's rule does not fit this batch
      }
      break;
  }
  return c;
}

namespace {
// Every layout of the job that agrees with the fixed flags; Input error when none does.
std::vector<LayoutCandidate> agreeing_candidates(const AutoLayoutRequest& r, int units) {
  const std::vector<int> tp_sizes = splittable_tp_sizes(r.profile, r.world);
  std::vector<LayoutCandidate> all = enumerate_layouts(r.world, units, r.global_batch, tp_sizes), cands;
  for (const LayoutCandidate& c : all)
    if (r.fixed.allows(c)) cands.push_back(c);
  if (cands.empty())
    SM_INPUT_ERROR("--prefer " << preference_name(r.prefer) << ": no layout of " << r.world << " rank"
                               << (r.world > 1 ? "s" : "") << " for a global batch of " << r.global_batch
                               << " agrees with the layout flags given (" << all.size()
                               << " layouts exist; the mesh's dp must divide the batch, pp the units)");
  return cands;
}

// The file's calibration with this machine's entry: measured again when asked (--remeasure),
// when the file has none, or when it was measured on another machine. `note` says where the
// machine entry came from; `dirty` is set when it was measured here and not yet saved.
CalibrationCache machine_calibration(Comm* world, const AutoLayoutRequest& r, const std::string& path,
                                     std::string& note, bool& dirty) {
  const bool talk = !world || world->rank() == 0;
  CalibrationCache cache = load_cache(world, path);
  const std::string fp = machine_fingerprint(world, r.profile.device);
  if (r.remeasure) {
    cache = calibrate_machine(world, r.profile.device, path);
    note = "machine measured again, saved to " + path;
  }
  if (!cache.note.empty()) note = cache.note;
  if (!cache.fingerprint.empty() && cache.fingerprint != fp) {
    note = "calibration " + path + " was measured on '" + cache.fingerprint + "'; this job is '" + fp +
           "': measured again";
    cache = CalibrationCache{};
  }
  if (cache.fingerprint.empty()) {
    if (talk) std::printf("calibrate: measuring the collectives and the optimizer of %d rank%s ...\n", r.world,
                          r.world > 1 ? "s" : ""), std::fflush(stdout);
    Timer t;
    cache.machine = measure_machine(world, r.profile.device);
    cache.fingerprint = fp;
    dirty = true;
    if (note.empty()) note = "machine measured now (" + std::to_string(static_cast<int>(t.ms())) + " ms), saved to " + path;
  }
  return cache;
}

// The model's profile request for the candidates: per tp size, the smallest and largest samples
// per microbatch among them (two points for the line: half the size when they agree), and memopt
// level 1 only when a candidate runs it.
void request_profile_sizes(ProfileRequest& p, const std::vector<LayoutCandidate>& cands, int64_t global_batch) {
  p.sizes.clear();
  bool want_memopt = false;
  for (const LayoutCandidate& c : cands) {
    const int64_t n = global_batch / c.mesh.dp / std::max(1, c.microbatches);
    auto it = p.sizes.find(c.mesh.tp);
    if (it == p.sizes.end()) p.sizes[c.mesh.tp] = {n, n};
    else it->second = {std::min(it->second.first, n), std::max(it->second.second, n)};
    want_memopt |= c.memopt_level > 0;
  }
  for (auto& [tp, s] : p.sizes)
    if (s.first == s.second && s.second > 1) s.first = std::max<int64_t>(1, s.second / 2);
  p.memopt_levels = want_memopt ? std::vector<int>{0, 1} : std::vector<int>{0};
}

// The calibration the choice uses: the machine (machine_calibration), then the model's profile
// at the sizes the candidates need (measured when the cache lacks it or when asked); saved when
// anything was measured. `note` says where both came from. Returns the cache; `key` names the
// model's profile in it.
CalibrationCache calibration_for(Comm* world, AutoLayoutRequest& r, const std::vector<LayoutCandidate>& cands,
                                 const std::string& path, std::string& note, std::string& key) {
  bool dirty = false;
  CalibrationCache cache = machine_calibration(world, r, path, note, dirty);
  request_profile_sizes(r.profile, cands, r.global_batch);
  key = r.profile.cache_key();
  if (!cache.models.count(key) || r.remeasure) {
    Timer t;
    cache.models[key] = measure_model_profile(world, r.profile);
    dirty = true;
    note += std::string(note.empty() ? "" : "; ") + "model profiled now (" + std::to_string(static_cast<int>(t.ms())) +
            " ms)";
  } else if (note.empty()) {
    note = "calibration and model profile from " + path;
  }
  if (dirty) save_cache(world, path, cache);
  return cache;
}

// One candidate's prediction for `global_batch`, whether it fits in `capacity` MB per rank
// (0: unbounded), and the largest global batch predicted to fit (by the peak's growth per sample).
RankedLayout predict_ranked(const LayoutCandidate& c, const ModelProfile& profile, const MachineCosts& machine,
                            int64_t global_batch, double capacity) {
  RankedLayout x;
  x.candidate = c;
  x.prediction = predict_layout(c, profile, machine, global_batch / c.mesh.dp);
  x.fits = capacity <= 0 || x.prediction.peak_mb <= capacity;
  const double grow = x.prediction.activation_mb_per_sample;
  x.max_global_batch =
      grow > 0 ? (static_cast<double>(global_batch / c.mesh.dp) + (capacity - x.prediction.peak_mb) / grow) * c.mesh.dp
               : 0;
  return x;
}

// Sorts `v` best first by the preference (those that fit first) and returns why the first wins.
// Input error when nothing fits, naming the candidate with the smallest peak.
std::string order_by_preference(std::vector<RankedLayout>& v, const AutoLayoutRequest& r, double capacity) {
  auto fits_first = [](const RankedLayout& a, const RankedLayout& b) { return a.fits > b.fits; };
  const auto fastest_fit = std::min_element(v.begin(), v.end(), [](const RankedLayout& a, const RankedLayout& b) {
    if (a.fits != b.fits) return a.fits;
    return a.prediction.step_ms < b.prediction.step_ms;
  });
  if (!fastest_fit->fits) {
    const auto smallest = std::min_element(v.begin(), v.end(), [](const RankedLayout& a, const RankedLayout& b) {
      return a.prediction.peak_mb < b.prediction.peak_mb;
    });
    SM_INPUT_ERROR("--prefer " << preference_name(r.prefer) << ": no layout fits in " << capacity
                               << " MB per rank; the closest is " << smallest->candidate.label() << " at "
                               << smallest->prediction.peak_mb << " MB predicted"
                               << (r.memory_budget_mb > 0 ? " (--memory-budget-mb)" : ""));
  }
  const double t_fast = fastest_fit->prediction.step_ms;
  std::ostringstream why;
  switch (r.prefer) {
    case Preference::Speed:
      std::stable_sort(v.begin(), v.end(), [&](const RankedLayout& a, const RankedLayout& b) {
        if (a.fits != b.fits) return fits_first(a, b);
        return a.prediction.step_ms < b.prediction.step_ms;
      });
      why << "speed: the fastest predicted step (" << v[0].prediction.step_ms << " ms) of the "
          << std::count_if(v.begin(), v.end(), [](const RankedLayout& x) { return x.fits; })
          << " layouts that fit in " << std::lround(capacity) << " MB per rank";
      break;
    case Preference::Memory: {
      auto within = [&](const RankedLayout& x) { return x.fits && x.prediction.step_ms <= 1.5 * t_fast; };
      std::stable_sort(v.begin(), v.end(), [&](const RankedLayout& a, const RankedLayout& b) {
        if (within(a) != within(b)) return within(a);
        if (a.fits != b.fits) return fits_first(a, b);
        return a.prediction.peak_mb < b.prediction.peak_mb;
      });
      why << "memory: the smallest predicted peak (" << v[0].prediction.peak_mb << " MB per rank) of the "
          << std::count_if(v.begin(), v.end(), within) << " layouts within 1.5x of the fastest (" << t_fast << " ms)";
      break;
    }
    case Preference::Capacity:
      std::stable_sort(v.begin(), v.end(), [&](const RankedLayout& a, const RankedLayout& b) {
        if (a.fits != b.fits) return fits_first(a, b);
        if (std::abs(a.max_global_batch - b.max_global_batch) > 1e-9 * std::max(1.0, a.max_global_batch))
          return a.max_global_batch > b.max_global_batch;
        return a.prediction.step_ms < b.prediction.step_ms;
      });
      why << "capacity: the largest global batch predicted to fit in " << std::lround(capacity) << " MB per rank (~"
          << std::llround(v[0].max_global_batch) << " samples; the peak grows "
          << v[0].prediction.activation_mb_per_sample << " MB per sample of a replica)";
      break;
  }
  return why.str();
}
}  // namespace

AutoLayoutResult choose_layout(Comm* world, AutoLayoutRequest r) {
  const std::string path = r.calibration_path.empty() ? default_calibration_path() : r.calibration_path;
  AutoLayoutResult res;
  const std::unique_ptr<Model> probe = r.profile.build();  // for its unit count; kept while the choice measures
  const int units = static_cast<int>(probe->units.size());
  const std::vector<LayoutCandidate> cands = agreeing_candidates(r, units);
  std::string key;
  const CalibrationCache cache = calibration_for(world, r, cands, path, res.calibration_note, key);
  const ModelProfile& profile = cache.models.at(key);
  const double capacity = r.memory_budget_mb > 0 ? r.memory_budget_mb : cache.machine.capacity_mb;
  for (const LayoutCandidate& c : cands)
    res.ranked.push_back(predict_ranked(c, profile, cache.machine, r.global_batch, capacity));
  res.reason = order_by_preference(res.ranked, r, capacity);
  res.chosen = res.ranked[0].candidate;
  res.chosen_pp_layout = res.ranked[0].prediction.partition;
  res.spikingjelly_rule = spikingjelly_rule(r.model_name, r.world, r.global_batch, r.prefer, units);
  for (const RankedLayout& x : res.ranked)
    if (x.candidate.label() == res.spikingjelly_rule.label()) {
      res.spikingjelly_rule_ranked = true;
      res.spikingjelly_prediction = x;
    }
  return res;
}

std::string AutoLayoutResult::report(int top) const {
  std::ostringstream os;
  char line[320];
  os << "auto layout (" << calibration_note << "):\n";
  std::snprintf(line, sizeof line, "  %-3s %-34s %10s %9s %9s %9s %9s\n", "#", "layout", "step ms", "comm ms",
                "peak MB", "state MB", "act MB");
  os << line;
  for (int i = 0; i < top && i < static_cast<int>(ranked.size()); ++i) {
    const RankedLayout& x = ranked[i];
    const LayoutPrediction& p = x.prediction;
    std::snprintf(line, sizeof line, "  %-3d %-34s %10.1f %9.1f %9.1f %9.1f %9.1f%s\n", i + 1,
                  x.candidate.label().c_str(), p.step_ms, p.tp_comm_ms + p.dp_comm_ms + p.bubble_ms, p.peak_mb,
                  p.state_mb, p.activation_mb, x.fits ? "" : "  (does not fit)");
    os << line;
  }
  os << "  chosen: " << chosen.label();
  if (!chosen_pp_layout.empty()) os << " (stages " << layout_text(chosen_pp_layout) << ")";
  os << " — " << reason << "\n";
  os << "  SpikingJelly's rule would pick " << spikingjelly_rule.label();
  if (spikingjelly_rule_ranked)
    os << ": predicted " << spikingjelly_prediction.prediction.step_ms << " ms, "
       << spikingjelly_prediction.prediction.peak_mb << " MB";
  else
    os << " (not among the candidates here)";
  os << "\n";
  return os.str();
}

}  // namespace sm
