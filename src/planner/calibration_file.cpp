// calibration_file.cpp — the calibration cache file (calibration_file.h): its JSON form, where it
// lives, reading it (a missing file or an older version: an empty cache), writing it atomically.
#include "spikemesh/planner/calibration_file.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "spikemesh/core/error.h"
#include "spikemesh/core/text_file.h"

namespace sm {

namespace {
using json = nlohmann::json;
constexpr int kFormatVersion = 3;  // 2: tp dry runs shard their regions, kept inputs; 3: output bytes

json link_json(const LinkCost& l) {
  return json{{"alpha_ms", l.alpha_ms}, {"ms_per_mb", l.ms_per_mb}, {"scratch_per_mb", l.scratch_per_mb}};
}

json sample_json(const UnitSample& s) {
  return json{s.forward_ms, s.backward_ms, s.saved_mb, s.work_mb, s.input_kept_mb, s.out_mb};
}
UnitSample sample_of(const json& j) { return UnitSample{j.at(0), j.at(1), j.at(2), j.at(3), j.at(4), j.at(5)}; }

json profile_json(const ModelProfile& m) {
  json e = json::array();
  for (const TpProfile& t : m.entries) {
    json lo = json::array(), hi = json::array();
    for (const UnitSample& s : t.lo) lo.push_back(sample_json(s));
    for (const UnitSample& s : t.hi) hi.push_back(sample_json(s));
    e.push_back(json{{"tp", t.tp}, {"memopt_level", t.memopt_level}, {"param_mb", t.param_mb},
                     {"out_elements", t.out_elements}, {"out_binary", t.out_binary}, {"tp_calls", t.tp_calls},
                     {"tp_elements", t.tp_elements}, {"input_elements", t.input_elements}, {"n_lo", t.n_lo},
                     {"n_hi", t.n_hi}, {"lo", lo}, {"hi", hi}});
  }
  return json{{"model", m.model}, {"T", m.T}, {"elem_bytes", m.elem_bytes},
              {"optimizer_states", m.optimizer_states}, {"entries", e}};
}

ModelProfile profile_of(const json& j) {
  ModelProfile m;
  m.model = j.at("model");
  m.T = j.at("T");
  m.elem_bytes = j.at("elem_bytes");
  m.optimizer_states = j.at("optimizer_states");
  for (const json& e : j.at("entries")) {
    TpProfile t;
    t.tp = e.at("tp");
    t.memopt_level = e.at("memopt_level");
    t.param_mb = e.at("param_mb").get<std::vector<double>>();
    t.out_elements = e.at("out_elements").get<std::vector<double>>();
    t.out_binary = e.at("out_binary").get<std::vector<bool>>();
    t.tp_calls = e.at("tp_calls").get<std::vector<double>>();
    t.tp_elements = e.at("tp_elements").get<std::vector<double>>();
    t.input_elements = e.at("input_elements");
    t.n_lo = e.at("n_lo");
    t.n_hi = e.at("n_hi");
    for (const json& s : e.at("lo")) t.lo.push_back(sample_of(s));
    for (const json& s : e.at("hi")) t.hi.push_back(sample_of(s));
    m.entries.push_back(std::move(t));
  }
  return m;
}
}  // namespace

std::string default_calibration_path() {
  if (const char* p = std::getenv("SPIKEMESH_CALIBRATION"); p && *p) return p;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = xdg && *xdg ? std::string(xdg) : std::string(home && *home ? home : ".") + "/.cache";
  return dir + "/spikemesh/calibration.json";
}

std::string read_calibration_text(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  return read_text_file(path, "calibration file");
}

CalibrationCache read_calibration(const std::string& path) { return parse_calibration(read_calibration_text(path), path); }

CalibrationCache parse_calibration(const std::string& text, const std::string& path) {
  CalibrationCache c;
  if (text.empty()) return c;
  try {
    const json j = json::parse(text);
    const int version = j.value("format", "") == "spikemesh-calibration" ? j.value("version", 0) : 0;
    if (version > 0 && version < kFormatVersion) {  // an older spikemesh's: its pieces differ, measured again
      c.note = "calibration " + path + " was written by an older spikemesh (version " + std::to_string(version) +
               ", now " + std::to_string(kFormatVersion) + "): measured again";
      return c;
    }
    if (version != kFormatVersion)
      SM_INPUT_ERROR("calibration file " << path << " is not a spikemesh calibration file of version " << kFormatVersion
                                         << " (remove it, or run `spikemesh calibrate` to write a new one)");
    c.fingerprint = j.value("fingerprint", "");
    const json& m = j.at("machine");
    for (const json& l : m.at("links"))
      c.machine.links[{l.at("kind"), l.at("p")}] = LinkCost{l.at("alpha_ms"), l.at("ms_per_mb"), l.at("scratch_per_mb")};
    c.machine.optimizer_ns_per_element = m.at("optimizer_ns_per_element");
    c.machine.optimizer_scratch = m.at("optimizer_scratch");
    c.machine.oversubscription = m.at("oversubscription");
    c.machine.capacity_mb = m.at("capacity_mb");
    for (const auto& [key, p] : j.at("models").items()) c.models[key] = profile_of(p);
  } catch (const json::exception& e) {
    SM_INPUT_ERROR("calibration file " << path << " cannot be read: " << e.what()
                                       << " (remove it, or run `spikemesh calibrate` to write a new one)");
  }
  return c;
}

void write_calibration(const std::string& path, const CalibrationCache& c) {
  json links = json::array();
  for (const auto& [key, l] : c.machine.links) {
    json e = link_json(l);
    e["kind"] = key.first;
    e["op"] = collective_kind_name(static_cast<CollectiveKind>(key.first));
    e["p"] = key.second;
    links.push_back(e);
  }
  json models = json::object();
  for (const auto& [key, p] : c.models) models[key] = profile_json(p);
  const json j{{"format", "spikemesh-calibration"},
               {"version", kFormatVersion},
               {"fingerprint", c.fingerprint},
               {"machine",
                {{"links", links},
                 {"optimizer_ns_per_element", c.machine.optimizer_ns_per_element},
                 {"optimizer_scratch", c.machine.optimizer_scratch},
                 {"oversubscription", c.machine.oversubscription},
                 {"capacity_mb", c.machine.capacity_mb}}},
               {"models", models}};
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << j.dump(1) << "\n";
    if (!f) SM_INPUT_ERROR("calibration file " << path << ": cannot write " << tmp);
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    SM_INPUT_ERROR("calibration file " << path << ": cannot replace it (" << ec.message() << ")");
  }
}

}  // namespace sm
