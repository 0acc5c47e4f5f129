// train_config.cpp — key registry shared by flags and TOML files, validation, serialisation.
#include "spikemesh/train/train_config.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <toml++/toml.h>

#include "spikemesh/core/error.h"
#include "spikemesh/core/text_file.h"
#include "spikemesh/core/toml_guard.h"
#include "spikemesh/kernels/spike_conv_choice.h"
#include "spikemesh/parallel/layout.h"
#include "spikemesh/parallel/layout_plan.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/train/graph_step_cuda.h"

namespace sm {

std::string TrainConfig::model_label() const { return model_spec.empty() ? model : model_spec; }

struct TrainConfigResolver::Field {
  enum class Kind { Int, Real, Str, Bool, StrList, IntList };
  std::string key, help;
  Kind kind;
  void* target;
  std::string cli_value;                // as given on the command line
  std::vector<std::string> cli_values;  // StrList, IntList
  bool cli_flag = false;                // Bool: value given by --key / --no-key
  CLI::Option* opt = nullptr;
  CLI::Option* neg = nullptr;
  const std::string* cli_source = nullptr;  // Str flags registered elsewhere (the GPU numerics flags)
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
}  // namespace

TrainConfigResolver::TrainConfigResolver(TrainConfig& c) : cfg_(c) {
  using K = Field::Kind;
  auto add = [&](const char* key, K kind, void* target, const char* help) {
    auto f = std::make_unique<Field>();
    f->key = key;
    f->kind = kind;
    f->target = target;
    f->help = help;
    fields_.push_back(std::move(f));
  };
  add("model", K::Str, &c.model, "built-in model name (see `spikemesh model --list`)");
  add("model-spec", K::Str, &c.model_spec, "model spec file (TOML), instead of --model");
  add("var", K::StrList, &c.vars, "spec variable override NAME=INT (repeatable, e.g. --var C=32)");
  add("T", K::Int, &c.T, "time steps, >= 1 (default: the spec's for static images, the dataset's for events)");
  add("dropout", K::Real, &c.dropout, "dropout probability of every dropout layer (default: the spec's)");
  add("data", K::Str, &c.data, "dataset file (HDF5; `spikemesh data` makes one)");
  add("encoding", K::Str, &c.encoding, "static-image encoding over T: direct | poisson");
  add("shuffle", K::Bool, &c.shuffle, "reshuffle the training set every epoch (--no-shuffle: file order)");
  add("epochs", K::Int, &c.epochs, "epochs to train");
  add("batch-size", K::Int, &c.batch_size, "samples per step on each data-parallel rank");
  add("max-steps", K::Int, &c.max_steps, "stop after this many optimizer steps in all (0: no limit)");
  add("optimizer", K::Str, &c.optimizer, "sgd | adam | adamw");
  add("lr", K::Real, &c.lr, "learning rate (peak, after warm-up)");
  add("weight-decay", K::Real, &c.weight_decay, "weight decay (L2 for sgd/adam, decoupled for adamw)");
  add("momentum", K::Real, &c.momentum, "SGD momentum");
  add("nesterov", K::Bool, &c.nesterov, "SGD Nesterov momentum");
  add("lr-schedule", K::Str, &c.lr_schedule, "constant | step | cosine");
  add("warmup-steps", K::Int, &c.warmup_steps, "linear warm-up steps");
  add("min-lr", K::Real, &c.min_lr, "cosine: final learning rate");
  add("lr-step-size", K::Int, &c.lr_step_size, "step: decay every N steps");
  add("lr-gamma", K::Real, &c.lr_gamma, "step: decay factor");
  add("clip-grad-norm", K::Real, &c.clip_grad_norm, "clip gradients to this global L2 norm (0: off)");
  add("seed", K::Int, &c.seed, "seed of initialisation, data order, dropout and encoding");
  add("precision", K::Str, &c.precision, "fp32 | fp64 (CPU); bf16 | fp16 need --device cuda");
  add("device", K::Str, &c.device, "cpu | cuda | auto");
  add("cuda-graphs", K::Str, &c.cuda_graphs,
      "auto | on | off: replay the steady-state step as a CUDA graph (auto: one rank on a GPU)");
  add("threads", K::Int, &c.threads, "CPU threads per rank (0: cores / ranks on this node)");
  add("conv-algo", K::Str, &c.conv_algo,
      "CPU f32 convolutions of spike inputs: dense (oneDNN) | sparse (binary-input kernel) | auto (by the measured "
      "firing rate; default, or SPIKEMESH_CONV_ALGO)");
  // GPU numerics (train/gpu_numerics_flags.h): help and flags from add_gpu_numerics_flags.
  for (int i = 0; i < GpuNumericsFlags::kCount; ++i) add(GpuNumericsFlags::key(i), K::Str, &c.gpu_numerics.at(i), "");
  add("output", K::Str, &c.output, "directory holding run directories");
  add("run-name", K::Str, &c.run_name, "run directory name under --output (default: <model>-<date>-<time>)");
  add("ckpt-every", K::Int, &c.ckpt_every, "checkpoint every N steps (0: at the end and on SIGTERM/SIGUSR1 only)");
  add("keep", K::Int, &c.keep, "complete checkpoints to keep");
  add("resume", K::Str, &c.resume, "resume from a checkpoint file, or 'auto': the newest complete one of the run");
  add("allow-nonfinite-checkpoint", K::Bool, &c.allow_nonfinite_checkpoint,
      "resume from a checkpoint even when a tensor holds NaN or Inf (default: an error naming the tensor)");
  add("log-every", K::Int, &c.log_every, "progress line every N steps");
  add("eval-batch-size", K::Int, &c.eval_batch_size, "evaluation batch size (0: --batch-size)");
  add("distributed-mode", K::Str, &c.distributed_mode,
      "none (one rank) | dp (data parallel, see --optimizer-sharding; with tp > 1 in --mesh-shape: dp x tp) | "
      "fsdp (fully sharded) | tp (tensor parallel, dp x tp by --mesh-shape) | fsdp_tp (FSDP over dp of the tp shards) | "
      "pp (pipeline parallel: dp x tp x pp by --mesh-shape; also implied by dp/tp with pp > 1) | auto (the cost "
      "model's pick by --prefer: every layout predicted from a cached calibration, the best chosen and explained)");
  add("prefer", K::Str, &c.prefer,
      "speed | memory | capacity: what --distributed-mode auto optimises (default speed); with an explicit mode it "
      "fills only the layout flags not given (--mesh-shape, --optimizer-sharding, --pp-*, --memopt-level)");
  add("calibration", K::Str, &c.calibration,
      "auto: the calibration file (JSON; default $SPIKEMESH_CALIBRATION or ~/.cache/spikemesh/calibration.json), "
      "measured on first use and whenever the machine or the job's shape changes");
  add("mesh-shape", K::IntList, &c.mesh_shape, "process mesh DP [TP [PP]] (default: dp = number of ranks)");
  add("tp-mesh-dim", K::Int, &c.tp_mesh_dim, "which --mesh-shape dimension is tp (SpikingJelly style; -1: DP TP PP order)");
  add("dp-mesh-dim", K::Int, &c.dp_mesh_dim, "which --mesh-shape dimension is dp (-1: DP TP PP order)");
  add("comm", K::Str, &c.comm, "device-tensor communication: auto | mpi | nccl");
  add("comm-timeout", K::Real, &c.comm_timeout, "abort when a collective waits longer than this (seconds, 0: never)");
  add("optimizer-sharding", K::Str, &c.optimizer_sharding,
      "dp: none | zero (ZeRO-1: optimizer state sharded) | zero2 (also gradients)");
  add("bucket-mb", K::Real, &c.bucket_mb, "dp: gradient all-reduce bucket size in MiB");
  add("grad-accum", K::Int, &c.grad_accum, "micro-steps per optimizer step (gradient accumulation)");
  add("global-batch-size", K::Int, &c.global_batch_size,
      "samples per optimizer step over all ranks (0: batch-size x dp x grad-accum); sets --batch-size");
  add("sync-bn", K::Bool, &c.sync_bn, "batch-norm statistics over the whole data-parallel batch");
  add("tp-keep-first", K::Bool, &c.tp_keep_first, "tp: keep the model's first weight layer whole on every rank");
  add("tp-keep-classifier", K::Bool, &c.tp_keep_classifier, "tp: keep the model's last weight layer whole on every rank");
  add("tp-debug-comm", K::Bool, &c.tp_debug_comm, "tp: print each layer's tensor-parallel all-reduce once (layer, bytes)");
  add("fsdp-reshard-after-forward", K::Bool, &c.fsdp_reshard_after_forward,
      "fsdp: free gathered parameters after each unit's forward (gather again in backward)");
  add("fsdp-param-dtype", K::Str, &c.fsdp_param_dtype, "fsdp: dtype parameters are gathered in: fp32 | fp64 | bf16");
  add("fsdp-reduce-dtype", K::Str, &c.fsdp_reduce_dtype, "fsdp: dtype gradients are reduce-scattered in: fp32 | fp64 | bf16");
  add("pp-schedule", K::Str, &c.pp_schedule,
      "pp: auto (zero_bubble with --pp-delay-wgrad, interleaved with virtual stages, else 1f1b) | gpipe | 1f1b | "
      "interleaved | zero_bubble");
  add("pp-virtual-stages", K::Int, &c.pp_virtual_stages, "pp: logical stages per pipeline rank (interleaved, zero_bubble: >= 2)");
  add("pp-microbatches", K::Int, &c.pp_microbatches,
      "pp: microbatches per step, dividing --batch-size (0: the largest divisor of the batch in [stages, 4 x stages])");
  add("pp-layout", K::Str, &c.pp_layout,
      "pp: units per logical stage, e.g. \"1|2|2|1\" (default: balanced by a dry run's measured unit costs)");
  add("pp-transport", K::Str, &c.pp_transport,
      "pp: how stage boundaries travel: auto (NCCL channels when every pp rank owns a GPU, else staged) | staged "
      "(host buffers, MPI) | channels (one-way channel per rank pair and direction; schedule order checked)");
  add("pp-delay-wgrad", K::Bool, &c.pp_delay_wgrad, "pp: split backward into input and weight gradients, weights delayed");
  add("pp-schedule-file", K::Str, &c.pp_schedule_file,
      "pp: run this schedule (one line of actions per pipeline rank, e.g. \"0F0 0SF0 0F1 ...\"; validated first)");
  add("pp-timeline-steps", K::Int, &c.pp_timeline_steps,
      "pp: record every action's start/end of the first N steps in <run>/pipeline.h5 (0: none)");
  add("memopt-level", K::Int, &c.memopt_level,
      "activation memory: 0 none | 1 checkpoint every segment of every unit (keep its input, recompute in backward) | "
      "4 level 1, then un-checkpoint segments greedily, slowest first, while the measured peak does not rise "
      "(2, 3: spatial/temporal splits, not built yet)");
  add("memopt-compress-x", K::Bool, &c.memopt_compress_x,
      "memopt: keep a checkpointed input that is a spike tensor as bits (1/32 of f32); other inputs are kept as they "
      "are (--no-memopt-compress-x: keep every input as it is)");
  add("memory-budget-mb", K::Real, &c.memory_budget_mb,
      "memopt: peak MiB per rank to reach; the search stops at the first configuration under it (0: none; with "
      "--memopt-level 0 it starts the search)");
  add("pp-memopt-stage-budget-ratio", K::Real, &c.pp_memopt_stage_budget_ratio,
      "pp: memopt applies to round(ratio x stages) logical stages, those keeping the most activation memory, in (0, 1]");
  add("check-replicas", K::Int, &c.check_replicas,
      "dp: verify every N steps that all replicas are bitwise identical (0: at the start only)");
}

TrainConfigResolver::~TrainConfigResolver() = default;

void TrainConfigResolver::add_options(CLI::App& cmd) {
  cmd.add_option("--config", config_file_, "TOML file of settings (keys = flag names); flags override it");
  std::vector<std::string> all;
  for (auto& f : fields_) all.push_back(f->key);
  add_options(cmd, all);
}

void TrainConfigResolver::add_options(CLI::App& cmd, const std::vector<std::string>& keys) {
  auto wanted = [&](const std::string& key) { return std::find(keys.begin(), keys.end(), key) != keys.end(); };
  for (auto& f : fields_) {
    if (f->cli_source || !wanted(f->key)) continue;
    if (f->key == GpuNumericsFlags::key(0)) {  // the three GPU numerics flags: registered together, help there
      const auto opts = add_gpu_numerics_flags(cmd, gpu_numerics_cli_);
      for (auto& g : fields_)
        for (int i = 0; i < GpuNumericsFlags::kCount; ++i)
          if (g->key == GpuNumericsFlags::key(i)) {
            g->opt = opts[i];
            g->cli_source = &gpu_numerics_cli_.at(i);
          }
      continue;
    }
    std::string flag = "--" + f->key;
    const std::string range = flag_range_text(f->key);
    if (!range.empty() && f->kind != Field::Kind::StrList) f->help += "; range " + range;
    switch (f->kind) {
      case Field::Kind::Bool:
        f->opt = cmd.add_flag(flag + ",!--no-" + f->key, f->cli_flag, f->help);
        break;
      case Field::Kind::StrList:
      case Field::Kind::IntList:
        f->opt = cmd.add_option(flag, f->cli_values, f->help);
        break;
      default:
        f->opt = cmd.add_option(flag, f->cli_value, f->help);
    }
  }
}

void TrainConfigResolver::set(const std::string& key, const std::string& v, const std::string& origin) {
  for (auto& f : fields_) {
    if (f->key != key) continue;
    // A flag ("--lr") already names the key; a file origin gets "file: key".
    std::string what = origin.rfind("--", 0) == 0 ? origin : origin + ": " + key + " (--" + key + ")";
    switch (f->kind) {
      case Field::Kind::Int: {
        // T: a file may say 0 (the default, as config.toml records it); a flag must give >= 1.
        if (key == "T" && what != origin && v == "0") {
          *static_cast<int64_t*>(f->target) = 0;
          return;
        }
        *static_cast<int64_t*>(f->target) = parse_flag_int(key, v, what);  // the key's range (flag_ranges.h)
        return;
      }
      case Field::Kind::Real: *static_cast<double*>(f->target) = parse_flag_real(key, v, what); return;
      case Field::Kind::Str: *static_cast<std::string*>(f->target) = v; return;
      case Field::Kind::Bool: *static_cast<bool*>(f->target) = parse_bool(v, what); return;
      case Field::Kind::StrList: static_cast<std::vector<std::string>*>(f->target)->push_back(v); return;
      case Field::Kind::IntList:
        static_cast<std::vector<int64_t>*>(f->target)->push_back(parse_flag_int(key, v, what));
        return;
    }
  }
  SM_INPUT_ERROR(origin << ": unknown key '" << key << "' (keys are the flags of `spikemesh train --help`)");
}

void TrainConfigResolver::apply_toml_file(const std::string& path) {
  apply_toml_text(read_text_file(path, "--config"), path);  // bounded, text only (core/text_file.h)
}

void TrainConfigResolver::apply_toml_text(const std::string& text, const std::string& path) {
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
    std::string key(k.str());
    file_keys_.insert(key);
    auto scalar = [&](const toml::node& n) -> std::string {
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
    };
    if (auto* arr = node.as_array()) {
      bool list_key = false;
      for (auto& f : fields_)
        if (f->key == key && (f->kind == Field::Kind::StrList || f->kind == Field::Kind::IntList)) {
          list_key = true;
          if (f->kind == Field::Kind::IntList) static_cast<std::vector<int64_t>*>(f->target)->clear();
        }
      if (!list_key) SM_INPUT_ERROR(path << ": key '" << key << "' does not take a list");
      for (auto& el : *arr) set(key, scalar(el), path);
    } else {
      set(key, scalar(node), path);
    }
  }
}

void TrainConfigResolver::resolve() {
  if (!config_file_.empty()) apply_toml_file(config_file_);
  apply_given_flags();
  validate_train_config(cfg_);
}

std::set<std::string> TrainConfigResolver::given_keys() const {
  std::set<std::string> keys = file_keys_;
  for (const auto& f : fields_)
    if (f->opt && f->opt->count() > 0) keys.insert(f->key);
  return keys;
}

void TrainConfigResolver::apply_given_flags() {
  for (auto& f : fields_) {
    if (!f->opt || f->opt->count() == 0) continue;
    std::string origin = "--" + f->key;
    if (f->kind == Field::Kind::Bool) {
      *static_cast<bool*>(f->target) = f->cli_flag;
    } else if (f->kind == Field::Kind::StrList) {
      // --var NAME=INT overrides that NAME alone: the config's other variables stay.
      auto* v = static_cast<std::vector<std::string>*>(f->target);
      for (auto& s : f->cli_values) merge_var_assignment(*v, s);
    } else if (f->kind == Field::Kind::IntList) {
      static_cast<std::vector<int64_t>*>(f->target)->clear();
      for (auto& s : f->cli_values) set(f->key, s, origin);
    } else {
      set(f->key, f->cli_source ? *f->cli_source : f->cli_value, origin);
    }
  }
}

std::string toml_subset(const std::string& text, const std::set<std::string>& keys, const std::string& origin) {
  if (const std::string why = toml_parser_bug_reason(text); !why.empty()) SM_INPUT_ERROR(origin << ": " << why);
  toml::table all, kept;
  try {
    all = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    SM_INPUT_ERROR(origin << ": " << e.description());
  }
  for (auto&& [k, node] : all)
    if (keys.count(std::string(k.str()))) kept.insert(k, node);
  std::ostringstream os;
  os << kept;
  return os.str();
}

std::string TrainConfigResolver::to_toml() const {
  toml::table t;
  for (auto& f : fields_) {
    switch (f->kind) {
      case Field::Kind::Int: t.insert(f->key, *static_cast<int64_t*>(f->target)); break;
      case Field::Kind::Real: t.insert(f->key, *static_cast<double*>(f->target)); break;
      case Field::Kind::Str: t.insert(f->key, *static_cast<std::string*>(f->target)); break;
      case Field::Kind::Bool: t.insert(f->key, *static_cast<bool*>(f->target)); break;
      case Field::Kind::StrList: {
        toml::array a;
        for (auto& s : *static_cast<std::vector<std::string>*>(f->target)) a.push_back(s);
        t.insert(f->key, a);
        break;
      }
      case Field::Kind::IntList: {
        toml::array a;
        for (int64_t v : *static_cast<std::vector<int64_t>*>(f->target)) a.push_back(v);
        t.insert(f->key, a);
        break;
      }
    }
  }
  std::ostringstream os;
  os << "# spikemesh resolved training configuration (defaults < --config < flags)\n" << t << "\n";
  return os.str();
}

void validate_train_config(const TrainConfig& c) {
  if (c.model.empty() && c.model_spec.empty()) SM_INPUT_ERROR("--model or --model-spec is required");
  if (c.data.empty()) SM_INPUT_ERROR("--data FILE is required (make one with `spikemesh data`)");
  if (c.batch_size <= 0) SM_INPUT_ERROR("--batch-size must be positive, got " << c.batch_size);
  if (c.epochs < 0) SM_INPUT_ERROR("--epochs must be >= 0, got " << c.epochs);
  if (c.max_steps < 0) SM_INPUT_ERROR("--max-steps must be >= 0, got " << c.max_steps);
  if (c.T < 0) SM_INPUT_ERROR("--T must be >= 1 (time steps), got " << c.T);  // 0: the spec's / dataset's
  if (c.T > INT32_MAX) SM_INPUT_ERROR("--T " << c.T << " is too large");
  if (c.dropout >= 1.0) SM_INPUT_ERROR("--dropout must be in [0, 1), got " << c.dropout);
  if (!(c.lr >= 0)) SM_INPUT_ERROR("--lr must be >= 0, got " << c.lr);
  if (c.keep < 1) SM_INPUT_ERROR("--keep must be >= 1, got " << c.keep);
  if (c.ckpt_every < 0) SM_INPUT_ERROR("--ckpt-every must be >= 0, got " << c.ckpt_every);
  if (c.log_every <= 0) SM_INPUT_ERROR("--log-every must be positive, got " << c.log_every);
  if (c.threads < 0) SM_INPUT_ERROR("--threads must be >= 0, got " << c.threads);
  if (!c.conv_algo.empty()) (void)spike_conv_algo_from_name(c.conv_algo, "--conv-algo");
  if (!c.gpu_numerics.conv_algos.empty()) (void)conv_policy_from_name(c.gpu_numerics.conv_algos, "--conv-algos");
  for (int i = 1; i < GpuNumericsFlags::kCount; ++i)
    if (!c.gpu_numerics.at(i).empty())
      (void)fp32_precision_from_name(c.gpu_numerics.at(i), std::string("--") + GpuNumericsFlags::key(i));
  if (c.eval_batch_size < 0) SM_INPUT_ERROR("--eval-batch-size must be >= 0");
  if (c.optimizer != "sgd" && c.optimizer != "adam" && c.optimizer != "adamw")
    SM_INPUT_ERROR("--optimizer must be sgd, adam or adamw, got '" << c.optimizer << "'");
  if (c.lr_schedule != "constant" && c.lr_schedule != "step" && c.lr_schedule != "cosine")
    SM_INPUT_ERROR("--lr-schedule must be constant, step or cosine, got '" << c.lr_schedule << "'");
  if (c.lr_schedule == "step" && c.lr_step_size <= 0)
    SM_INPUT_ERROR("--lr-schedule step needs --lr-step-size > 0, got " << c.lr_step_size);
  if (c.encoding != "direct" && c.encoding != "poisson")
    SM_INPUT_ERROR("--encoding must be direct or poisson, got '" << c.encoding << "'");
  if (c.precision != "fp32" && c.precision != "fp64" && c.precision != "bf16" && c.precision != "fp16")
    SM_INPUT_ERROR("--precision must be fp32, fp64, bf16 or fp16, got '" << c.precision << "'");
  if (c.device != "cpu" && c.device != "cuda" && c.device != "auto")
    SM_INPUT_ERROR("--device must be cpu, cuda or auto, got '" << c.device << "'");
  validate_cuda_graphs_flag(c.cuda_graphs, c.device);
  if (c.run_name.find('/') != std::string::npos) SM_INPUT_ERROR("--run-name must not contain '/'");
  // Parallelism.
  if (c.pp_timeline_steps < 0) SM_INPUT_ERROR("--pp-timeline-steps must be >= 0, got " << c.pp_timeline_steps);
  validate_parallel_flags(layout_options(c));
  if (!c.prefer.empty()) (void)preference_from_name(c.prefer);
  if (!c.prefer.empty() && c.distributed_mode == "none")
    SM_INPUT_ERROR("--prefer " << c.prefer << " with --distributed-mode none: one rank has nothing to choose; use "
                   "--distributed-mode auto under mpirun, or drop --prefer");
  if (c.distributed_mode == "auto" && c.grad_accum > 1)
    SM_INPUT_ERROR("--distributed-mode auto with --grad-accum " << c.grad_accum
                   << ": the planner chooses per step; give --global-batch-size instead");
  if (c.mesh_shape.size() > 3) SM_INPUT_ERROR("--mesh-shape takes at most 3 dimensions (DP TP PP)");
  for (int64_t d : c.mesh_shape)
    if (d < 1) SM_INPUT_ERROR("--mesh-shape dimensions must be >= 1, got " << d);
  if (c.grad_accum < 1) SM_INPUT_ERROR("--grad-accum must be >= 1, got " << c.grad_accum);
  if (c.global_batch_size < 0) SM_INPUT_ERROR("--global-batch-size must be >= 0, got " << c.global_batch_size);
  if (!(c.comm_timeout >= 0)) SM_INPUT_ERROR("--comm-timeout must be >= 0 seconds, got " << c.comm_timeout);
  if (c.comm != "auto" && c.comm != "mpi" && c.comm != "nccl")
    SM_INPUT_ERROR("--comm must be auto, mpi or nccl, got '" << c.comm << "'");
  if (c.check_replicas < 0) SM_INPUT_ERROR("--check-replicas must be >= 0, got " << c.check_replicas);
  for (const std::string* d : {&c.fsdp_param_dtype, &c.fsdp_reduce_dtype})
    if (!d->empty() && *d != "fp32" && *d != "fp64" && *d != "bf16")
      SM_INPUT_ERROR("--" << (d == &c.fsdp_param_dtype ? "fsdp-param-dtype" : "fsdp-reduce-dtype")
                          << " must be fp32, fp64 or bf16, got '" << *d << "'");
}

LayoutOptions layout_options(const TrainConfig& c, DType master) {
  auto dtype_of = [&](const std::string& name) {  // "": the model's dtype
    if (name.empty()) return master;
    return name == "fp64" ? DType::F64 : name == "bf16" ? DType::BF16 : DType::F32;
  };
  LayoutOptions o;
  o.mode = c.distributed_mode;
  o.sync_bn = c.sync_bn;
  o.tp_keep_first = c.tp_keep_first;
  o.tp_keep_classifier = c.tp_keep_classifier;
  o.tp_debug_comm = c.tp_debug_comm;
  o.pp_schedule = c.pp_schedule;
  o.pp_virtual_stages = static_cast<int>(c.pp_virtual_stages);
  o.pp_microbatches = static_cast<int>(c.pp_microbatches);
  o.pp_layout = c.pp_layout;
  o.pp_transport = c.pp_transport;
  o.pp_delay_wgrad = c.pp_delay_wgrad;
  o.pp_schedule_file = c.pp_schedule_file;
  o.memopt.level = static_cast<int>(c.memopt_level);
  o.memopt.compress_x = c.memopt_compress_x;
  o.memopt.memory_budget_mb = c.memory_budget_mb;
  o.memopt.pp_stage_budget_ratio = c.pp_memopt_stage_budget_ratio;
  o.strategy.sharding = c.optimizer_sharding;
  o.strategy.bucket_mb = c.bucket_mb;
  o.strategy.reshard_after_forward = c.fsdp_reshard_after_forward;
  o.strategy.param_dtype = dtype_of(c.fsdp_param_dtype);
  o.strategy.reduce_dtype = dtype_of(c.fsdp_reduce_dtype);
  return o;
}

}  // namespace sm
