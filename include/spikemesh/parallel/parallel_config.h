// parallel_config.h — THE parallel configuration of a command: every parallel flag (the mode,
// the mesh and its dims, communication and its timeout, the dp family's sharding, buckets,
// accumulation and global batch, sync-BN, the tp / fsdp / pp options, memopt, the planner's
// --prefer and --calibration) in one struct, declared once in one key table (name, kind,
// field, help; ranges in core/flag_ranges.h) that `train`, `bench`, `plan`, `eval` and
// `calibrate` all register (add_parallel_keys), validated by one function and mapped onto
// LayoutOptions and MeshFlags by one function each. Adding a parallel flag touches the struct,
// its row in the table (parallel_config.cpp), its doc (docs/parallelism.md) and its use.
// Invariant: pure (no communication); every Input error names the flag.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/dtype.h"
#include "spikemesh/parallel/layout_plan.h"

namespace CLI {
class App;
}

namespace sm {

class ConfigKeys;

struct ParallelConfig {
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
  double memopt_max_slowdown = 1.2;       // level 4: predicted step time / level 0's
  double pp_memopt_stage_budget_ratio = 0.5;
};

// The key table: one key per field above, with its help, bound into `keys`.
void add_parallel_keys(ConfigKeys& keys, ParallelConfig& c);
// The one registration of the parallel flags on a command: the table bound into `keys` (which,
// like `c`, must outlive parsing) and one flag per key on `cmd` (only those in `only` when given:
// commtest takes the mesh's). After parsing: keys.apply_given_flags(), validate_parallel_config(c).
void add_parallel_flags(CLI::App& cmd, ConfigKeys& keys, ParallelConfig& c, const std::vector<std::string>* only = nullptr);

// The table's key names, in order (e.g. what `eval` takes from `train`).
const std::vector<std::string>& parallel_keys();

// Names, ranges and combinations of the flags alone (no mesh, no model). Input errors name the flag.
void validate_parallel_config(const ParallelConfig& c);

// The layout flags (parallel/layout.h); FSDP dtypes left empty take `master`.
LayoutOptions layout_options(const ParallelConfig& c, DType master = DType::F32);
// The mesh flags (comm/mesh.h).
MeshFlags mesh_flags(const ParallelConfig& c);

// The batch flags a command resolves its plan's batches from (layout_plan.h, BatchPlan):
// `batch_size` samples per dp replica and micro-step, unless --global-batch-size sets them.
BatchRequest batch_request(const ParallelConfig& c, int64_t batch_size);

}  // namespace sm
