// spec_fields.cpp — field reading for model specs: typed, validated values with
// "<file>:<line>: <entry>: ..." errors, integer expressions over [vars], neuron fields.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "spec_internal.h"

namespace sm::spec {

void fail_at(const Context& ctx, int line, const std::string& where, const std::string& msg) {
  std::ostringstream os;
  os << ctx.file;
  if (line > 0) os << ":" << line;
  os << ": " << where << ": " << msg;
  throw Error(ErrorKind::Input, os.str());
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}

// ---- integer expressions ----------------------------------------------------------------

namespace {

class ExprParser {
 public:
  ExprParser(const std::string& s, const std::map<std::string, int64_t>& vars) : s_(s), vars_(vars) {}

  int64_t parse() {
    int64_t v = sum();
    skip_ws();
    if (pos_ != s_.size()) error("unexpected '" + std::string(1, s_[pos_]) + "'");
    return v;
  }
  struct Failure {
    std::string msg;
  };

 private:
  [[noreturn]] void error(const std::string& m) {
    throw Failure{m + " at position " + std::to_string(pos_ + 1)};
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  int64_t checked(bool overflow, int64_t v) {
    if (overflow) throw Failure{"integer overflow"};
    return v;
  }
  int64_t sum() {
    int64_t v = product();
    for (;;) {
      int64_t r = 0;
      if (eat('+')) {
        bool o = __builtin_add_overflow(v, product(), &r);
        v = checked(o, r);
      } else if (eat('-')) {
        bool o = __builtin_sub_overflow(v, product(), &r);
        v = checked(o, r);
      } else {
        return v;
      }
    }
  }
  int64_t product() {
    int64_t v = unary();
    for (;;) {
      if (eat('*')) {
        int64_t r = 0;
        bool o = __builtin_mul_overflow(v, unary(), &r);
        v = checked(o, r);
      } else if (eat('/')) {
        int64_t d = unary();
        if (d == 0) throw Failure{"division by zero"};
        if (v % d != 0) throw Failure{std::to_string(v) + " / " + std::to_string(d) + " is not an integer"};
        v /= d;
      } else {
        return v;
      }
    }
  }
  int64_t unary() {
    if (eat('-')) {
      int64_t v = unary();
      return checked(v == INT64_MIN, -v);
    }
    if (eat('+')) return unary();
    return primary();
  }
  int64_t primary() {
    skip_ws();
    if (eat('(')) {
      int64_t v = sum();
      if (!eat(')')) error("missing ')'");
      return v;
    }
    if (pos_ >= s_.size()) error("expression ends early");
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        int64_t r = 0;
        bool o = __builtin_mul_overflow(v, int64_t{10}, &r) || __builtin_add_overflow(r, s_[pos_] - '0', &r);
        v = checked(o, r);
        ++pos_;
      }
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
      std::string id = s_.substr(b, pos_ - b);
      auto it = vars_.find(id);
      if (it == vars_.end()) {
        std::string known;
        for (auto& kv : vars_) known += (known.empty() ? "" : ", ") + kv.first;
        throw Failure{"unknown var '" + id + "' ([vars] defines: " + (known.empty() ? "none" : known) + ")"};
      }
      return it->second;
    }
    error("unexpected '" + std::string(1, c) + "'");
  }

  const std::string& s_;
  const std::map<std::string, int64_t>& vars_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<int64_t> eval_int_expr(const std::string& expr, const std::map<std::string, int64_t>& vars,
                                     std::string* err) {
  try {
    return ExprParser(expr, vars).parse();
  } catch (const ExprParser::Failure& f) {
    if (err) *err = f.msg;
    return std::nullopt;
  }
}

// ---- FieldReader ------------------------------------------------------------------------

FieldReader::FieldReader(const toml::table& t, const Context& ctx, std::string where)
    : t_(t), ctx_(ctx), where_(std::move(where)), line_(static_cast<int>(t.source().begin.line)) {}

int FieldReader::line_of(const std::string& key) const {
  const toml::node* n = t_.get(key);
  return n ? static_cast<int>(n->source().begin.line) : line_;
}

void FieldReader::fail(const std::string& msg) const { fail_at(ctx_, line_, where_, msg); }

void FieldReader::fail_key(const std::string& key, const std::string& msg) const {
  fail_at(ctx_, line_of(key), where_, "'" + key + "' " + msg);
}

bool FieldReader::has(const std::string& key) {
  known_.push_back(key);
  return t_.contains(key);
}

const toml::node* FieldReader::node(const std::string& key) {
  known_.push_back(key);
  return t_.get(key);
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

const toml::node& FieldReader::required(const std::string& key) {
  const toml::node* n = node(key);
  if (!n) {
    std::string hint;  // a present key that looks like a typo of this one
    for (auto&& [k, v] : t_) {
      std::string given(k.str());
      if (given != key && edit_distance(given, key) <= 2) hint = " (is '" + given + "' a typo of it?)";
    }
    fail("missing required field '" + key + "'" + hint);
  }
  return *n;
}

int64_t FieldReader::integer_value(const toml::node& n, const std::string& what) {
  if (auto v = n.value_exact<int64_t>()) return *v;
  if (const auto* s = n.as_string()) {
    std::string err;
    auto v = eval_int_expr(s->get(), ctx_.vars, &err);
    if (!v) fail_at(ctx_, static_cast<int>(n.source().begin.line), where_, what + ": \"" + s->get() + "\": " + err);
    return *v;
  }
  fail_at(ctx_, static_cast<int>(n.source().begin.line), where_,
          what + ": must be an integer or an integer expression string such as \"4*C\"");
}

int64_t FieldReader::integer(const std::string& key) { return integer_value(required(key), "'" + key + "'"); }

int64_t FieldReader::integer(const std::string& key, int64_t dflt) {
  const toml::node* n = node(key);
  return n ? integer_value(*n, "'" + key + "'") : dflt;
}

int64_t FieldReader::positive(const std::string& key) {
  int64_t v = integer(key);
  if (v <= 0) fail_key(key, "must be positive, got " + std::to_string(v));
  return v;
}

int64_t FieldReader::positive(const std::string& key, int64_t dflt) {
  int64_t v = integer(key, dflt);
  if (v <= 0) fail_key(key, "must be positive, got " + std::to_string(v));
  return v;
}

double FieldReader::number(const std::string& key) {
  const toml::node& n = required(key);
  if (auto v = n.value_exact<double>()) {
    if (!std::isfinite(*v)) fail_key(key, "must be a finite number, got " + std::to_string(*v));  // every spec number
    return *v;
  }
  if (auto v = n.value_exact<int64_t>()) return static_cast<double>(*v);
  fail_key(key, "must be a number");
}

double FieldReader::number(const std::string& key, double dflt) { return has(key) ? number(key) : dflt; }

bool FieldReader::boolean(const std::string& key, bool dflt) {
  const toml::node* n = node(key);
  if (!n) return dflt;
  if (auto v = n->value_exact<bool>()) return *v;
  fail_key(key, "must be true or false");
}

std::string FieldReader::string(const std::string& key) {
  const toml::node& n = required(key);
  if (const auto* s = n.as_string()) return s->get();
  fail_key(key, "must be a string");
}

std::string FieldReader::string(const std::string& key, const std::string& dflt) {
  return has(key) ? string(key) : dflt;
}

const toml::array& FieldReader::array(const std::string& key) {
  const toml::node& n = required(key);
  if (const auto* a = n.as_array()) return *a;
  fail_key(key, "must be an array");
}

void FieldReader::finish() {
  for (auto&& [k, v] : t_) {
    std::string key(k.str());
    bool ok = false;
    for (const auto& kn : known_) ok = ok || kn == key;
    if (ok) continue;
    std::string valid;
    std::set<std::string> seen;
    for (const auto& kn : known_)
      if (seen.insert(kn).second) valid += (valid.empty() ? "" : ", ") + kn;
    fail_at(ctx_, static_cast<int>(v.source().begin.line), where_,
            "unknown key '" + key + "' (valid keys here: " + valid + ")");
  }
}

// ---- neurons ----------------------------------------------------------------------------

NeuronConfig default_neuron_config(NeuronKind kind) {
  NeuronConfig c;  // docs/semantics.md §5 defaults: tau 2, decay_input, v_th 1, hard reset 0, Sigmoid(4)
  c.kind = kind;
  return c;
}

NeuronConfig read_neuron_fields(FieldReader& r, NeuronKind kind, NeuronConfig c) {
  c.kind = kind;
  if (kind != NeuronKind::IF) {
    c.tau = r.number("tau", c.tau);
    if (!(c.tau > 0) || !std::isfinite(c.tau)) r.fail_key("tau", "must be positive, got " + std::to_string(c.tau));
    if (kind == NeuronKind::PLIF && !(c.tau > 1))
      r.fail_key("tau", "of a PLIF neuron must be > 1 (w0 = -ln(tau - 1)), got " + std::to_string(c.tau));
    c.decay_input = r.boolean("decay_input", c.decay_input);
  }
  c.v_threshold = r.number("v_threshold", c.v_threshold);
  if (!std::isfinite(c.v_threshold)) r.fail_key("v_threshold", "must be finite");
  if (const toml::node* n = r.node("v_reset")) {
    if (const auto* s = n->as_string()) {
      if (s->get() != "none") r.fail_key("v_reset", "must be a number (hard reset) or \"none\" (soft reset)");
      c.hard_reset = false;
    } else if (auto v = n->value<double>()) {
      if (!std::isfinite(*v)) r.fail_key("v_reset", "must be finite");
      c.hard_reset = true;
      c.v_reset = *v;
    } else {
      r.fail_key("v_reset", "must be a number (hard reset) or \"none\" (soft reset)");
    }
  }
  c.detach_reset = r.boolean("detach_reset", c.detach_reset);
  if (r.has("surrogate")) {
    std::string s = r.string("surrogate");
    if (s == "sigmoid") {
      c.surrogate = SurrogateKind::Sigmoid;
      c.alpha = 4.0;  // its default unless alpha is given
    } else if (s == "atan") {
      c.surrogate = SurrogateKind::ATan;
      c.alpha = 2.0;
    } else {
      r.fail_key("surrogate", "unknown surrogate '" + s + "' (valid: sigmoid, atan)");
    }
  }
  c.alpha = r.number("alpha", c.alpha);
  if (!(c.alpha > 0) || !std::isfinite(c.alpha)) r.fail_key("alpha", "must be positive");
  return c;
}

}  // namespace sm::spec
