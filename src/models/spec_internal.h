// spec_internal.h — shared pieces of the model-spec loader (private to src/models/):
// the parsing context, a field reader that reports every mistake with file:line and the
// entry it belongs to, integer expressions over [vars], and the layer factory.
// Invariant: every error raised here is sm::Error(Input) whose message starts with
// "<file>:<line>: <entry>:".
#pragma once
#include <toml++/toml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "spikemesh/layers/layer.h"
#include "spikemesh/layers/neuron.h"
#include "spikemesh/layers/sequential.h"

namespace sm::spec {

// Where a built layer came from, for shape-chaining errors.
struct LayerOrigin {
  std::string where;  // "unit 3 'features.3', layer 'features.3.proj_bn.0' (conv2d)"
  int line = 0;
};

struct Context {
  std::string file;
  std::map<std::string, int64_t> vars;
  std::map<std::string, NeuronConfig> neuron_presets;
  std::optional<double> dropout_override;
  std::map<const Layer*, LayerOrigin> origins;  // filled by the factory
  bool dropout_seen = false;
};

[[noreturn]] void fail_at(const Context& ctx, int line, const std::string& where, const std::string& msg);
std::string join_path(const std::string& a, const std::string& b);  // "a.b"; empty parts vanish

// Evaluates "C*7*7", "4*C", "(H+1)/2": integers, identifiers from vars, + - * / ( ), unary
// minus. "/" must divide exactly. On error returns nullopt and sets *err.
std::optional<int64_t> eval_int_expr(const std::string& expr, const std::map<std::string, int64_t>& vars,
                                     std::string* err);

// Reads the fields of one TOML table; remembers every key asked for so that finish() can
// reject the others (typos) and list the valid ones.
class FieldReader {
 public:
  FieldReader(const toml::table& t, const Context& ctx, std::string where);

  bool has(const std::string& key);
  const toml::node* node(const std::string& key);  // nullptr if absent
  int64_t integer(const std::string& key);          // required; literal or expression string
  int64_t integer(const std::string& key, int64_t dflt);
  int64_t positive(const std::string& key);         // required, > 0
  int64_t positive(const std::string& key, int64_t dflt);
  double number(const std::string& key);            // required; integer or float literal
  double number(const std::string& key, double dflt);
  bool boolean(const std::string& key, bool dflt);
  std::string string(const std::string& key);       // required
  std::string string(const std::string& key, const std::string& dflt);
  const toml::array& array(const std::string& key);  // required
  int64_t integer_value(const toml::node& n, const std::string& what);  // element of an array

  void set_where(std::string w) { where_ = std::move(w); }
  const std::string& where() const { return where_; }
  int line() const { return line_; }
  int line_of(const std::string& key) const;
  void finish();  // errors on keys never asked for
  [[noreturn]] void fail(const std::string& msg) const;
  [[noreturn]] void fail_key(const std::string& key, const std::string& msg) const;

 private:
  const toml::node& required(const std::string& key);
  const toml::table& t_;
  const Context& ctx_;
  std::string where_;
  int line_;
  std::vector<std::string> known_;  // in the order asked, for the message
};

// Neuron fields (type given): validates and fills a NeuronConfig starting from `base`.
NeuronConfig read_neuron_fields(FieldReader& r, NeuronKind kind, NeuronConfig base);
NeuronConfig default_neuron_config(NeuronKind kind);

// Appends the layers of `arr` to `into`. Unnamed layers are numbered from first_index.
// parent_path: path of `into`; unit_where: "unit 3 'features.3'".
void build_layers(const toml::array& arr, Sequential& into, Context& ctx, const std::string& parent_path,
                  int64_t first_index, const std::string& unit_where, int array_line);

}  // namespace sm::spec
