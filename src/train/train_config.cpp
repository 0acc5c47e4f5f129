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
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/data/augment_spec.h"
#include "spikemesh/data/event_frames_reader.h"
#include "spikemesh/train/checkpoint_writer.h"
#include "spikemesh/train/graph_step_cuda.h"

namespace sm {

std::string TrainConfig::model_label() const { return model_spec.empty() ? model : model_spec; }

namespace {
using K = ConfigKeys::Kind;
}  // namespace

// A table: one row per training key; the parallel keys are parallel_config.cpp's table.
TrainConfigResolver::TrainConfigResolver(TrainConfig& c) : cfg_(c) {
  auto add = [&](const char* key, K kind, void* target, const char* help) { keys_.add(key, kind, target, help); };
  add("model", K::Str, &c.model, "built-in model name (see `spikemesh model --list`)");
  add("model-spec", K::Str, &c.model_spec, "model spec file (TOML), instead of --model");
  add("var", K::StrList, &c.vars, "spec variable override NAME=INT (repeatable, e.g. --var C=32)");
  add("T", K::Int, &c.T, "time steps, >= 1 (default: the spec's for static images, the dataset's for events)");
  add("dropout", K::Real, &c.dropout, "dropout probability of every dropout layer (default: the spec's)");
  add("data", K::Str, &c.data, "dataset file (HDF5; `spikemesh data` makes one)");
  add("encoding", K::Str, &c.encoding, "static-image encoding over T: direct | poisson");
  add("augment", K::Str, &c.augment,
      "training-data augmentation: comma-separated NAME[:P[:M]] steps, e.g. hflip:0.5,roll:0.5:5,cutmix:0.5:1 "
      "(P: probability, default 0.5; M: magnitude); every draw keyed by (seed, epoch, sample), so the same under "
      "every layout; the steps are listed at the end of `spikemesh train --help`");
  add("frames", K::Str, &c.frames,
      "event datasets imported with --events: make the frames on the fly from the stored events instead of "
      "reading /x, with the importer's integration (and its --size resize): T,number | T,time | T,duration:US "
      "(e.g. --frames 16,number or --frames 8,duration:50000; T sets the model's T); off: the stored frames");
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
  add("ckpt-async", K::Str, &c.ckpt_async,
      "auto | on | off: write checkpoints in the background while training continues (each rank copies its "
      "shards at the step, then trains on); auto: on when the MPI library provides MPI_THREAD_MULTIPLE");
  add("resume", K::Str, &c.resume, "resume from a checkpoint file, or 'auto': the newest complete one of the run");
  add("init", K::Str, &c.init,
      "start a new run from this checkpoint's parameters and buffers (e.g. `spikemesh ckpt import`'s output): "
      "fresh optimizer, step 0, any layout; ignored when --resume loads a checkpoint (PATH, or auto once the run has one)");
  add("allow-nonfinite-checkpoint", K::Bool, &c.allow_nonfinite_checkpoint,
      "resume from a checkpoint even when a tensor holds NaN or Inf (default: an error naming the tensor)");
  add("log-every", K::Int, &c.log_every, "progress line every N steps");
  add("eval-batch-size", K::Int, &c.eval_batch_size, "evaluation batch size (0: --batch-size)");
  add_parallel_keys(keys_, c.parallel);
}

TrainConfigResolver::~TrainConfigResolver() = default;

void TrainConfigResolver::add_options(CLI::App& cmd) {
  cmd.add_option("--config", config_file_, "TOML file of settings (keys = flag names); flags override it");
  const std::vector<std::string> all = keys_.keys();
  add_options(cmd, all);
}

void TrainConfigResolver::add_options(CLI::App& cmd, const std::vector<std::string>& keys) {
  // The three GPU numerics flags are registered together, with their help (gpu_numerics_flags.h).
  if (std::find(keys.begin(), keys.end(), GpuNumericsFlags::key(0)) != keys.end()) {
    const auto opts = add_gpu_numerics_flags(cmd, gpu_numerics_cli_);
    for (int i = 0; i < GpuNumericsFlags::kCount; ++i)
      keys_.bind_flag(GpuNumericsFlags::key(i), opts[i], &gpu_numerics_cli_.at(i));
  }
  keys_.add_options(cmd, &keys);
}

void TrainConfigResolver::set(const std::string& key, const std::string& v, const std::string& origin) {
  keys_.set(key, v, origin);
}

void TrainConfigResolver::apply_toml_file(const std::string& path) {
  apply_toml_text(read_text_file(path, "--config"), path);  // bounded, text only (core/text_file.h)
}

void TrainConfigResolver::apply_toml_text(const std::string& text, const std::string& path) {
  keys_.apply_toml_text(text, path);
}

void TrainConfigResolver::resolve() {
  if (!config_file_.empty()) apply_toml_file(config_file_);
  apply_given_flags();
  validate_train_config(cfg_);
}

std::set<std::string> TrainConfigResolver::given_keys() const { return keys_.given_keys(); }

void TrainConfigResolver::apply_given_flags() { keys_.apply_given_flags(); }

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
  return keys_.to_toml("# spikemesh resolved training configuration (defaults < --config < flags)\n");
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
  (void)ckpt_async_mode_from_name(c.ckpt_async);
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
  parse_augment_spec(c.augment);  // an Input error naming --augment
  (void)parse_frames_option(c.frames);
  if (c.encoding != "direct" && c.encoding != "poisson")
    SM_INPUT_ERROR("--encoding must be direct or poisson, got '" << c.encoding << "'");
  if (c.precision != "fp32" && c.precision != "fp64" && c.precision != "bf16" && c.precision != "fp16")
    SM_INPUT_ERROR("--precision must be fp32, fp64, bf16 or fp16, got '" << c.precision << "'");
  if (c.device != "cpu" && c.device != "cuda" && c.device != "auto")
    SM_INPUT_ERROR("--device must be cpu, cuda or auto, got '" << c.device << "'");
  validate_cuda_graphs_flag(c.cuda_graphs, c.device);
  if (c.run_name.find('/') != std::string::npos) SM_INPUT_ERROR("--run-name must not contain '/'");
  validate_parallel_config(c.parallel);
}

}  // namespace sm
