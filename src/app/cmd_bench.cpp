// cmd_bench.cpp — `spikemesh bench` (docs/semantics.md §7): time warm-up then `steps` training
// steps on one fixed synthetic batch (inputs normal, labels uniform), report the median step
// latency with its forward/backward/optimizer/reset breakdown, throughput and peak memory,
// append a JSON-lines record and compare it with the previous record of the same
// configuration. Several ranks run data parallel (weak scaling: --batch-size per rank); times
// and memory are maxima over ranks.
// --device cpu|cuda|auto picks the device (select_device); --precision fp32|bf16|fp16|fp64
// (bf16/fp16 on a GPU: f32 master weights and optimizer state, fp16 with dynamic loss
// scaling). On a GPU each phase ends with a stream synchronisation so that the breakdown
// measures the GPU's work, and peak memory is the device allocator's. --cuda-graphs (default
// auto: one rank on a GPU) replays the step as a CUDA graph after two eager steps (then
// forward_ms holds forward + backward and backward_ms is 0); the record's cuda_graphs says
// whether the timed steps were replayed.
// `--kernel lif` runs the fused-neuron kernel microbenchmark instead (GPU only).
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <set>
#include <algorithm>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/parallel/pipeline/pp_partition.h"
#include "spikemesh/parallel/pipeline/pp_timeline.h"
#include "spikemesh/kernels/spike_conv_choice.h"
#include "spikemesh/layers/layer_profile.h"
#include "spikemesh/app/model_options.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/allocator_cuda.h"
#include "spikemesh/core/precision.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/io/bench_record.h"
#include "spikemesh/kernels/conv_policy.h"
#include "spikemesh/kernels/cpu/isa.h"
#include "spikemesh/models/model.h"
#include "spikemesh/core/process_stats.h"
#include "spikemesh/train/run_setup.h"
#include "spikemesh/core/flag_ranges.h"
#include "spikemesh/train/gpu_numerics_flags.h"
#include "spikemesh/train/graph_step_cuda.h"
#include "spikemesh/train/memopt_search.h"
#include "spikemesh/core/config_keys.h"
#include "spikemesh/parallel/parallel_config.h"
#include "spikemesh/planner/auto_choice.h"
#include "spikemesh/bench/bench_profile.h"
#include "spikemesh/bench/kernel_bench.h"
#include "spikemesh/bench/synthetic_batch.h"
#include "spikemesh/train/train_step.h"

namespace sm {

namespace {
struct BenchOptions {
  ModelSelection sel;
  std::string regime = "throughput_weak_scaling";
  std::string mode = "none", prefer = "speed", precision = "fp32", device = "auto", result_log, optimizer = "adam";
  std::string kernel;            // "lif": the neuron kernel microbenchmark instead of training steps
  std::string cuda_graphs = "auto";  // auto | on | off (train/graph_step_cuda.h)
  int64_t kernel_neurons = 1 << 22;
  std::string conv_algo;  // dense | sparse | auto (empty: SPIKEMESH_CONV_ALGO, else auto)
  GpuNumericsFlags gpu_numerics;  // --conv-algos, --conv-fp32-precision, --matmul-fp32-precision
  std::vector<std::string> conv_shapes;  // --kernel spike-conv | winograd: "Cin,Cout,H,K[,stride]"
  int64_t batch_size = 8, steps = 20, warmup = 5, image_size = 0, num_classes = 0, threads = 0;  // 0: the spec's
  double lr = 1e-3;
  uint64_t seed = 1;
  bool print_json = false, profile = false;
  ParallelConfig par;           // every parallel flag (parallel/parallel_config.h)
  ConfigKeys keys;              // ... registered through the one table
  std::set<std::string> given;  // the parallel flags given on the command line
  nlohmann::json recommendation;  // the planner's pick and reason (null: none planned)
};

// The spec's pp_* fields plus the measured bubble (median over the timed steps), the bubble the
// simulator gives for the same schedule with the costs measured in those steps, the bytes sent
// between stages per step (max over ranks) and each pipeline rank's peak allocated memory.
// Collective over the world.
void add_pipeline_fields(BenchRecord& r, Layout& layout, const std::vector<PpStepTimeline>& steps,
                         const PpTraffic& at_timed, int64_t timed_steps, double peak_alloc_mb) {
  const PipelineRuntime& pipe = *layout.pipeline();
  const PpSchedule& sched = pipe.schedule();
  r["pp_microbatches"] = sched.microbatches;
  r["pp_schedule"] = sched.kind;
  r["pp_virtual_stages"] = sched.virtual_stages;
  r["pp_layout"] = layout_text(pipe.units_per_stage());
  r["pp_transfer_path"] = pipe.transfer_path();  // staged | nccl-channels | mpi-channels (a measurement)
  std::vector<double> bubbles;
  for (const PpStepTimeline& st : steps) bubbles.push_back(measured_bubble(st));
  r["pp_bubble_measured"] = median(bubbles);
  r["pp_bubble_simulated"] = simulate(sched, costs_from_timeline(sched, steps)).bubble_fraction;
  r["pp_bubble_simulated_unit_costs"] = simulate(sched, PpCosts::uniform(sched.logical_stages())).bubble_fraction;
  const PpTraffic& now = pipe.traffic();
  std::vector<double> t{double(now.activation_bytes - at_timed.activation_bytes) / timed_steps,
                        double(now.spike_elements - at_timed.spike_elements) / timed_steps,
                        double(now.gradient_bytes - at_timed.gradient_bytes) / timed_steps};
  all_reduce_doubles(layout.groups().mesh()->world(), t, ReduceOp::Max);
  r["pp_activation_bytes_per_step"] = t[0];
  r["pp_spike_elements_per_step"] = t[1];
  r["pp_gradient_bytes_per_step"] = t[2];
  // Peak allocated memory of each pipeline rank (max over its dp and tp peers).
  std::vector<double> per_stage(layout.groups().pp_size(), 0.0);
  per_stage[layout.groups().pp_rank()] = peak_alloc_mb;
  all_reduce_doubles(layout.groups().mesh()->world(), per_stage, ReduceOp::Max);
  r["pp_stage_peak_allocated_mb"] = per_stage;
}

// --kernel: the kernel microbenchmarks (bench/kernel_bench.h) on this rank.
void run_kernel_bench(const BenchOptions& o, const AppEnv& env) {
  KernelBenchOptions k;
  k.kernel = o.kernel;
  k.conv_shapes = o.conv_shapes;
  k.batch_size = o.batch_size;
  k.T = o.sel.T;
  k.steps = o.steps;
  k.warmup = o.warmup;
  k.kernel_neurons = o.kernel_neurons;
  k.precision = o.precision;
  k.device = o.device;
  run_kernel_bench(k, env.rank == 0);
}

// --image-size / --num-classes set the spec variables image_size / num_classes (Spikformer's);
// a model without them refuses the flag by name. An explicit --var of the same name wins.
void apply_size_flags(BenchOptions& o) {
  const std::pair<const char*, int64_t> flags[] = {{"image_size", o.image_size}, {"num_classes", o.num_classes}};
  for (const auto& [var, value] : flags) {
    if (value == 0) continue;
    const std::string flag = std::string("--") + (var[0] == 'i' ? "image-size" : "num-classes");
    if (value < 0) SM_INPUT_ERROR(flag << " must be positive, got " << value);
    bool given_as_var = false;
    for (const std::string& v : o.sel.vars) given_as_var |= v.rfind(std::string(var) + "=", 0) == 0;
    if (given_as_var) continue;
    ModelSelection probe = o.sel;
    probe.vars.push_back(std::string(var) + "=" + std::to_string(value));
    try {
      (void)probe.build();
    } catch (const Error& e) {
      if (std::string(e.what()).find(var) != std::string::npos)
        SM_INPUT_ERROR(flag << " " << value << ": model '" << (o.sel.model.empty() ? o.sel.spec : o.sel.model)
                            << "' has no variable " << var << " (the flag applies to models such as spikformer_ti): "
                            << e.what());
      throw;
    }
    o.sel.vars = probe.vars;
  }
}

// The parts of a bench run: the layout plan resolved once against the mesh shape before any
// communicator exists (weak scaling: --batch-size is each dp replica's batch, split into
// microbatches under pp), then the mesh (collective over the world) and setup_run.
RunParts set_up_bench(BenchOptions& o, const AppEnv& env, std::unique_ptr<Mesh>& mesh) {
  if (o.batch_size <= 0) SM_INPUT_ERROR("--batch-size must be positive, got " << o.batch_size);
  if (o.steps <= 0 || o.warmup < 0) SM_INPUT_ERROR("--steps must be positive and --warmup >= 0");
  if (o.sel.model.empty() && o.sel.spec.empty()) o.sel.model = "cifar10dvs_vgg";
  apply_size_flags(o);
  RunRequest req;
  req.model = o.sel;
  req.precision = o.precision;
  validate_cuda_graphs_flag(o.cuda_graphs, o.device);
  req.device = o.device;
  req.threads = o.threads;
  req.conv_algo = o.conv_algo;
  req.seed = o.seed;
  req.optimizer.name = o.optimizer;
  req.optimizer.lr = o.lr;
  std::unique_ptr<Comm> world = env.size > 1 ? std::make_unique<Comm>(env.world, "world") : nullptr;
  LayoutTarget t;
  t.model = o.sel;
  t.precision = o.precision;
  t.device = o.device;
  t.optimizer = o.optimizer;
  t.batch_size = o.batch_size;  // weak scaling: each dp replica's batch (auto: the global batch x ranks)
  t.world_size = env.size;
  t.local_rank = local_rank_of(env.world, env.size);
  AutoLayoutResult choice;
  // THE layout plan, once, before any other communicator (auto / --prefer: the planner's pick).
  req.layout = plan_command_layout(o.par, o.given, t, world.get(), &choice);
  if (!choice.ranked.empty())
    o.recommendation = nlohmann::json{{"mode", choice.chosen.label()},
                                      {"rationale", choice.reason},
                                      {"predicted_step_ms", choice.ranked.front().prediction.step_ms},
                                      {"predicted_peak_mb", choice.ranked.front().prediction.peak_mb}};
  if (env.size > 1 || req.layout.mode != DistMode::None)  // collective over the world
    mesh = Mesh::create(env.world, mesh_flags(recorded_parallel_config(o.par, req.layout)));
  return setup_run(req, mesh.get());                   // the same set-up as `train`
}

// The fixed synthetic batch of this dp rank (bench/synthetic_batch.h), under pp in the plan's
// microbatches.
std::vector<MicroBatch> synthetic_microbatches(const BenchOptions& o, RunParts& parts) {
  const Layout& layout = *parts.layout;
  const int M = static_cast<int>(layout.plan().batch.accum);  // micro-steps (pp: microbatches); divides N
  return synthetic_batch(parts.model->info,
                         SyntheticBatch{layout.plan().batch.replica, M, layout.groups().data_rank(), o.seed},
                         parts.dtype,
                         parts.device, parts.activations);
}

// What the timed steps measured on this rank.
struct TimedSteps {
  std::vector<double> lat, fwd, bwd, optm, rst;
  int64_t mallocs_before = 0;
  CommCounters comm_at{}, tp_at{};
  PpTraffic pp_at;
  std::vector<PpStepTimeline> pp_steps;  // pipelines: every timed step's gathered timeline
  int64_t replays = 0;                   // steps replayed as a CUDA graph
  std::string graphs;                    // CudaGraphStep::describe()
  MemoptSearchResult memopt;             // levels 2-4 / --memory-budget-mb: the search before the steps
};

// Warm-up then timed steps on the fixed batch (collective over the layout's groups).
// memopt's search (levels 2-4, a budget): the second (warm-up) step measured (the first creates
// the optimizer's state and the kernels' first-call caches), the search from it on this batch;
// then what every unit runs. Returns the warm-up steps of the loop that ran (up to 2; steps
// beyond --warmup are extra ones). Collective over the layout's groups.
int64_t search_memopt(const BenchOptions& o, const AppEnv& env, Layout& layout, CudaGraphStep& graphs, RunParts& parts,
                      const std::vector<MicroBatch>& micro, MemoptSearchResult& result) {
  int64_t ran = 0;
  if (memopt_search_needed(layout)) {
    Ctx ctx;
    ctx.seed = o.seed;
    graphs.step(layout, *parts.optimizer, micro, ctx, StepOptions{0.0, &parts.scaler});
    MemoptStepObserver observer(layout);
    graphs.step(layout, *parts.optimizer, micro, ctx, StepOptions{0.0, &parts.scaler});
    const MemoptTrial observed = observer.finish();
    ran = std::min<int64_t>(o.warmup, 2);
    result = optimize_memopt(layout, micro, ctx, &observed);
    if (env.rank == 0) {
      std::printf("memopt search: %d trial steps, %.0f ms, peak %.1f MB\n", result.trial_steps, result.optimize_ms,
                  result.peak_mb);
      for (const std::string& l : result.log) std::printf("  %s\n", l.c_str());
    }
  }
  if (env.rank == 0 && layout.plan().options.memopt.enabled())
    std::printf("memopt per unit (rank 0's stage):\n%s", describe_memopt(layout.stage(), layout.memopt()).c_str());
  return ran;
}

TimedSteps run_steps(const BenchOptions& o, const AppEnv& env, RunParts& parts, const std::vector<MicroBatch>& micro) {
  Layout& layout = *parts.layout;
  const Device dev = parts.device;
  PipelineRuntime* pipe = layout.pipeline();
  CudaGraphStep graphs(parse_cuda_graphs(o.cuda_graphs), GraphConditions{dev.is_cuda(), env.size, layout.plan().mode,
                                                                          static_cast<int>(micro.size()),
                                                                          parts.scaler.enabled(),
                                                                          layout.plan().options.memopt.enabled()});
  if (env.rank == 0 && dev.is_cuda()) std::printf("cuda graphs: %s\n", graphs.describe().c_str());
  if (env.rank == 0) std::fputs(layout.plan().describe().c_str(), stdout);
  if (env.rank == 0)
    std::printf("bench %s: batch %lld, T %d, %s on %s, %d threads, %lld warm-up + %lld timed steps\n",
                parts.model->info.name.c_str(), static_cast<long long>(layout.plan().batch.replica), parts.model->info.T,
                o.precision.c_str(), dev.str().c_str(), omp_get_max_threads(), static_cast<long long>(o.warmup),
                static_cast<long long>(o.steps));
  TimedSteps ts;
  const int64_t first = search_memopt(o, env, layout, graphs, parts, micro, ts.memopt);
  allocator_for(dev).reset_peak();
  for (int64_t s = first; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) {
      if (dev.is_cuda()) ts.mallocs_before = cuda_allocator(dev.ordinal).malloc_calls();
      if (o.profile) {
        layer_profile_reset();
        layer_profile_enable(true);
      }
      ts.comm_at = layout.groups().comm_counters();
      ts.tp_at = layout.groups().tp_comm_counters();
      if (pipe) ts.pp_at = pipe->traffic();
    }
    Ctx ctx;
    ctx.seed = o.seed;
    ctx.step = s;
    Timer t;
    // fp16: dynamic loss scaling; on a GPU the phase times are the device's.
    StepResult r = graphs.step(layout, *parts.optimizer, micro, ctx, StepOptions{0.0, &parts.scaler});
    const double ms = t.ms();
    if (pipe && s >= o.warmup)
      ts.pp_steps.push_back(gather_step_timeline(*layout.groups().pp_comm(), pipe->last_timeline()));
    if (s >= o.warmup) {
      ts.lat.push_back(ms);
      ts.fwd.push_back(r.forward_ms);
      ts.bwd.push_back(r.backward_ms);
      ts.optm.push_back(r.optimizer_ms);
      ts.rst.push_back(r.reset_ms);
    }
    if (env.rank == 0 && isatty(STDOUT_FILENO)) {
      std::printf("\r  step %lld/%lld  %.1f ms%s", static_cast<long long>(s + 1),
                  static_cast<long long>(o.warmup + o.steps), ms, s < o.warmup ? " (warm-up)" : "          ");
      std::fflush(stdout);
    }
  }
  if (env.rank == 0 && isatty(STDOUT_FILENO)) std::printf("\n");
  layer_profile_enable(false);
  ts.replays = graphs.replays();
  ts.graphs = graphs.describe();
  return ts;
}
// The timed figures of the whole run: medians of this rank, then (several ranks) the slowest
// rank's times and the largest rank's memory (collective over the world).
struct BenchFigures {
  double step_ms = 0, fwd = 0, bwd = 0, optm = 0, rst = 0, rss = 0, peak_alloc = 0, local_peak_alloc = 0;
  double comm_mb = 0, comm_ms = 0, optim_state_mb = 0, local_param_mb = 0;
  int64_t comm_calls = 0;
  StrategyStats ss;
};

BenchFigures reduce_figures(const BenchOptions& o, RunParts& parts, Mesh* mesh, const TimedSteps& ts) {
  Layout& layout = *parts.layout;
  BenchFigures f;
  f.step_ms = median(ts.lat), f.fwd = median(ts.fwd), f.bwd = median(ts.bwd), f.optm = median(ts.optm);
  f.rst = median(ts.rst);
  f.rss = peak_rss_mb();
  f.peak_alloc = f.local_peak_alloc = allocator_for(parts.device).peak_bytes() / 1048576.0;
  // Memory of the model state on this rank: optimizer state (ZeRO: this rank's shards) and the
  // parameters as this rank holds them between steps (tp: its shards; FSDP: see
  // param_peak_mb_per_rank), for the activation estimate of the record.
  for (const OptimState& st : parts.optimizer->state()) f.optim_state_mb += st.value->nbytes() / 1048576.0;
  for (Param* p : layout.optimizer_params()) f.local_param_mb += p->value.nbytes() / 1048576.0;
  f.ss = layout.stats();
  if (!mesh) return f;
  // the slowest rank sets the pace; memory is the largest rank's
  const CommCounters now = layout.groups().comm_counters();
  f.comm_mb = (now.total_bus_bytes() - ts.comm_at.total_bus_bytes()) / 1048576.0 / o.steps;
  f.comm_ms = 1000.0 * (now.total_wait_seconds() - ts.comm_at.total_wait_seconds()) / o.steps;
  std::vector<double> m{f.step_ms, f.fwd, f.bwd, f.optm, f.rss, f.peak_alloc, f.comm_mb, f.comm_ms,
                        f.optim_state_mb, f.ss.param_peak_mb, f.ss.param_shard_mb, f.local_param_mb};
  all_reduce_doubles(mesh->world(), m, ReduceOp::Max);
  f.step_ms = m[0], f.fwd = m[1], f.bwd = m[2], f.optm = m[3], f.rss = m[4], f.peak_alloc = m[5], f.comm_mb = m[6];
  f.comm_ms = m[7], f.optim_state_mb = m[8], f.ss.param_peak_mb = m[9], f.ss.param_shard_mb = m[10];
  f.local_param_mb = m[11];
  f.comm_calls = static_cast<int64_t>(now.total_calls() - ts.comm_at.total_calls());
  return f;
}

// The record's configuration fields (bench_record.h; docs/semantics.md §7), in record order.
void add_config_fields(BenchRecord& r, const BenchOptions& o, const AppEnv& env, RunParts& parts, Mesh* mesh,
                       const TimedSteps& ts) {
  const ModelInfo& mi = parts.model->info;
  const int dp_size = parts.layout->groups().data_size();
  r["backend"] = "spikemesh";
  r["device"] = parts.device.is_cuda() ? "cuda" : "cpu";
  r["precision"] = precision_name(parts.precision);
  if (parts.device.is_cuda()) {
    r["cuda_graphs"] = ts.replays > 0;  // were timed steps replayed as a CUDA graph
    const GpuNumericsFlags n = gpu_numerics_names(gpu_numerics());  // as resolved by run_bench
    r["conv_algos"] = n.conv_algos;
    r["conv_fp32_precision"] = n.conv_fp32_precision;
    r["matmul_fp32_precision"] = n.matmul_fp32_precision;
  }
  r["threads"] = omp_get_max_threads();
  if (!parts.device.is_cuda()) {
    r["conv_algo"] = spike_conv_algo_name(spike_conv_algo());  // spike_conv_choice.h
    r["cpu_kernels_isa"] = cpu::own_kernels_isa();
    r["onednn_isa"] = cpu::onednn_isa();
  }
  r["benchmark_regime"] = o.regime;
  r["model"] = mi.name;
  const LayoutPlan& plan = parts.layout->plan();
  r["mode"] = plan.options.mode;
  r["prefer"] = o.par.prefer.empty() ? "speed" : o.par.prefer;
  r["world_size"] = env.size;
  r["optimizer_sharding"] = plan.options.strategy.sharding;
  const MemoptOptions& mo = plan.options.memopt;
  r["memopt_level"] = mo.level;
  r["optimize_ms"] = ts.memopt.optimize_ms;
  r["batch_size"] = plan.batch.replica;
  r["global_batch_size"] = plan.batch.global;
  r["per_rank_batch_size"] = plan.batch.replica;
  r["data_replicas"] = dp_size;
  r["num_classes"] = mi.num_classes;
  r["T"] = mi.T;
  r["steps"] = o.steps;
  r["warmup"] = o.warmup;
  r["image_size"] = mi.input_shape.size() == 3 ? mi.input_shape[1] : o.image_size;
  r["mesh_shape"] = mesh ? nlohmann::json::array({mesh->shape().dp, mesh->shape().tp, mesh->shape().pp})
                         : nlohmann::json::array({1});
  r["tp_mesh_dim"] = nullptr;
  r["dp_mesh_dim"] = nullptr;
  r["memopt_compress_x"] = mo.enabled() && mo.compress_x;
  r["memory_budget_mb"] = mo.memory_budget_mb;
  r["memopt_max_slowdown"] = mo.max_slowdown;
  r["pp_microbatches"] = nullptr;
  r["pp_memopt_stage_budget_ratio"] = mo.pp_stage_budget_ratio;
  r["pp_schedule"] = nullptr;
  r["pp_virtual_stages"] = 1;
  r["pp_layout"] = nullptr;
  r["pp_delay_wgrad"] = plan.options.pp_delay_wgrad;
  r["pp_memopt_stages"] = parts.layout->pipeline() ? nlohmann::json(parts.layout->memopt_stages()) : nlohmann::json::array();
  r["memopt_trial_steps"] = ts.memopt.trial_steps;
}

// The record's metric fields, in record order.
void add_metric_fields(BenchRecord& r, const BenchOptions& o, RunParts& parts, Mesh* mesh, const TimedSteps& ts,
                       const BenchFigures& f) {
  const LayoutGroups& groups = parts.layout->groups();
  const LayoutPlan& plan = parts.layout->plan();
  const int64_t N = plan.batch.replica, global_N = plan.batch.global;
  r["step_latency_ms"] = f.step_ms;
  r["global_throughput_sps"] = f.step_ms > 0 ? 1000.0 * global_N / f.step_ms : 0.0;
  r["per_device_throughput_sps"] = f.step_ms > 0 ? 1000.0 * N / f.step_ms : 0.0;
  r["peak_allocated_mb"] = f.peak_alloc;
  r["peak_rss_mb"] = f.rss;
  if (o.profile) {  // this rank's convolutions of spike inputs: firing rate and kernel per pass
    nlohmann::json layers = nlohmann::json::array();
    for (const SpikeConvRow& c : layer_profile_spike_conv_report()) {
      layers.push_back({{"layer", c.layer},
                        {"shape", c.geometry},
                        {"firing_rate", c.firing_rate()},
                        {"forward_kernel", c.forward_kernel()},
                        {"forward_ms", c.forward_ms / o.steps},
                        {"weights_kernel", c.weights_kernel()},
                        {"weights_ms", c.weight_ms / o.steps},
                        {"crossover_forward", c.crossover_forward},
                        {"crossover_weights", c.crossover_weights}});
    }
    r["spike_conv_layers"] = layers;
  }
  r["recommendation"] = !o.recommendation.is_null() ? o.recommendation
                         : mesh ? nlohmann::json{{"mode", plan.options.mode}, {"rationale", "as requested"}}
                                : nlohmann::json{{"mode", "none"}, {"rationale", "one rank"}};
  r["dp_comm_mb_per_step"] = f.comm_mb;
  r["optimizer_state_mb_per_rank"] = f.optim_state_mb;  // max over ranks
  r["param_mb_per_rank"] = f.local_param_mb;            // the optimizer's holders (tp shards, ZeRO/FSDP shards)
  // Peak allocated bytes minus parameters, gradients (as large as the parameters) and
  // optimizer state: the activations' and workspaces' peak (an estimate under FSDP/ZeRO-2).
  r["activation_peak_mb_per_rank"] = std::max(0.0, f.peak_alloc - 2 * f.local_param_mb - f.optim_state_mb);
  if (mesh) {
    r["param_full_mb"] = f.ss.param_full_mb;             // every parameter, unsharded
    r["param_shard_mb_per_rank"] = f.ss.param_shard_mb;  // ZeRO/FSDP: this rank's shards (max over ranks)
    r["param_peak_mb_per_rank"] = f.ss.param_peak_mb;    // parameter storage high-water mark (max over ranks)
    r["largest_two_units_mb"] = f.ss.largest_units_mb;   // FSDP: the bound's gathered units
  }
  r["dp_comm_wait_ms_per_step"] = f.comm_ms;
  r["dp_comm_calls_per_step"] = mesh ? double(f.comm_calls) / o.steps : 0.0;
  {  // tensor parallelism: this rank's all-reduces over tp per step (the same on every tp rank)
    const CommCounters tp_now = groups.tp_comm_counters();
    const CommOpCounter& a = tp_now[CommOp::AllReduce];
    const CommOpCounter& b = ts.tp_at[CommOp::AllReduce];
    r["tp_all_reduce_calls"] = static_cast<double>(a.calls - b.calls) / o.steps;
    r["tp_all_reduce_mb"] = static_cast<double>(a.payload_bytes - b.payload_bytes) / 1048576.0 / o.steps;
    r["tp_all_reduce_bus_mb"] = static_cast<double>(a.bus_bytes - b.bus_bytes) / 1048576.0 / o.steps;
    for (const auto& [op, key] : {std::pair{CommOp::ReduceScatter, "tp_reduce_scatter"}, std::pair{CommOp::AllGather, "tp_all_gather"}}) {
      const CommOpCounter& x = tp_now[op];  // the sample-sharded regions (layers/sequence_parallel.h)
      const CommOpCounter& y = ts.tp_at[op];
      r[std::string(key) + "_calls"] = static_cast<double>(x.calls - y.calls) / o.steps;
      r[std::string(key) + "_mb"] = static_cast<double>(x.payload_bytes - y.payload_bytes) / 1048576.0 / o.steps;
    }
    r["tp_size"] = groups.tp_size();
  }
  r["forward_ms"] = f.fwd;
  r["backward_ms"] = f.bwd;
  r["optimizer_ms"] = f.optm;
  r["reset_ms"] = f.rst;
  r["data_ms"] = 0.0;
  r["warning_count"] = log_warning_count();
  if (parts.device.is_cuda()) {
    const CudaCachingAllocator& ca = cuda_allocator(parts.device.ordinal);
    r["peak_reserved_mb"] = ca.reserved_bytes() / 1048576.0;
    r["device_mallocs_timed"] = ca.malloc_calls() - ts.mallocs_before;  // 0 in the steady state
    r["loss_scale"] = parts.scaler.scale();
    r["skipped_steps"] = parts.scaler.skipped_steps();
  }
}

// Rank 0: the summary lines, the layer profile (gpu_profile: the GPU's one-step table, or
// null), the result log and its comparison.
void report_bench(const BenchRecord& r, const BenchOptions& o, RunParts& parts, Mesh* mesh, const BenchFigures& f,
                  const StepProfile* gpu_profile) {
  std::printf("  step latency %.2f ms (median of %lld; forward %.2f, backward %.2f, optimizer %.2f, reset %.3f)\n"
              "  throughput   %.2f samples/s\n  peak memory  %.1f MB allocated, %.1f MB RSS\n",
              f.step_ms, static_cast<long long>(o.steps), f.fwd, f.bwd, f.optm, f.rst,
              r["global_throughput_sps"].get<double>(), f.peak_alloc, f.rss);
  if (mesh) {
    std::printf("  data parallel %s over %d ranks (global batch %lld): %.2f MiB/step on the wire per rank, "
                "%.1f collective calls/step, %.2f ms/step exposed wait\n",
                parts.layout->plan().options.mode.c_str(), parts.layout->groups().data_size(),
                static_cast<long long>(r["global_batch_size"].get<int64_t>()),
                f.comm_mb, r["dp_comm_calls_per_step"].get<double>(), f.comm_ms);
    std::printf("  model state  parameters %.2f MiB full, %.2f MiB peak per rank; optimizer state %.2f MiB per rank\n",
                f.ss.param_full_mb, f.ss.param_peak_mb, f.optim_state_mb);
  }
  if (parts.device.is_cuda())
    std::printf("  device       %s: %.1f MB reserved, %lld cudaMalloc calls in the timed steps; loss scale %g, %lld "
                "skipped steps\n",
                parts.device.str().c_str(), r["peak_reserved_mb"].get<double>(),
                static_cast<long long>(r["device_mallocs_timed"].get<int64_t>()), parts.scaler.scale(),
                static_cast<long long>(parts.scaler.skipped_steps()));
  if (parts.layout->pipeline())
    std::printf("  pipeline     %s, %d ranks x %d virtual stages, %d microbatches, layout %s: bubble %.1f%% measured, "
                "%.1f%% simulated with the measured costs; %.2f MiB activations sent per step per rank (max)\n",
                r["pp_schedule"].get<std::string>().c_str(), parts.layout->groups().pp_size(),
                r["pp_virtual_stages"].get<int>(),
                r["pp_microbatches"].get<int>(), r["pp_layout"].get<std::string>().c_str(),
                100 * r["pp_bubble_measured"].get<double>(), 100 * r["pp_bubble_simulated"].get<double>(),
                r["pp_activation_bytes_per_step"].get<double>() / 1048576.0);
  if (gpu_profile)
    std::printf("%s", format_step_profile(*gpu_profile, kProfileTableRows).c_str());
  else if (o.profile)
    print_cpu_layer_profile(o.steps, f.step_ms);
  if (!o.result_log.empty()) {
    auto prev = find_previous_record(o.result_log, r);
    append_bench_record(o.result_log, r);
    if (prev)
      std::printf("compared with the previous record of this configuration (%s):\n%s",
                  prev->value("timestamp", std::string("?")).c_str(), compare_records(*prev, r).c_str());
    else
      std::printf("first record of this configuration in %s\n", o.result_log.c_str());
  }
  if (o.print_json) std::printf("%s\n", r.dump().c_str());
  std::fflush(stdout);
}

void run_bench(BenchOptions& o, const AppEnv& env) {
  {  // the GPU numerics (train/gpu_numerics_flags.h), before any GPU work; kernel benches: their device
    const std::string dev = o.kernel.empty() ? o.device : o.kernel == "lif" ? "cuda" : "cpu";
    apply_gpu_numerics(resolve_gpu_numerics(o.gpu_numerics, {}, gpu_numerics_env_values(),
                                            gpu_numerics_target(dev, o.precision)),
                       env.rank == 0);
  }
  if (!o.kernel.empty()) {
    if (env.size > 1) SM_INPUT_ERROR("--kernel benchmarks run on one rank (got " << env.size << " ranks)");
    return run_kernel_bench(o, env);
  }
  std::unique_ptr<Mesh> mesh;
  RunParts parts = set_up_bench(o, env, mesh);
  const std::vector<MicroBatch> micro = synthetic_microbatches(o, parts);
  const TimedSteps ts = run_steps(o, env, parts, micro);
  const BenchFigures f = reduce_figures(o, parts, mesh.get(), ts);  // collective over the world
  BenchRecord r;
  stamp_record(r);
  add_config_fields(r, o, env, parts, mesh.get(), ts);
  if (parts.layout->pipeline())  // collective over the world
    add_pipeline_fields(r, *parts.layout, ts.pp_steps, ts.pp_at, o.steps, f.local_peak_alloc);
  add_metric_fields(r, o, parts, mesh.get(), ts, f);
  std::unique_ptr<StepProfile> gpu_profile;  // --profile on a GPU: one more step, eager, after every figure
  if (o.profile && parts.device.is_cuda()) {
    Ctx ctx;
    ctx.seed = o.seed;
    ctx.step = o.warmup + o.steps;
    gpu_profile = std::make_unique<StepProfile>(
        profile_gpu_step(*parts.layout, *parts.optimizer, micro, ctx, StepOptions{0.0, &parts.scaler}));
    r["layer_profile"] = step_profile_json(*gpu_profile);
  }
  if (env.rank == 0) report_bench(r, o, parts, mesh.get(), f, gpu_profile.get());
}
}  // namespace

void add_bench_command(CLI::App& app, const AppEnv& env) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "benchmark training steps on a fixed synthetic batch");
  cmd->footer(
      "Examples:\n"
      "  spikemesh bench --model cifar10dvs_vgg --batch-size 4 --T 10 --result-log output/bench.jsonl\n"
      "  spikemesh bench --model cifar10dvs_vgg --device cuda --precision bf16 --batch-size 32\n"
      "  mpirun -np 2 spikemesh bench --distributed-mode pp --mesh-shape 1 1 2 --pp-schedule 1f1b --batch-size 8 --T 4\n"
      "  make bench    # spikemesh and the same-model PyTorch script side by side\n"
      "Each record is compared with the most recent earlier record of the same configuration.");
  add_model_options(*cmd, o->sel);
  cmd->add_option("--benchmark-regime", o->regime, "throughput_weak_scaling | latency_strong_scaling | memory_capacity")
      ->check(CLI::IsMember({"throughput_weak_scaling", "latency_strong_scaling", "memory_capacity"}))
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "batch (per rank in weak scaling, global otherwise)")->capture_default_str()
      ->check(range_validator("batch-size", true));
  cmd->add_option("--steps", o->steps, "timed steps")->capture_default_str()
      ->check(range_validator("steps", true));
  cmd->add_option("--warmup", o->warmup, "warm-up steps (not timed)")->capture_default_str()
      ->check(range_validator("warmup", true));
  cmd->add_option("--image-size", o->image_size,
                  "input image size of models with an image_size variable (spikformer_*: default 224)")
      ->check(range_validator("image-size", true));
  cmd->add_option("--num-classes", o->num_classes,
                  "classes of models with a num_classes variable (spikformer_*: default 1000)")
      ->check(range_validator("num-classes", true));
  cmd->add_option("--result-log", o->result_log, "append the JSON record to this file and compare with the previous one");
  add_parallel_flags(*cmd, o->keys, o->par);  // the parallel flags: one table for every command
  cmd->add_option("--precision", o->precision, "fp32 | bf16 | fp16 (GPU) | fp64 (CPU)")->capture_default_str();
  cmd->add_option("--device", o->device, "cpu | cuda | auto (GPU when one is visible)")->capture_default_str();
  cmd->add_option("--cuda-graphs", o->cuda_graphs,
                  "auto | on | off: replay the steady-state step as a CUDA graph (auto: one rank on a GPU)")
      ->capture_default_str();
  cmd->add_option("--kernel", o->kernel,
                  "instead of training steps: lif (the fused neuron kernels, GPU) | spike-conv (dense vs binary-input "
                  "convolution over firing rates, CPU: the crossover per shape) | winograd (the 3x3 passes: oneDNN direct, "
                  "oneDNN Winograd, own F(2x2,3x3) and F(4x4,3x3), and the binary-input kernel on 15% spikes, CPU) | conv-layout (bf16 "
                  "NCHW vs NHWC through cuDNN's graph API, each pass timed with CUDA events, GPU; --T default 10); "
                  "for these batch = --batch-size x --T, median of --steps");
  cmd->add_option("--conv-shape", o->conv_shapes,
                  "--kernel spike-conv / winograd: shapes Cin,Cout,H,K[,stride] (repeatable; default: "
                  "cifar10dvs_vgg's and spikformer_ti's convolutions of spikes / cifar10dvs_vgg's 3x3 ones)");
  cmd->add_option("--kernel-neurons", o->kernel_neurons, "neurons M for --kernel lif")->capture_default_str()
      ->check(range_validator("kernel-neurons", true));
  cmd->add_option("--threads", o->threads, "CPU threads (0: OMP_NUM_THREADS or all cores)")->capture_default_str()
      ->check(range_validator("threads", true));
  cmd->add_option("--conv-algo", o->conv_algo,
                  "CPU f32 convolutions of spike inputs: dense (oneDNN) | sparse (binary-input kernel) | auto (by the "
                  "measured firing rate; the default, or SPIKEMESH_CONV_ALGO)")
      ->check(CLI::IsMember({"dense", "sparse", "auto"}));
  add_gpu_numerics_flags(*cmd, o->gpu_numerics);
  cmd->add_option("--optimizer", o->optimizer, "sgd | adam | adamw")->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate")->capture_default_str()
      ->check(range_validator("lr", false));
  cmd->add_option("--seed", o->seed, "seed of weights and the synthetic batch")->capture_default_str()
      ->check(range_validator("seed", true));
  cmd->add_flag("--json", o->print_json, "print the record as JSON");
  cmd->add_flag("--profile", o->profile,
                "CPU: time every layer type in the timed steps (host clock) and print a table with GFLOP/s of "
                "conv/linear. GPU: after the timed steps, ONE more step run eagerly (never a CUDA-graph replay, "
                "whatever --cuda-graphs says) with CUDA events around every leaf layer's pass: a table per layer and "
                "pass (forward, backward or backward-input/-weight; the first 40 rows), the rest of the step "
                "(optimizer, loss, gaps) and the per-type totals; every row also in the record's layer_profile");
  cmd->callback([o, &env]() {
    o->keys.apply_given_flags();
    o->given = o->keys.given_keys();
    for (const char* k : {"check-replicas", "pp-timeline-steps"})  // the training loop's, not a bench step's
      if (o->given.count(k)) SM_INPUT_ERROR("--" << k << " applies to `spikemesh train`, not to bench");
    validate_parallel_config(o->par);
    run_bench(*o, env);
  });
}

}  // namespace sm
