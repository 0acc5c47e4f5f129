// step_profile.cpp — the one-step time table of step_profile.h: merge, sort, shares, the
// per-type aggregate, its JSON and its text.
#include "spikemesh/layers/step_profile.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace sm {

const char* profile_pass_name(ProfilePass p) {
  switch (p) {
    case ProfilePass::Forward: return "forward";
    case ProfilePass::Backward: return "backward";
    case ProfilePass::BackwardInput: return "backward-input";
    case ProfilePass::BackwardWeight: return "backward-weight";
  }
  return "?";
}

namespace {

double share_of(double ms, double step_ms) { return step_ms > 0.0 ? ms / step_ms : 0.0; }

// Rows keyed by (layer, pass), summed in first-seen order of keys (then sorted).
std::vector<StepProfileRow> merged_rows(const std::vector<PassTiming>& timings) {
  std::map<std::pair<std::string, int>, size_t> index;
  std::vector<StepProfileRow> rows;
  for (const PassTiming& t : timings) {
    const std::string layer = t.layer.empty() ? t.type : t.layer;
    const auto key = std::make_pair(layer, static_cast<int>(t.pass));
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, rows.size()).first;
      rows.push_back({layer, t.type, t.pass, 0.0, 0.0, 0});
    }
    rows[it->second].ms += t.ms;
    ++rows[it->second].calls;
  }
  return rows;
}

}  // namespace

StepProfile build_step_profile(const std::vector<PassTiming>& timings, double step_ms, const std::string& source) {
  StepProfile p;
  p.source = source;
  p.step_ms = step_ms;
  p.rows = merged_rows(timings);
  std::sort(p.rows.begin(), p.rows.end(), [](const StepProfileRow& a, const StepProfileRow& b) {
    if (a.ms != b.ms) return a.ms > b.ms;
    return std::make_tuple(a.layer, static_cast<int>(a.pass)) < std::make_tuple(b.layer, static_cast<int>(b.pass));
  });
  std::map<std::string, StepProfileType> by_type;
  std::map<std::string, std::set<std::string>> names;
  for (StepProfileRow& r : p.rows) {
    r.share = share_of(r.ms, step_ms);
    p.layers_ms += r.ms;
    StepProfileType& t = by_type[r.type];
    t.type = r.type;
    (r.pass == ProfilePass::Forward ? t.forward_ms : t.backward_ms) += r.ms;
    names[r.type].insert(r.layer);
  }
  p.rest_ms = std::max(0.0, step_ms - p.layers_ms);
  for (auto& [type, t] : by_type) {
    t.layers = static_cast<int64_t>(names[type].size());
    t.share = share_of(t.total_ms(), step_ms);
    p.types.push_back(t);
  }
  std::sort(p.types.begin(), p.types.end(), [](const StepProfileType& a, const StepProfileType& b) {
    if (a.total_ms() != b.total_ms()) return a.total_ms() > b.total_ms();
    return a.type < b.type;
  });
  return p;
}

nlohmann::ordered_json step_profile_json(const StepProfile& p) {
  nlohmann::ordered_json j;
  j["source"] = p.source;
  j["step_ms"] = p.step_ms;
  j["layers_ms"] = p.layers_ms;
  j["rest_ms"] = p.rest_ms;
  if (p.optimizer_phase_ms >= 0.0) j["optimizer_phase_ms"] = p.optimizer_phase_ms;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const StepProfileRow& r : p.rows)
    rows.push_back({{"layer", r.layer},
                    {"type", r.type},
                    {"pass", profile_pass_name(r.pass)},
                    {"ms", r.ms},
                    {"share", r.share},
                    {"calls", r.calls}});
  j["rows"] = rows;
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (const StepProfileType& t : p.types)
    types.push_back({{"type", t.type},
                     {"forward_ms", t.forward_ms},
                     {"backward_ms", t.backward_ms},
                     {"share", t.share},
                     {"layers", t.layers}});
  j["types"] = types;
  return j;
}

namespace {
std::string line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string line(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return std::string(buf) + "\n";
}
}  // namespace

std::string format_step_profile(const StepProfile& p, size_t max_rows) {
  std::string s = line("  one step, per layer and pass (%s): %.3f ms, of which layers %.3f ms", p.source.c_str(),
                       p.step_ms, p.layers_ms);
  s += line("    %-34s %-18s %-15s %10s %7s %5s", "layer", "type", "pass", "ms", "share", "calls");
  const size_t shown = max_rows == 0 ? p.rows.size() : std::min(max_rows, p.rows.size());
  for (size_t i = 0; i < shown; ++i) {
    const StepProfileRow& r = p.rows[i];
    s += line("    %-34s %-18s %-15s %10.3f %6.1f%% %5lld", r.layer.c_str(), r.type.c_str(), profile_pass_name(r.pass),
              r.ms, 100.0 * r.share, static_cast<long long>(r.calls));
  }
  if (shown < p.rows.size()) {
    double ms = 0.0;
    for (size_t i = shown; i < p.rows.size(); ++i) ms += p.rows[i].ms;
    s += line("    %-34s %-18s %-15s %10.3f %6.1f%%", ("(" + std::to_string(p.rows.size() - shown) + " more rows)").c_str(),
              "", "", ms, 100.0 * share_of(ms, p.step_ms));
  }
  s += line("    %-34s %-18s %-15s %10.3f %6.1f%%", "(rest: optimizer, loss, gaps)", "", "", p.rest_ms,
            100.0 * share_of(p.rest_ms, p.step_ms));
  if (p.optimizer_phase_ms >= 0.0)
    s += line("    (the step's optimizer phase alone: %.3f ms, host-timed to its synchronisation)", p.optimizer_phase_ms);
  s += line("  per layer type (the same step):");
  s += line("    %-18s %7s %10s %10s %10s %7s", "type", "layers", "forward", "backward", "total", "share");
  for (const StepProfileType& t : p.types)
    s += line("    %-18s %7lld %10.3f %10.3f %10.3f %6.1f%%", t.type.c_str(), static_cast<long long>(t.layers),
              t.forward_ms, t.backward_ms, t.total_ms(), 100.0 * t.share);
  return s;
}

}  // namespace sm
