// config_keys.h — a registry of configuration keys shared by command-line flags and TOML files.
// Each key binds one field (its name without dashes, e.g. "batch-size", its kind, the field and
// its help); the registry adds the flags to a CLI11 command, applies a TOML file or text, the
// flags that were given, and writes every key back as TOML. `spikemesh train` builds its whole
// configuration on one (train/train_config.h); every command that takes the parallel flags
// registers them through one (parallel/parallel_config.h), so a flag is declared once.
// Invariants: numeric values go through core/flag_ranges.h (the same range and message wherever
// a value comes from); an unknown key or a value of the wrong type is an Input error naming the
// file and the key (or the flag); a Bool key has --key and --no-key.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace sm {

class ConfigKeys {
 public:
  enum class Kind { Int, Real, Str, Bool, StrList, IntList };

  ConfigKeys();
  ~ConfigKeys();
  ConfigKeys(const ConfigKeys&) = delete;
  ConfigKeys& operator=(const ConfigKeys&) = delete;

  // Binds `key` to `target` (int64_t, double, std::string, bool, std::vector<std::string>,
  // std::vector<int64_t> by kind). The help gains the key's range (flag_ranges.h).
  void add(const std::string& key, Kind kind, void* target, const std::string& help);
  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;

  // One flag per key in `keys` (all when null) on `cmd`, except keys bound to a flag registered
  // elsewhere (bind_flag). The values are stored until apply_given_flags().
  void add_options(CLI::App& cmd, const std::vector<std::string>* keys = nullptr);
  // `key`'s flag was registered elsewhere as `opt`, its value left in `*value`.
  void bind_flag(const std::string& key, CLI::Option* opt, const std::string* value);

  // One key's value from `origin` ("--lr" for a flag; a file path or description otherwise).
  void set(const std::string& key, const std::string& value, const std::string& origin);
  // Every key of TOML `text` (a file's contents or a checkpoint's configuration); `origin` names it.
  void apply_toml_text(const std::string& text, const std::string& origin);
  // After parsing (while the CLI::App lives): the flags that were given, in registration order.
  void apply_given_flags();
  // The keys TOML texts set (apply_toml_text) and the flags given (while the CLI::App lives).
  const std::set<std::string>& file_keys() const { return file_keys_; }
  std::set<std::string> given_keys() const;
  // Every key with its current value as TOML, after `header` (a comment line or "").
  std::string to_toml(const std::string& header) const;

 private:
  struct Field;
  Field* find(const std::string& key);
  std::vector<std::unique_ptr<Field>> fields_;
  std::set<std::string> file_keys_;
};

// Sets NAME of "NAME=..." in `vars`: replaces the entry with the same NAME, else appends
// (how --var on the command line overrides one variable of a --config file's var list).
void merge_var_assignment(std::vector<std::string>& vars, const std::string& assignment);

}  // namespace sm
