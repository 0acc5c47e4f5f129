// spec_loader.cpp — TOML model spec -> Model: [model], [vars], [neurons.*], [[unit]]
// (format: input/models/README.md); shape chaining with located errors; the built-in zoo.
#include "spikemesh/models/spec_loader.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "spec_internal.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/text_file.h"
#include "spikemesh/core/toml_guard.h"

namespace sm {

namespace {

using spec::Context;
using spec::FieldReader;

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

toml::table parse_toml_file(const std::string& path) {
  const std::string text = read_text_file(path, "model spec");  // bounded, text only (core/text_file.h)
  if (const std::string why = toml_parser_bug_reason(text); !why.empty()) SM_INPUT_ERROR(path << ": " << why);
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    SM_INPUT_ERROR(path << ":" << e.source().begin.line << ":" << e.source().begin.column
                        << ": TOML syntax error: " << e.description());
  }
}

void read_vars(const toml::table& root, Context& ctx, const ModelOverrides& ov) {
  if (const toml::node* n = root.get("vars")) {
    const toml::table* t = n->as_table();
    if (!t) spec::fail_at(ctx, static_cast<int>(n->source().begin.line), "[vars]", "must be a table");
    for (auto&& [k, v] : *t) {
      std::string name(k.str());
      int line = static_cast<int>(v.source().begin.line);
      if (!is_identifier(name)) spec::fail_at(ctx, line, "[vars]", "'" + name + "' is not a valid identifier");
      auto iv = v.value_exact<int64_t>();
      if (!iv) spec::fail_at(ctx, line, "[vars]", "'" + name + "' must be an integer");
      ctx.vars[name] = *iv;
    }
  }
  for (auto& [name, value] : ov.vars) {
    if (!ctx.vars.count(name)) {
      std::string known;
      for (auto& kv : ctx.vars) known += (known.empty() ? "" : ", ") + kv.first;
      SM_INPUT_ERROR("override of var '" << name << "': model spec '" << ctx.file << "' defines no such var ([vars]: "
                                         << (known.empty() ? "none" : known) << ")");
    }
    ctx.vars[name] = value;
  }
}

// [[require]] value = "image_size / 16", why = "...": an integer expression over the vars that
// must evaluate (every "/" exact) to at least `min` (default 1); checked once, after overrides,
// so that a var combination the model cannot use is refused with the spec's own reason.
void check_requirements(const toml::table& root, const Context& ctx) {
  const toml::node* n = root.get("require");
  if (!n) return;
  const toml::array* reqs = n->as_array();
  if (!reqs) spec::fail_at(ctx, static_cast<int>(n->source().begin.line), "top level", "'require' must be a list of [[require]] tables");
  int index = 0;
  for (const toml::node& e : *reqs) {
    const std::string where = "[[require]] " + std::to_string(index++);
    const toml::table* t = e.as_table();
    if (!t) spec::fail_at(ctx, static_cast<int>(e.source().begin.line), where, "must be a table");
    FieldReader r(*t, ctx, where);
    const std::string expr = r.string("value");
    const std::string why = r.string("why", "");
    const int64_t min = r.integer("min", 1);
    r.finish();
    std::string used;  // "image_size = 100" for every var the expression names
    for (auto& [name, value] : ctx.vars) {
      size_t at = expr.find(name);
      bool whole = at != std::string::npos && (at == 0 || !(std::isalnum(static_cast<unsigned char>(expr[at - 1])) || expr[at - 1] == '_'));
      size_t end = at + name.size();
      whole = whole && (end == expr.size() || !(std::isalnum(static_cast<unsigned char>(expr[end])) || expr[end] == '_'));
      if (whole) used += (used.empty() ? "" : ", ") + name + " = " + std::to_string(value);
    }
    std::string err;
    const std::optional<int64_t> v = spec::eval_int_expr(expr, ctx.vars, &err);
    if (v && *v < min) err = "evaluates to " + std::to_string(*v) + ", needs >= " + std::to_string(min);
    if (!err.empty())
      r.fail("\"" + expr + "\"" + (used.empty() ? "" : " with " + used) + ": " + err + (why.empty() ? "" : " (" + why + ")"));
  }
}

void read_neuron_presets(const toml::table& root, Context& ctx) {
  const toml::node* n = root.get("neurons");
  if (!n) return;
  const toml::table* t = n->as_table();
  if (!t) spec::fail_at(ctx, static_cast<int>(n->source().begin.line), "[neurons]", "must be a table of presets");
  for (auto&& [k, v] : *t) {
    std::string name(k.str());
    std::string where = "[neurons." + name + "]";
    const toml::table* pt = v.as_table();
    if (!pt) spec::fail_at(ctx, static_cast<int>(v.source().begin.line), where, "must be a table");
    FieldReader r(*pt, ctx, where);
    std::string type = r.string("type");
    NeuronKind kind;
    if (type == "lif") kind = NeuronKind::LIF;
    else if (type == "plif") kind = NeuronKind::PLIF;
    else if (type == "if") kind = NeuronKind::IF;
    else r.fail_key("type", "must be lif, plif or if, got '" + type + "'");
    NeuronConfig c = spec::read_neuron_fields(r, kind, spec::default_neuron_config(kind));
    r.finish();
    ctx.neuron_presets[name] = c;
  }
}

ModelInfo read_model_table(const toml::table& root, const Context& ctx, const ModelOverrides& ov) {
  const toml::node* n = root.get("model");
  if (!n) spec::fail_at(ctx, 0, "[model]", "missing (name, input, num_classes, T, loss, input_kind)");
  const toml::table* t = n->as_table();
  if (!t) spec::fail_at(ctx, static_cast<int>(n->source().begin.line), "[model]", "must be a table");
  FieldReader r(*t, ctx, "[model]");
  ModelInfo info;
  info.source = ctx.file;
  info.name = r.string("name");
  if (info.name.empty()) r.fail_key("name", "must not be empty");
  const toml::array& input = r.array("input");
  if (input.empty() || input.size() > static_cast<size_t>(kMaxDims - 2))
    r.fail_key("input", "must list 1 to " + std::to_string(kMaxDims - 2) + " per-sample dims, e.g. [2, 48, 48]");
  for (const toml::node& d : input) {
    int64_t v = r.integer_value(d, "'input'");
    if (v <= 0) r.fail_key("input", "dims must be positive, got " + std::to_string(v));
    info.input_shape.push_back(v);
  }
  int64_t classes = r.positive("num_classes");
  int64_t T = r.positive("T");
  if (classes > INT32_MAX || T > INT32_MAX) r.fail("num_classes / T out of range");
  info.num_classes = static_cast<int>(classes);
  info.T = ov.T ? *ov.T : static_cast<int>(T);
  if (info.T <= 0) SM_INPUT_ERROR("--T must be >= 1 (time steps), got " << info.T << " (model '" << info.name << "')");
  info.loss = r.string("loss");
  if (info.loss != "mean_ce" && info.loss != "rate_mse")
    r.fail_key("loss", "must be mean_ce or rate_mse, got '" + info.loss + "'");
  info.input_kind = r.string("input_kind");
  if (info.input_kind != "events" && info.input_kind != "static")
    r.fail_key("input_kind", "must be events (dataset is [T, ...]) or static (repeated over T), got '" +
                                 info.input_kind + "'");
  (void)r.string("description", "");
  r.finish();
  return info;
}

// Chains per-sample shapes through `l`, turning any layer complaint into a located error.
Shape chain_shapes(Layer& l, const Shape& in, const Context& ctx) {
  auto origin = ctx.origins.find(&l);
  std::vector<Layer*> kids = l.children();
  if (!kids.empty()) {
    Shape s = in;
    for (Layer* c : kids) s = chain_shapes(*c, s, ctx);
    if (l.type() == "residual" && s != in && origin != ctx.origins.end())
      spec::fail_at(ctx, origin->second.line, origin->second.where,
                    "the residual body maps " + shape_str(in) + " to " + shape_str(s) + "; it must keep the shape");
    return s;
  }
  try {
    return l.output_shape(in);
  } catch (const Error& e) {
    std::string where = origin != ctx.origins.end() ? origin->second.where : l.type();
    spec::fail_at(ctx, origin != ctx.origins.end() ? origin->second.line : 0, where,
                  "input " + shape_str(in) + ": " + e.what());
  }
}

// State-dict names of every parameter and buffer must be unique (computed as name_layers will).
void check_unique_names(Layer& l, const std::string& path, const Context& ctx,
                        std::map<std::string, std::string>& seen) {
  std::vector<Layer*> kids = l.children();
  std::vector<Param*> ps = l.params();
  std::vector<Buffer*> bs = l.buffers();
  size_t child_p = 0, child_b = 0;
  for (Layer* c : kids) {
    child_p += c->params().size();
    child_b += c->buffers().size();
  }
  std::vector<std::string> own;
  for (size_t i = 0; i + child_p < ps.size(); ++i) own.push_back(spec::join_path(path, ps[i]->local_name));
  for (size_t i = 0; i + child_b < bs.size(); ++i) own.push_back(spec::join_path(path, bs[i]->local_name));
  auto origin = ctx.origins.find(&l);
  std::string where = origin != ctx.origins.end() ? origin->second.where : "unit '" + path + "'";
  for (const std::string& name : own) {
    auto [it, fresh] = seen.emplace(name, where);
    if (!fresh)
      spec::fail_at(ctx, origin != ctx.origins.end() ? origin->second.line : 0, where,
                    "state-dict name '" + name + "' is already used by " + it->second);
  }
  for (Layer* c : kids) check_unique_names(*c, spec::join_path(path, c->name()), ctx, seen);
}

}  // namespace

std::unique_ptr<Model> load_model_spec(const std::string& path, const ModelOverrides& ov) {
  toml::table root = parse_toml_file(path);
  Context ctx;
  ctx.file = path;
  ctx.dropout_override = ov.dropout;
  if (ov.dropout && !(*ov.dropout >= 0 && *ov.dropout < 1))
    SM_INPUT_ERROR("dropout must be in [0, 1), got " << *ov.dropout);

  for (auto&& [k, v] : root) {
    std::string key(k.str());
    if (key != "model" && key != "vars" && key != "neurons" && key != "unit" && key != "require")
      spec::fail_at(ctx, static_cast<int>(v.source().begin.line), "top level",
                    "unknown table '" + key + "' (valid: [model], [vars], [[require]], [neurons.<name>], [[unit]])");
  }
  read_vars(root, ctx, ov);
  check_requirements(root, ctx);
  auto model = std::make_unique<Model>();
  model->info = read_model_table(root, ctx, ov);
  read_neuron_presets(root, ctx);

  const toml::node* un = root.get("unit");
  if (!un) spec::fail_at(ctx, 0, "top level", "no [[unit]] tables: a model needs at least one unit");
  const toml::array* units = un->as_array();
  if (!units || units->empty())
    spec::fail_at(ctx, static_cast<int>(un->source().begin.line), "top level", "'unit' must be a list of [[unit]] tables");
  int index = 0;
  for (const toml::node& n : *units) {
    std::string where = "unit " + std::to_string(index);
    const toml::table* t = n.as_table();
    if (!t) spec::fail_at(ctx, static_cast<int>(n.source().begin.line), where, "must be a table");
    FieldReader r(*t, ctx, where);
    const std::string name_pattern = r.string("name");
    r.set_where(where + " '" + name_pattern + "'");
    const toml::array& layers = r.array("layers");
    int64_t first = r.integer("first_index", 0);
    if (first < 0) r.fail_key("first_index", "must be >= 0");
    // repeat = K (an integer or expression, e.g. "depth"): K copies of the unit, "{i}" in the
    // name replaced by 0..K-1 (Spikformer's blocks.{i}).
    const int64_t repeat = r.integer("repeat", 1);
    const size_t brace = name_pattern.find("{i}");
    if (repeat < 1) r.fail_key("repeat", "must be >= 1, got " + std::to_string(repeat));
    if (repeat > 1 && brace == std::string::npos)
      r.fail_key("repeat", "needs '{i}' in the unit name (e.g. name = \"blocks.{i}\") so the copies get distinct names");
    r.finish();
    for (int64_t k = 0; k < repeat; ++k) {
      std::string name = name_pattern;
      if (brace != std::string::npos) name.replace(brace, 3, std::to_string(k));
      const std::string unit_where = "unit " + std::to_string(index) + " '" + name + "'";
      auto unit = std::make_unique<Unit>(name);
      spec::build_layers(layers, *unit, ctx, name, first, unit_where, r.line_of("layers"));
      ctx.origins[unit.get()] = {unit_where, r.line()};
      model->units.push_back(std::move(unit));
      ++index;
    }
  }
  if (ov.dropout && *ov.dropout > 0 && !ctx.dropout_seen)
    SM_WARN("model '" << model->info.name << "' has no dropout layer; dropout " << *ov.dropout << " is ignored");

  // State-dict names must be unique.
  std::map<std::string, std::string> seen;
  for (auto& u : model->units) check_unique_names(*u, u->name(), ctx, seen);

  // Shapes must chain from the input to [num_classes].
  Shape s = model->info.input_shape;
  for (auto& u : model->units) s = chain_shapes(*u, s, ctx);
  if (s != Shape{model->info.num_classes})
    spec::fail_at(ctx, ctx.origins[model->units.back().get()].line, ctx.origins[model->units.back().get()].where,
                  "the model output is " + shape_str(s) + " per sample, but [model] num_classes = " +
                      std::to_string(model->info.num_classes) + " needs [" +
                      std::to_string(model->info.num_classes) + "]");

  model->loss = make_loss(model->info.loss);
  return model;
}

// ---- built-in zoo ---------------------------------------------------------------------

namespace {

std::vector<std::string> model_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("SPIKEMESH_MODELS"); env && *env) dirs.emplace_back(env);
  dirs.emplace_back("input/models");
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    buf[n] = '\0';
    std::filesystem::path exe(buf);
    dirs.push_back((exe.parent_path() / ".." / ".." / "input" / "models").lexically_normal().string());
  }
  return dirs;
}

}  // namespace

std::vector<std::string> builtin_model_names() {
  std::set<std::string> names;
  for (const std::string& d : model_search_dirs()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(d, ec)) continue;
    for (const auto& e : std::filesystem::directory_iterator(d, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".toml") names.insert(e.path().stem().string());
  }
  return {names.begin(), names.end()};
}

std::string builtin_model_path(const std::string& name) {
  std::error_code ec;
  // A path to a spec file is accepted as it is.
  bool looks_like_path = name.find('/') != std::string::npos ||
                         (name.size() > 5 && name.compare(name.size() - 5, 5, ".toml") == 0);
  if (looks_like_path) {
    if (std::filesystem::is_regular_file(name, ec)) return name;
    SM_INPUT_ERROR("model spec file '" << name << "' does not exist");
  }
  std::vector<std::string> dirs = model_search_dirs();
  for (const std::string& d : dirs) {
    std::filesystem::path p = std::filesystem::path(d) / (name + ".toml");
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  std::string known, searched;
  for (const std::string& n : builtin_model_names()) known += (known.empty() ? "" : ", ") + n;
  for (const std::string& d : dirs) searched += (searched.empty() ? "" : ", ") + d;
  SM_INPUT_ERROR("unknown model '" << name << "' (built-in models: " << (known.empty() ? "none found" : known)
                                   << "; searched " << searched << ", $SPIKEMESH_MODELS overrides)");
}

std::unique_ptr<Model> load_builtin_model(const std::string& name, const ModelOverrides& ov) {
  return load_model_spec(builtin_model_path(name), ov);
}

}  // namespace sm
