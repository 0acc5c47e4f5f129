// parallel_config.cpp — the parallel flags' one table, validation and mappings (parallel_config.h).
#include "spikemesh/parallel/parallel_config.h"

#include "spikemesh/core/config_keys.h"
#include "spikemesh/core/error.h"

namespace sm {

namespace {
using K = ConfigKeys::Kind;
void add(ConfigKeys& keys, const char* key, K kind, void* target, const char* help) { keys.add(key, kind, target, help); }
}  // namespace

// A table: one row per flag (the help is what --help prints on every command).
void add_parallel_keys(ConfigKeys& keys, ParallelConfig& c) {
  add(keys, "distributed-mode", K::Str, &c.distributed_mode,
      "none (one rank) | dp (data parallel, see --optimizer-sharding; with tp > 1 in --mesh-shape: dp x tp) | "
      "fsdp (fully sharded) | tp (tensor parallel, dp x tp by --mesh-shape) | fsdp_tp (FSDP over dp of the tp shards) | "
      "pp (pipeline parallel: dp x tp x pp by --mesh-shape; also implied by dp/tp with pp > 1) | auto (the cost "
      "model's pick by --prefer: every layout predicted from a cached calibration, the best chosen and explained)");
  add(keys, "prefer", K::Str, &c.prefer,
      "speed | memory | capacity: what --distributed-mode auto optimises (default speed); with an explicit mode it "
      "fills only the layout flags not given (--mesh-shape, --optimizer-sharding, --pp-*, --memopt-level)");
  add(keys, "calibration", K::Str, &c.calibration,
      "auto: the calibration file (JSON; default $SPIKEMESH_CALIBRATION or ~/.cache/spikemesh/calibration.json), "
      "measured on first use and whenever the machine or the job's shape changes");
  add(keys, "mesh-shape", K::IntList, &c.mesh_shape, "process mesh DP [TP [PP]] (default: dp = number of ranks)");
  add(keys, "tp-mesh-dim", K::Int, &c.tp_mesh_dim, "which --mesh-shape dimension is tp (SpikingJelly style; -1: DP TP PP order)");
  add(keys, "dp-mesh-dim", K::Int, &c.dp_mesh_dim, "which --mesh-shape dimension is dp (-1: DP TP PP order)");
  add(keys, "comm", K::Str, &c.comm, "device-tensor communication: auto | mpi | nccl");
  add(keys, "comm-timeout", K::Real, &c.comm_timeout, "abort when a collective waits longer than this (seconds, 0: never)");
  add(keys, "optimizer-sharding", K::Str, &c.optimizer_sharding,
      "dp: none | zero (ZeRO-1: optimizer state sharded) | zero2 (also gradients)");
  add(keys, "bucket-mb", K::Real, &c.bucket_mb, "dp: gradient all-reduce bucket size in MiB");
  add(keys, "grad-accum", K::Int, &c.grad_accum, "micro-steps per optimizer step (gradient accumulation)");
  add(keys, "global-batch-size", K::Int, &c.global_batch_size,
      "samples per optimizer step over all ranks (0: batch-size x dp x grad-accum); sets --batch-size");
  add(keys, "sync-bn", K::Bool, &c.sync_bn, "batch-norm statistics over the whole data-parallel batch");
  add(keys, "tp-keep-first", K::Bool, &c.tp_keep_first, "tp: keep the model's first weight layer whole on every rank");
  add(keys, "tp-keep-classifier", K::Bool, &c.tp_keep_classifier, "tp: keep the model's last weight layer whole on every rank");
  add(keys, "tp-debug-comm", K::Bool, &c.tp_debug_comm, "tp: print each layer's tensor-parallel all-reduce once (layer, bytes)");
  add(keys, "fsdp-reshard-after-forward", K::Bool, &c.fsdp_reshard_after_forward,
      "fsdp: free gathered parameters after each unit's forward (gather again in backward)");
  add(keys, "fsdp-param-dtype", K::Str, &c.fsdp_param_dtype, "fsdp: dtype parameters are gathered in: fp32 | fp64 | bf16");
  add(keys, "fsdp-reduce-dtype", K::Str, &c.fsdp_reduce_dtype, "fsdp: dtype gradients are reduce-scattered in: fp32 | fp64 | bf16");
  add(keys, "pp-schedule", K::Str, &c.pp_schedule,
      "pp: auto (zero_bubble with --pp-delay-wgrad, interleaved with virtual stages, else 1f1b) | gpipe | 1f1b | "
      "interleaved | zero_bubble");
  add(keys, "pp-virtual-stages", K::Int, &c.pp_virtual_stages, "pp: logical stages per pipeline rank (interleaved, zero_bubble: >= 2)");
  add(keys, "pp-microbatches", K::Int, &c.pp_microbatches,
      "pp: microbatches per step, dividing --batch-size (0: the largest divisor of the batch in [stages, 4 x stages])");
  add(keys, "pp-layout", K::Str, &c.pp_layout,
      "pp: units per logical stage, e.g. \"1|2|2|1\" (default: balanced by a dry run's measured unit costs)");
  add(keys, "pp-transport", K::Str, &c.pp_transport,
      "pp: how stage boundaries travel: auto (NCCL channels when every pp rank owns a GPU, else staged) | staged "
      "(host buffers, MPI) | channels (one-way channel per rank pair and direction; schedule order checked)");
  add(keys, "pp-delay-wgrad", K::Bool, &c.pp_delay_wgrad, "pp: split backward into input and weight gradients, weights delayed");
  add(keys, "pp-schedule-file", K::Str, &c.pp_schedule_file,
      "pp: run this schedule (one line of actions per pipeline rank, e.g. \"0F0 0SF0 0F1 ...\"; validated first)");
  add(keys, "pp-timeline-steps", K::Int, &c.pp_timeline_steps,
      "pp: record every action's start/end of the first N steps in <run>/pipeline.h5 (0: none)");
  add(keys, "memopt-level", K::Int, &c.memopt_level,
      "activation memory: 0 none | 1 checkpoint every segment of every unit (keep its input, recompute in backward) | "
      "2 level 1 and the peak segments in pieces over their samples | 3 level 2 and the other segments in time "
      "chunks | 4 the lowest predicted peak within --memopt-max-slowdown of level 0's step time (one measured step, "
      "at most two trial steps)");
  add(keys, "memopt-compress-x", K::Bool, &c.memopt_compress_x,
      "memopt: keep a checkpointed input that is a spike tensor as bits (1/32 of f32); other inputs are kept as they "
      "are (--no-memopt-compress-x: keep every input as it is)");
  add(keys, "memory-budget-mb", K::Real, &c.memory_budget_mb,
      "memopt: peak MiB per rank to reach; the search stops at the first configuration under it (0: none; with "
      "--memopt-level 0 it starts the search)");
  add(keys, "memopt-max-slowdown", K::Real, &c.memopt_max_slowdown,
      "memopt level 4: the lowest peak whose predicted step time is at most this multiple of level 0's");
  add(keys, "pp-memopt-stage-budget-ratio", K::Real, &c.pp_memopt_stage_budget_ratio,
      "pp: memopt applies to round(ratio x stages) logical stages, those keeping the most activation memory, in (0, 1]");
  add(keys, "check-replicas", K::Int, &c.check_replicas,
      "dp: verify every N steps that all replicas are bitwise identical (0: at the start only)");
}

void add_parallel_flags(CLI::App& cmd, ConfigKeys& keys, ParallelConfig& c, const std::vector<std::string>* only) {
  add_parallel_keys(keys, c);
  keys.add_options(cmd, only);
}

const std::vector<std::string>& parallel_keys() {
  static const std::vector<std::string> k = [] {
    ParallelConfig c;
    ConfigKeys keys;
    add_parallel_keys(keys, c);
    return keys.keys();
  }();
  return k;
}

void validate_parallel_config(const ParallelConfig& c) {
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

LayoutOptions layout_options(const ParallelConfig& c, DType master) {
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
  o.memopt.max_slowdown = c.memopt_max_slowdown;
  o.memopt.pp_stage_budget_ratio = c.pp_memopt_stage_budget_ratio;
  o.strategy.sharding = c.optimizer_sharding;
  o.strategy.bucket_mb = c.bucket_mb;
  o.strategy.reshard_after_forward = c.fsdp_reshard_after_forward;
  o.strategy.param_dtype = dtype_of(c.fsdp_param_dtype);
  o.strategy.reduce_dtype = dtype_of(c.fsdp_reduce_dtype);
  return o;
}

MeshFlags mesh_flags(const ParallelConfig& c) {
  MeshFlags f;
  for (int64_t d : c.mesh_shape) f.mesh_shape.push_back(static_cast<int>(d));
  f.tp_mesh_dim = static_cast<int>(c.tp_mesh_dim);
  f.dp_mesh_dim = static_cast<int>(c.dp_mesh_dim);
  f.comm = c.comm;
  f.comm_timeout = c.comm_timeout;
  return f;
}

BatchRequest batch_request(const ParallelConfig& c, int64_t batch_size) {
  return BatchRequest{batch_size, c.global_batch_size, c.grad_accum};
}

}  // namespace sm
