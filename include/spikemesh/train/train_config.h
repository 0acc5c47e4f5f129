// train_config.h — the resolved configuration of a training run and how it is resolved:
// built-in defaults < --config FILE.toml < command-line flags (docs/architecture.md §3). Every key
// of the TOML file is a flag name without the leading dashes (e.g. `batch-size = 64`); an unknown
// key or a value of the wrong type is an error naming the file and the key. The resolved
// configuration is written into every run directory (config.toml) and every checkpoint.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "spikemesh/core/config_keys.h"
#include "spikemesh/core/dtype.h"
#include "spikemesh/parallel/parallel_config.h"
#include "spikemesh/train/gpu_numerics_flags.h"

namespace CLI {
class App;
}

namespace sm {

struct TrainConfig {
  // model
  std::string model = "fmnist_csnn";
  std::string model_spec;
  std::vector<std::string> vars;  // "NAME=INT"
  int64_t T = 0;                  // 0: the spec's (static input) or the dataset's (events)
  double dropout = -1.0;          // < 0: the spec's
  // data
  std::string data;
  std::string encoding = "direct";
  std::string augment;  // --augment steps (data/augment_spec.h); "" or "none": off
  std::string frames;             // "" | off | T,number | T,time | T,duration:US (event_frames_reader.h)
  bool shuffle = true;
  // optimisation
  int64_t epochs = 1;
  int64_t batch_size = 16;        // per rank
  int64_t max_steps = 0;          // 0: no limit
  std::string optimizer = "adam";
  double lr = 1e-3;
  double weight_decay = 0.0;
  double momentum = 0.9;
  bool nesterov = false;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  double min_lr = 0.0;
  int64_t lr_step_size = 0;
  double lr_gamma = 0.1;
  double clip_grad_norm = 0.0;    // 0: off
  // run
  int64_t seed = 1;
  std::string precision = "fp32";
  std::string device = "auto";  // the GPU when one is visible, else the CPU with a notice
  std::string cuda_graphs = "auto";  // auto | on | off (train/graph_step_cuda.h)
  int64_t threads = 0;            // 0: cores / ranks on this node
  std::string conv_algo;          // dense | sparse | auto (empty: SPIKEMESH_CONV_ALGO, else auto)
  // --conv-algos, --conv-fp32-precision, --matmul-fp32-precision (train/gpu_numerics_flags.h):
  // "" = not given; the front end stores the run's resolved names before config.toml is written.
  GpuNumericsFlags gpu_numerics;
  std::string output = "output";
  std::string run_name;           // default: <model>-<date>-<time>
  int64_t ckpt_every = 0;         // 0: only at the end (and on SIGTERM/SIGUSR1)
  int64_t keep = 3;
  std::string ckpt_async = "auto";  // auto | on | off (train/checkpoint_writer.h)
  std::string resume;             // "", PATH or "auto"
  std::string init;               // "" or a checkpoint whose parameters and buffers start a new run
  bool allow_nonfinite_checkpoint = false;  // load a checkpoint holding NaN/Inf values (else an error)
  int64_t log_every = 50;
  int64_t eval_batch_size = 0;    // 0: batch-size
  // parallelism: every parallel flag, declared once (parallel/parallel_config.h)
  ParallelConfig parallel;

  std::string model_label() const;  // model name or spec path
};

// Binds every TrainConfig field to a key; registers flags, reads TOML, writes TOML.
class TrainConfigResolver {
 public:
  explicit TrainConfigResolver(TrainConfig& cfg);
  ~TrainConfigResolver();
  // Adds --config and one flag per key to `cmd`.
  void add_options(CLI::App& cmd);
  // Adds the flags of `keys` alone (no --config), e.g. the train flags `spikemesh eval` takes.
  void add_options(CLI::App& cmd, const std::vector<std::string>& keys);
  // After parsing: apply the --config file (if any), then the flags that were given,
  // then validate. Throws sm::Error(Input) naming the file/key or flag.
  void resolve();
  // After parsing: apply the flags that were given (no file, no validation).
  void apply_given_flags();
  // Apply a TOML file / one key=value (used by resolve and tests).
  void apply_toml_file(const std::string& path);
  // The same for TOML `text` (e.g. a checkpoint's resolved configuration); `origin` names it.
  void apply_toml_text(const std::string& text, const std::string& origin);
  void set(const std::string& key, const std::string& value, const std::string& origin);
  // The configuration as TOML (every key, resolved values).
  std::string to_toml() const;
  const std::string& config_file() const { return config_file_; }
  // The keys a TOML file set (apply_toml_file), e.g. for `plan --config` to fill only those.
  const std::set<std::string>& file_keys() const { return keys_.file_keys(); }
  // The keys the file set or a flag gave (after parsing, while the CLI::App that parsed them
  // lives: flags are asked through its options): what --prefer must not change.
  std::set<std::string> given_keys() const;

 private:
  TrainConfig& cfg_;
  ConfigKeys keys_;
  std::string config_file_;
  GpuNumericsFlags gpu_numerics_cli_;  // the GPU numerics flags' values (add_gpu_numerics_flags)
};

// The entries of TOML `text` whose key is in `keys`, as TOML text (e.g. the part of a checkpoint's
// resolved configuration that shapes its tensors). Input error naming `origin` when not TOML.
std::string toml_subset(const std::string& text, const std::set<std::string>& keys, const std::string& origin);

// Validates value ranges and combinations (batch-size > 0, epochs >= 0, ...).
void validate_train_config(const TrainConfig& c);

}  // namespace sm
