// cmd_bench.cpp — `spikemesh bench` (spec §4): time warm-up then `steps` training steps on
// one fixed synthetic batch (inputs normal, labels uniform), report the median step
// latency with its forward/backward/optimizer/reset breakdown, throughput and peak memory,
// append a JSON-lines record and compare it with the previous record of the same
// configuration. One rank for now; MAX over ranks comes with the distributed modes.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>

#include "spikemesh/app/commands.h"
#include "spikemesh/app/model_options.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/rng.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/io/bench_record.h"
#include "spikemesh/models/model.h"
#include "spikemesh/train/optimizer.h"
#include "spikemesh/train/train_step.h"

namespace sm {

namespace {
struct BenchOptions {
  ModelSelection sel;
  std::string regime = "throughput_weak_scaling";
  std::string mode = "none", prefer = "speed", precision = "fp32", device = "cpu", result_log, optimizer = "adam";
  int64_t batch_size = 8, steps = 20, warmup = 5, image_size = 224, num_classes = 1000, threads = 0;
  double lr = 1e-3;
  uint64_t seed = 1;
  bool print_json = false, tp_debug_comm = false;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

void run_bench(BenchOptions& o, const AppEnv& env) {
  if (env.size > 1) SM_INPUT_ERROR("spikemesh bench runs on one rank in this version (got " << env.size << " ranks)");
  if (o.mode != "none")
    SM_INPUT_ERROR("--distributed-mode " << o.mode << " is not available yet in this version (use none)");
  if (o.batch_size <= 0) SM_INPUT_ERROR("--batch-size must be positive, got " << o.batch_size);
  if (o.steps <= 0 || o.warmup < 0) SM_INPUT_ERROR("--steps must be positive and --warmup >= 0");
  if (o.precision != "fp32" && o.precision != "fp64")
    SM_INPUT_ERROR("--precision " << o.precision << " needs --device cuda (the CPU path runs fp32 or fp64)");
  if (o.device != "cpu") SM_INPUT_ERROR("--device " << o.device << ": this run has no GPU back end (use --device cpu)");
  if (o.threads > 0) omp_set_num_threads(static_cast<int>(o.threads));
  const DType dt = o.precision == "fp64" ? DType::F64 : DType::F32;

  if (o.sel.model.empty() && o.sel.spec.empty()) o.sel.model = "cifar10dvs_vgg";
  std::unique_ptr<Model> model = o.sel.build();
  model->finalize(dt, Device::cpu(), o.seed);
  OptimizerConfig oc;
  oc.name = o.optimizer;
  oc.lr = o.lr;
  auto opt = make_optimizer(oc, model->params());
  const ModelInfo& mi = model->info;
  const int T = mi.T;
  const int64_t N = o.batch_size;  // one rank: global = per-rank batch in every regime

  // One fixed synthetic batch: x ~ N(0, 1) [T, N, ...], y ~ U{0..K-1}.
  Shape xs = {T, N};
  xs.insert(xs.end(), mi.input_shape.begin(), mi.input_shape.end());
  Tensor x = Tensor::empty(xs, dt), y = Tensor::empty({N}, DType::I64);
  CounterRng rx(o.seed, "bench/x"), ry(o.seed, "bench/y");
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = rx.normal(i);
    if (dt == DType::F32) x.data<float>()[i] = static_cast<float>(v);
    else x.data<double>()[i] = v;
  }
  for (int64_t i = 0; i < N; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(ry.uniform(i) * mi.num_classes) % mi.num_classes;

  if (env.rank == 0)
    std::printf("bench %s: batch %lld, T %d, %s, %d threads, %lld warm-up + %lld timed steps\n", mi.name.c_str(),
                static_cast<long long>(N), T, o.precision.c_str(), omp_get_max_threads(),
                static_cast<long long>(o.warmup), static_cast<long long>(o.steps));
  std::vector<double> lat, fwd, bwd, optm, rst;
  cpu_allocator().reset_peak();
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    Ctx ctx;
    ctx.seed = o.seed;
    ctx.step = s;
    Timer t;
    StepResult r = train_step(*model, *opt, x, y, ctx);
    double ms = t.ms();
    if (s >= o.warmup) {
      lat.push_back(ms);
      fwd.push_back(r.forward_ms);
      bwd.push_back(r.backward_ms);
      optm.push_back(r.optimizer_ms);
      rst.push_back(r.reset_ms);
    }
    if (env.rank == 0 && isatty(STDOUT_FILENO)) {
      std::printf("\r  step %lld/%lld  %.1f ms%s", static_cast<long long>(s + 1),
                  static_cast<long long>(o.warmup + o.steps), ms, s < o.warmup ? " (warm-up)" : "          ");
      std::fflush(stdout);
    }
  }
  if (env.rank == 0 && isatty(STDOUT_FILENO)) std::printf("\n");
  const double step_ms = median(lat);
  BenchRecord r;
  stamp_record(r);
  r["backend"] = "spikemesh";
  r["device"] = o.device;
  r["precision"] = o.precision;
  r["threads"] = omp_get_max_threads();
  r["benchmark_regime"] = o.regime;
  r["model"] = mi.name;
  r["mode"] = o.mode;
  r["prefer"] = o.prefer;
  r["world_size"] = env.size;
  r["optimizer_sharding"] = "none";
  r["memopt_level"] = 0;
  r["optimize_ms"] = 0.0;
  r["batch_size"] = o.batch_size;
  r["global_batch_size"] = N;
  r["per_rank_batch_size"] = N;
  r["data_replicas"] = 1;
  r["num_classes"] = mi.num_classes;
  r["T"] = T;
  r["steps"] = o.steps;
  r["warmup"] = o.warmup;
  r["image_size"] = mi.input_shape.size() == 3 ? mi.input_shape[1] : o.image_size;
  r["mesh_shape"] = nlohmann::json::array({1});
  r["tp_mesh_dim"] = nullptr;
  r["dp_mesh_dim"] = nullptr;
  r["memopt_compress_x"] = false;
  r["pp_microbatches"] = nullptr;
  r["pp_memopt_stage_budget_ratio"] = 0.5;
  r["pp_schedule"] = nullptr;
  r["pp_virtual_stages"] = 1;
  r["pp_layout"] = nullptr;
  r["pp_delay_wgrad"] = false;
  r["pp_memopt_stages"] = nlohmann::json::array();
  r["step_latency_ms"] = step_ms;
  r["global_throughput_sps"] = step_ms > 0 ? 1000.0 * N / step_ms : 0.0;
  r["per_device_throughput_sps"] = step_ms > 0 ? 1000.0 * N / step_ms : 0.0;
  r["peak_allocated_mb"] = cpu_allocator().peak_bytes() / 1048576.0;
  r["peak_rss_mb"] = peak_rss_mb();
  r["recommendation"] = {{"mode", "none"}, {"rationale", "one rank"}};
  r["tp_all_reduce_calls"] = 0;
  r["tp_all_reduce_mb"] = 0.0;
  r["forward_ms"] = median(fwd);
  r["backward_ms"] = median(bwd);
  r["optimizer_ms"] = median(optm);
  r["reset_ms"] = median(rst);
  r["data_ms"] = 0.0;
  r["warning_count"] = log_warning_count();
  if (env.rank != 0) return;
  std::printf("  step latency %.2f ms (median of %lld; forward %.2f, backward %.2f, optimizer %.2f, reset %.3f)\n"
              "  throughput   %.2f samples/s\n  peak memory  %.1f MB allocated, %.1f MB RSS\n",
              step_ms, static_cast<long long>(o.steps), r["forward_ms"].get<double>(), r["backward_ms"].get<double>(),
              r["optimizer_ms"].get<double>(), r["reset_ms"].get<double>(), r["global_throughput_sps"].get<double>(),
              r["peak_allocated_mb"].get<double>(), r["peak_rss_mb"].get<double>());
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
}  // namespace

void add_bench_command(CLI::App& app, const AppEnv& env) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "benchmark training steps on a fixed synthetic batch (spec §4)");
  cmd->footer(
      "Examples:\n"
      "  spikemesh bench --model cifar10dvs_vgg --batch-size 4 --T 10 --result-log output/bench.jsonl\n"
      "  make bench    # spikemesh and the same-model PyTorch script side by side\n"
      "Each record is compared with the most recent earlier record of the same configuration.");
  o->sel.add_options(*cmd);
  cmd->add_option("--benchmark-regime", o->regime, "throughput_weak_scaling | latency_strong_scaling | memory_capacity")
      ->check(CLI::IsMember({"throughput_weak_scaling", "latency_strong_scaling", "memory_capacity"}))
      ->capture_default_str();
  cmd->add_option("--batch-size", o->batch_size, "batch (per rank in weak scaling, global otherwise)")->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed steps")->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "warm-up steps (not timed)")->capture_default_str();
  cmd->add_option("--image-size", o->image_size, "image size for spikformer models (recorded)")->capture_default_str();
  cmd->add_option("--num-classes", o->num_classes, "classes for spikformer models (recorded)")->capture_default_str();
  cmd->add_option("--result-log", o->result_log, "append the JSON record to this file and compare with the previous one");
  cmd->add_option("--distributed-mode", o->mode, "none (distributed modes come with the mesh)")->capture_default_str();
  cmd->add_option("--prefer", o->prefer, "speed | memory | capacity (recorded)")->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32 | fp64")->capture_default_str();
  cmd->add_option("--device", o->device, "cpu")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads (0: OMP_NUM_THREADS or all cores)")->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "sgd | adam | adamw")->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of weights and the synthetic batch")->capture_default_str();
  cmd->add_flag("--tp-debug-comm", o->tp_debug_comm, "log tensor-parallel communication (no effect on one rank)");
  cmd->add_flag("--json", o->print_json, "print the record as JSON");
  cmd->callback([o, &env]() { run_bench(*o, env); });
}

}  // namespace sm
