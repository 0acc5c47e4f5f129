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

#include "spikemesh/core/dtype.h"
#include "spikemesh/parallel/layout.h"
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
  std::string resume;             // "", PATH or "auto"
  bool allow_nonfinite_checkpoint = false;  // load a checkpoint holding NaN/Inf values (else an error)
  int64_t log_every = 50;
  int64_t eval_batch_size = 0;    // 0: batch-size
  // parallelism (the data-parallel family; docs: README "Multi-rank training")
  std::string distributed_mode = "none";  // none | dp | fsdp | tp | fsdp_tp | pp | auto (planner/auto_layout.h)
  std::string prefer;                     // auto: speed (default) | memory | capacity; "" with an explicit mode
  std::string calibration;                // auto: the calibration file ("": the default path)
  std::vector<int64_t> mesh_shape;        // DP TP PP (empty: dp = world size)
  int64_t tp_mesh_dim = -1;
  int64_t dp_mesh_dim = -1;
  std::string comm = "auto";              // auto | mpi | nccl
  double comm_timeout = 600.0;            // seconds; 0 = no watchdog
  std::string optimizer_sharding = "none";  // none | zero | zero2 (dp)
  double bucket_mb = 25.0;                // dp gradient bucket size
  int64_t grad_accum = 1;                 // micro-steps per optimizer step
  int64_t global_batch_size = 0;          // 0: batch-size x dp x grad-accum; else sets batch-size
  bool sync_bn = false;                   // batch-norm statistics over the dp group
  bool tp_keep_first = false;             // tp: the first weight layer stays whole
  bool tp_keep_classifier = false;        // tp: the last weight layer stays whole
  bool tp_debug_comm = false;             // tp: print each layer's tp collective once
  bool fsdp_reshard_after_forward = true;
  std::string fsdp_param_dtype;           // "": the --precision dtype
  std::string fsdp_reduce_dtype;          // "": the --precision dtype
  std::string pp_schedule = "auto";       // pp: auto | gpipe | 1f1b | interleaved | zero_bubble
  int64_t pp_virtual_stages = 1;
  int64_t pp_microbatches = 0;            // 0: default_microbatches(batch, stages)
  std::string pp_layout;                  // "": balanced by measured unit costs
  std::string pp_transport = "auto";      // pp: auto | staged | channels (parallel/pipeline/pp_transfer.h)
  bool pp_delay_wgrad = false;
  std::string pp_schedule_file;
  int64_t pp_timeline_steps = 10;         // steps recorded in <run>/pipeline.h5
  int64_t check_replicas = 0;             // verify dp replicas every N steps (0: at start only)
  int64_t memopt_level = 0;               // models/memopt_plan.h
  bool memopt_compress_x = true;
  double memory_budget_mb = 0.0;          // 0: none
  double pp_memopt_stage_budget_ratio = 0.5;

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
  const std::set<std::string>& file_keys() const { return file_keys_; }
  // The keys the file set or a flag gave (after parsing, while the CLI::App that parsed them
  // lives: flags are asked through its options): what --prefer must not change.
  std::set<std::string> given_keys() const;

 private:
  struct Field;
  TrainConfig& cfg_;
  std::vector<std::unique_ptr<Field>> fields_;
  std::string config_file_;
  std::set<std::string> file_keys_;
  GpuNumericsFlags gpu_numerics_cli_;  // the GPU numerics flags' values (add_gpu_numerics_flags)
};

// Sets NAME of "NAME=..." in `vars`: replaces the entry with the same NAME, else appends
// (how --var on the command line overrides one variable of a --config file's var list).
void merge_var_assignment(std::vector<std::string>& vars, const std::string& assignment);

// The entries of TOML `text` whose key is in `keys`, as TOML text (e.g. the part of a checkpoint's
// resolved configuration that shapes its tensors). Input error naming `origin` when not TOML.
std::string toml_subset(const std::string& text, const std::set<std::string>& keys, const std::string& origin);

// Validates value ranges and combinations (batch-size > 0, epochs >= 0, ...).
void validate_train_config(const TrainConfig& c);

// The layout flags of `c` (parallel/layout.h); FSDP dtypes left empty take `master`.
LayoutOptions layout_options(const TrainConfig& c, DType master = DType::F32);

}  // namespace sm
