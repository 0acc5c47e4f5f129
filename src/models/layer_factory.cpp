// layer_factory.cpp — builds layers from the `layers = [ {type = ...}, ... ]` tables of a
// model spec. Naming rule (mirrors nn.Sequential): a layer without `name` is called by its
// index in the list, counting from the list's first_index and advancing only for unnamed
// layers that are present; a dropout with p = 0 is left out and takes no index.
#include <cmath>
#include <functional>

#include "spec_internal.h"
#include "spikemesh/layers/batchnorm.h"
#include "spikemesh/layers/conv1d.h"
#include "spikemesh/layers/conv2d.h"
#include "spikemesh/layers/dropout.h"
#include "spikemesh/layers/flatten.h"
#include "spikemesh/layers/linear.h"
#include "spikemesh/layers/mean.h"
#include "spikemesh/layers/pool.h"
#include "spikemesh/layers/spiking_attention.h"

namespace sm::spec {

namespace {

const char* const kLayerTypes =
    "conv2d, conv1d, linear, batchnorm2d, batchnorm1d, maxpool2d, avgpool2d, flatten, mean, dropout, lif, plif, if, "
    "neuron (a [neurons.<preset>]), ssa, sequential, residual";

int to_int(FieldReader& r, const std::string& key, int64_t v) {
  if (v > INT32_MAX || v < INT32_MIN) r.fail_key(key, "is out of range: " + std::to_string(v));
  return static_cast<int>(v);
}

WeightInit read_init(FieldReader& r) {
  std::string s = r.string("init", "default");
  try {
    return weight_init_from_name(s);
  } catch (const Error&) {
    r.fail_key("init", "unknown weight init '" + s +
                           "' (valid: default, kaiming_normal_fan_out, trunc_normal_002, normal_001)");
  }
}

// The fields every weight layer ends with (bias, init), then the layer.
template <typename Layer, typename Config>
LayerPtr finish_weight_layer(FieldReader& r, Config& c) {
  c.bias = r.boolean("bias", true);
  c.init = read_init(r);
  r.finish();
  return std::make_unique<Layer>(c);
}

LayerPtr make_conv2d(FieldReader& r) {
  Conv2dConfig c;
  c.in_channels = to_int(r, "in_channels", r.positive("in_channels"));
  c.out_channels = to_int(r, "out_channels", r.positive("out_channels"));
  c.kernel = to_int(r, "kernel_size", r.positive("kernel_size"));
  c.stride = to_int(r, "stride", r.positive("stride", 1));
  c.padding = to_int(r, "padding", r.integer("padding", 0));
  if (c.padding < 0) r.fail_key("padding", "must be >= 0, got " + std::to_string(c.padding));
  return finish_weight_layer<Conv2d>(r, c);
}

LayerPtr make_conv1d(FieldReader& r) {
  Conv1dConfig c;
  c.in_channels = to_int(r, "in_channels", r.positive("in_channels"));
  c.out_channels = to_int(r, "out_channels", r.positive("out_channels"));
  return finish_weight_layer<Conv1d>(r, c);
}

LayerPtr make_linear(FieldReader& r) {
  LinearConfig c;
  c.in_features = to_int(r, "in_features", r.positive("in_features"));
  c.out_features = to_int(r, "out_features", r.positive("out_features"));
  return finish_weight_layer<Linear>(r, c);
}

LayerPtr make_batchnorm(FieldReader& r, int spatial_dims) {
  BatchNormConfig c;
  c.spatial_dims = spatial_dims;
  c.num_features = to_int(r, "num_features", r.positive("num_features"));
  c.eps = r.number("eps", 1e-5);
  if (!(c.eps > 0)) r.fail_key("eps", "must be positive");
  c.momentum = r.number("momentum", 0.1);
  if (!(c.momentum >= 0 && c.momentum <= 1)) r.fail_key("momentum", "must be in [0, 1]");
  r.finish();
  return std::make_unique<BatchNorm>(c);
}

PoolConfig read_pool(FieldReader& r) {
  PoolConfig c;
  c.kernel = to_int(r, "kernel_size", r.positive("kernel_size"));
  c.stride = to_int(r, "stride", r.positive("stride", c.kernel));  // PyTorch: stride defaults to kernel_size
  c.padding = to_int(r, "padding", r.integer("padding", 0));
  if (c.padding < 0 || 2 * c.padding > c.kernel)
    r.fail_key("padding", "must be in [0, kernel_size/2], got " + std::to_string(c.padding));
  r.finish();
  return c;
}

LayerPtr make_ssa(FieldReader& r) {
  const int heads = to_int(r, "heads", r.positive("heads"));
  const double scale = r.number("scale", 0.125);
  if (!std::isfinite(scale)) r.fail_key("scale", "must be a finite number");
  r.finish();
  return std::make_unique<SpikingAttention>(heads, scale);
}

NeuronKind neuron_kind(const std::string& t) {
  return t == "lif" ? NeuronKind::LIF : t == "plif" ? NeuronKind::PLIF : NeuronKind::IF;
}

std::string describe_layer(const std::string& unit_where, const std::string& path, const std::string& type) {
  return unit_where + ", layer '" + path + "' (" + type + ")";
}

// Builds one layer; returns nullptr when the layer is left out (dropout p = 0).
// A neuron layer from a preset of the spec ([neuron.NAME]) plus this layer's overrides.
LayerPtr make_preset_neuron(FieldReader& r, Context& ctx) {
  std::string preset = r.string("neuron");
  auto it = ctx.neuron_presets.find(preset);
  if (it == ctx.neuron_presets.end()) {
    std::string known;
    for (auto& kv : ctx.neuron_presets) known += (known.empty() ? "" : ", ") + kv.first;
    r.fail_key("neuron", "names an unknown neuron preset '" + preset + "' (defined: " +
                             (known.empty() ? "none" : known) + ")");
  }
  NeuronConfig c = read_neuron_fields(r, it->second.kind, it->second);  // preset + overrides
  r.finish();
  return std::make_unique<Neuron>(c);
}

// A sequential or residual container and its layers (build_layers, recursively).
LayerPtr make_container(const std::string& type, FieldReader& r, Context& ctx, const std::string& path,
                        const std::string& unit_where) {
  const toml::array& body = r.array("layers");
  int64_t first = r.integer("first_index", 0);
  if (first < 0) r.fail_key("first_index", "must be >= 0");
  r.finish();
  std::unique_ptr<Sequential> s;
  if (type == "residual")
    s = std::make_unique<Residual>();
  else
    s = std::make_unique<Sequential>();
  build_layers(body, *s, ctx, path, first, unit_where, r.line_of("layers"));
  if (s->size() == 0) r.fail("has no layers");
  return s;
}

// The layer of spec type `type` (every type but dropout, which build_layer handles); an Input
// error naming the key for an unknown type or a bad field.
LayerPtr make_typed_layer(const std::string& type, FieldReader& r, Context& ctx, const std::string& path,
                          const std::string& unit_where) {
  if (type == "conv2d") return make_conv2d(r);
  if (type == "conv1d") return make_conv1d(r);
  if (type == "linear") return make_linear(r);
  if (type == "batchnorm2d" || type == "batchnorm1d") return make_batchnorm(r, type == "batchnorm2d" ? 2 : 1);
  if (type == "maxpool2d") return std::make_unique<MaxPool2d>(read_pool(r));
  if (type == "avgpool2d") return std::make_unique<AvgPool2d>(read_pool(r));
  if (type == "ssa") return make_ssa(r);
  if (type == "flatten") {
    const int64_t start = r.integer("start_dim", 0);
    if (start < 0) r.fail_key("start_dim", "must be >= 0 (a per-sample dim; 0 merges all)");
    r.finish();
    return std::make_unique<Flatten>(to_int(r, "start_dim", start));
  }
  if (type == "mean") {
    const int64_t dim = r.integer("dim", -1);
    r.finish();
    return std::make_unique<Mean>(to_int(r, "dim", dim));
  }
  if (type == "lif" || type == "plif" || type == "if") {
    NeuronKind k = neuron_kind(type);
    NeuronConfig c = read_neuron_fields(r, k, default_neuron_config(k));
    r.finish();
    return std::make_unique<Neuron>(c);
  }
  if (type == "neuron") return make_preset_neuron(r, ctx);
  if (type == "sequential" || type == "residual") return make_container(type, r, ctx, path, unit_where);
  r.fail_key("type", "is an unknown layer type '" + type + "' (valid: " + kLayerTypes + ")");
  return nullptr;
}

LayerPtr build_layer(const toml::table& t, Context& ctx, const std::string& parent_path, int64_t& next_index,
                     const std::string& unit_where, int position) {
  FieldReader r(t, ctx, unit_where + ", layer #" + std::to_string(position));
  std::string type = r.string("type");
  // The name is known once we know whether the layer is present; read it now, assign later.
  std::optional<std::string> explicit_name;
  if (r.has("name")) {
    explicit_name = r.string("name");
    for (char c : *explicit_name)
      if (c == '/' || c == ' ' || c == '\t') r.fail_key("name", "must not contain '/' or blanks");
  }
  // The index is taken only once the layer is known to be present.
  const std::string local = explicit_name ? *explicit_name : std::to_string(next_index);
  const std::string path = join_path(parent_path, local);
  r.set_where(describe_layer(unit_where, path.empty() ? "-" : path, type));

  if (type == "dropout") {
    double p = r.number("p");
    if (!(p >= 0 && p < 1)) r.fail_key("p", "must be in [0, 1), got " + std::to_string(p));
    if (ctx.dropout_override) p = *ctx.dropout_override;
    ctx.dropout_seen = true;
    r.finish();
    if (p == 0) return nullptr;  // omitted entirely; takes no index
    if (!explicit_name) ++next_index;
    LayerPtr l = std::make_unique<Dropout>(p);
    l->set_name(local);
    ctx.origins[l.get()] = {r.where(), r.line()};
    return l;
  }

  if (!explicit_name) ++next_index;
  LayerPtr l;
  try {
    l = make_typed_layer(type, r, ctx, path, unit_where);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind(ctx.file, 0) == 0) throw;  // already located
    r.fail(msg);                             // a layer constructor refused the configuration
  }
  l->set_name(local);
  ctx.origins[l.get()] = {r.where(), r.line()};
  return l;
}

}  // namespace

void build_layers(const toml::array& arr, Sequential& into, Context& ctx, const std::string& parent_path,
                  int64_t first_index, const std::string& unit_where, int array_line) {
  if (arr.empty()) fail_at(ctx, array_line, unit_where + (parent_path.empty() ? "" : ", '" + parent_path + "'"),
                           "'layers' is empty");
  int64_t next_index = first_index;
  int position = 0;
  for (const toml::node& n : arr) {
    const toml::table* t = n.as_table();
    if (!t)
      fail_at(ctx, static_cast<int>(n.source().begin.line), unit_where,
              "'layers' entry #" + std::to_string(position) + " must be a table such as { type = \"conv2d\", ... }");
    LayerPtr l = build_layer(*t, ctx, parent_path, next_index, unit_where, position);
    if (l) into.add(std::move(l));
    ++position;
  }
}

}  // namespace sm::spec
