// config_keys.cpp — the key registry shared by flags and TOML (config_keys.h).
#include "spikemesh/core/config_keys.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <toml++/toml.h>

#include "spikemesh/core/error.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/core/toml_guard.h"

namespace sm {

struct ConfigKeys::Field {
  std::string key, help;
  Kind kind;
  void* target;
  std::string cli_value;                // as given on the command line
  std::vector<std::string> cli_values;  // StrList, IntList
  bool cli_flag = false;                // Bool: value given by --key / --no-key
  CLI::Option* opt = nullptr;
  const std::string* cli_source = nullptr;  // a flag registered elsewhere (bind_flag)
};

void merge_var_assignment(std::vector<std::string>& vars, const std::string& assignment) {
  const std::string name = assignment.substr(0, assignment.find('='));
  for (std::string& v : vars)
    if (v.substr(0, v.find('=')) == name) {
      v = assignment;
      return;
    }
  vars.push_back(assignment);
}

namespace {
bool parse_bool(const std::string& v, const std::string& what) {
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  SM_INPUT_ERROR(what << ": expected true or false, got '" << v << "'");
}

// A TOML scalar as the text a flag would give.
std::string scalar_text(const toml::node& n, const std::string& path, const std::string& key) {
  if (auto s = n.value<std::string>(); s && n.is_string()) return *s;
  if (n.is_integer()) return std::to_string(*n.value<int64_t>());
  if (n.is_floating_point()) {
    std::ostringstream os;
    os.precision(17);
    os << *n.value<double>();
    return os.str();
  }
  if (n.is_boolean()) return *n.value<bool>() ? "true" : "false";
  SM_INPUT_ERROR(path << ": key '" << key << "' must be a string, number or boolean");
}
}  // namespace

ConfigKeys::ConfigKeys() = default;
ConfigKeys::~ConfigKeys() = default;

void ConfigKeys::add(const std::string& key, Kind kind, void* target, const std::string& help) {
  auto f = std::make_unique<Field>();
  f->key = key;
  f->kind = kind;
  f->target = target;
  f->help = help;
  fields_.push_back(std::move(f));
}

ConfigKeys::Field* ConfigKeys::find(const std::string& key) {
  for (auto& f : fields_)
    if (f->key == key) return f.get();
  return nullptr;
}

bool ConfigKeys::has(const std::string& key) const {
  return std::any_of(fields_.begin(), fields_.end(), [&](const auto& f) { return f->key == key; });
}

std::vector<std::string> ConfigKeys::keys() const {
  std::vector<std::string> k;
  for (const auto& f : fields_) k.push_back(f->key);
  return k;
}

void ConfigKeys::bind_flag(const std::string& key, CLI::Option* opt, const std::string* value) {
  Field* f = find(key);
  SM_CHECK(f != nullptr, "bind_flag: no key '" << key << "'");
  f->opt = opt;
  f->cli_source = value;
}

void ConfigKeys::add_options(CLI::App& cmd, const std::vector<std::string>* keys) {
  auto wanted = [&](const std::string& key) { return !keys || std::find(keys->begin(), keys->end(), key) != keys->end(); };
  for (auto& f : fields_) {
    if (f->cli_source || !wanted(f->key)) continue;
    const std::string flag = "--" + f->key;
    const std::string range = flag_range_text(f->key);
    std::string help = f->help;
    if (!range.empty() && f->kind != Kind::StrList) help += "; range " + range;
    switch (f->kind) {
      case Kind::Bool: f->opt = cmd.add_flag(flag + ",!--no-" + f->key, f->cli_flag, help); break;
      case Kind::StrList:
      case Kind::IntList: f->opt = cmd.add_option(flag, f->cli_values, help); break;
      default: f->opt = cmd.add_option(flag, f->cli_value, help);
    }
  }
}

void ConfigKeys::set(const std::string& key, const std::string& v, const std::string& origin) {
  Field* f = find(key);
  if (!f) SM_INPUT_ERROR(origin << ": unknown key '" << key << "' (keys are the flags of `spikemesh train --help`)");
  // A flag ("--lr") already names the key; a file origin gets "file: key".
  const std::string what = origin.rfind("--", 0) == 0 ? origin : origin + ": " + key + " (--" + key + ")";
  switch (f->kind) {
    case Kind::Int:
      // T: a file may say 0 (the default, as config.toml records it); a flag must give >= 1.
      if (key == "T" && what != origin && v == "0") {
        *static_cast<int64_t*>(f->target) = 0;
        return;
      }
      *static_cast<int64_t*>(f->target) = parse_flag_int(key, v, what);  // the key's range (flag_ranges.h)
      return;
    case Kind::Real: *static_cast<double*>(f->target) = parse_flag_real(key, v, what); return;
    case Kind::Str: *static_cast<std::string*>(f->target) = v; return;
    case Kind::Bool: *static_cast<bool*>(f->target) = parse_bool(v, what); return;
    case Kind::StrList: static_cast<std::vector<std::string>*>(f->target)->push_back(v); return;
    case Kind::IntList: static_cast<std::vector<int64_t>*>(f->target)->push_back(parse_flag_int(key, v, what)); return;
  }
}

void ConfigKeys::apply_toml_text(const std::string& text, const std::string& path) {
  toml::table tbl;
  if (const std::string why = toml_parser_bug_reason(text); !why.empty()) SM_INPUT_ERROR(path << ": " << why);
  try {
    tbl = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << path << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    SM_INPUT_ERROR(os.str());
  } catch (const std::exception& e) {
    SM_INPUT_ERROR(path << ": cannot read config: " << e.what());
  }
  for (auto&& [k, node] : tbl) {
    const std::string key(k.str());
    file_keys_.insert(key);
    if (auto* arr = node.as_array()) {
      Field* f = find(key);
      if (!f || (f->kind != Kind::StrList && f->kind != Kind::IntList))
        SM_INPUT_ERROR(path << ": key '" << key << "' does not take a list");
      if (f->kind == Kind::IntList) static_cast<std::vector<int64_t>*>(f->target)->clear();
      for (auto& el : *arr) set(key, scalar_text(el, path, key), path);
    } else {
      set(key, scalar_text(node, path, key), path);
    }
  }
}

std::set<std::string> ConfigKeys::given_keys() const {
  std::set<std::string> keys = file_keys_;
  for (const auto& f : fields_)
    if (f->opt && f->opt->count() > 0) keys.insert(f->key);
  return keys;
}

void ConfigKeys::apply_given_flags() {
  for (auto& f : fields_) {
    if (!f->opt || f->opt->count() == 0) continue;
    const std::string origin = "--" + f->key;
    if (f->kind == Kind::Bool) {
      *static_cast<bool*>(f->target) = f->cli_flag;
    } else if (f->kind == Kind::StrList) {
      // --var NAME=INT overrides that NAME alone: the config's other variables stay.
      auto* v = static_cast<std::vector<std::string>*>(f->target);
      for (auto& s : f->cli_values) merge_var_assignment(*v, s);
    } else if (f->kind == Kind::IntList) {
      static_cast<std::vector<int64_t>*>(f->target)->clear();
      for (auto& s : f->cli_values) set(f->key, s, origin);
    } else {
      set(f->key, f->cli_source ? *f->cli_source : f->cli_value, origin);
    }
  }
}

std::string ConfigKeys::to_toml(const std::string& header) const {
  toml::table t;
  for (const auto& f : fields_) {
    switch (f->kind) {
      case Kind::Int: t.insert(f->key, *static_cast<int64_t*>(f->target)); break;
      case Kind::Real: t.insert(f->key, *static_cast<double*>(f->target)); break;
      case Kind::Str: t.insert(f->key, *static_cast<std::string*>(f->target)); break;
      case Kind::Bool: t.insert(f->key, *static_cast<bool*>(f->target)); break;
      case Kind::StrList: {
        toml::array a;
        for (auto& s : *static_cast<std::vector<std::string>*>(f->target)) a.push_back(s);
        t.insert(f->key, a);
        break;
      }
      case Kind::IntList: {
        toml::array a;
        for (int64_t v : *static_cast<std::vector<int64_t>*>(f->target)) a.push_back(v);
        t.insert(f->key, a);
        break;
      }
    }
  }
  std::ostringstream os;
  os << header << t << "\n";
  return os.str();
}

}  // namespace sm
