// trainer.cpp — the training loop (docs/architecture.md §2) as a short loop over parts:
//   set-up (train_plan + run_setup: dataset, model, layout, optimizer; run directory, log,
//   checkpoints, metrics), then epoch → step → microbatches → layout step (reduce,
//   optimizer) → metrics → checkpoint, with an evaluation per epoch and a stop at a step
//   boundary on SIGTERM/SIGUSR1. No layout or mode is named here: the Layout owns them.
// Invariants: with no mesh the run makes no MPI call; with a mesh every rank executes the
// same sequence of collectives (set-up checks, layout step, metric reductions, stop
// agreement, evaluation, checkpoints), so a failure or a signal on one rank never leaves
// another waiting. Batches are prefetched on the host (pinned for a GPU) and moved to the
// device by the main thread (batch_io.h).
#include "spikemesh/train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <iomanip>
#include <mutex>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/data/prefetcher.h"
#include "spikemesh/data/sampler.h"
#include "spikemesh/io/h5_lock.h"
#include "spikemesh/io/metrics.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/train/checkpointing.h"
#include "spikemesh/train/graph_step_cuda.h"
#include "spikemesh/train/pipeline_record.h"
#include "spikemesh/train/evaluation.h"
#include "spikemesh/train/run_dir.h"
#include "spikemesh/train/step_metrics.h"
#include "spikemesh/train/stop_signal.h"
#include "spikemesh/train/train_plan.h"
#include "batch_io.h"

namespace sm {

namespace {
struct Batch {
  std::vector<MicroBatch> micro;  // x [T, n, ...] model dtype; y [n] i64; one per micro-step
  double data_ms = 0;
};

// Resumes from `path`: state, warnings on a different seed or global batch, the log line.
TrainState resume(CheckpointManager& ckpt, const std::string& path, LossScaler& scaler, const TrainConfig& cfg,
                  const TrainPlan& plan, bool root, RunLog& log) {
  const CheckpointInfo ci = ckpt.load(path, scaler);  // warns once about changed settings (seed, global batch, ...)
  TrainState st = ci.state;
  st.seed = cfg.seed;
  const int64_t was = checkpoint_global_batch(ci.config_toml, ci.mesh);
  if (st.batch_in_epoch >= plan.per_epoch)
    SM_INPUT_ERROR(path << ": its data cursor (batch " << st.batch_in_epoch << " of the epoch) is beyond this run's "
                        << plan.per_epoch << " global batches per epoch; resume with the global batch it was "
                        << "trained with" << (was > 0 ? " (" + std::to_string(was) + ", --global-batch-size)" : ""));
  log.line("resumed from " + path + " at step " + std::to_string(st.step) + " (epoch " + std::to_string(st.epoch + 1) +
           ", batch " + std::to_string(st.batch_in_epoch) + ")");
  return st;
}

std::string header_line(const TrainConfig& cfg, const H5Dataset& ds, Layout& layout, const RunParts& parts,
                        const TrainPlan& plan, const std::string& run_dir) {
  const Model& m = *parts.model;
  const int dp = layout.data_size();
  std::ostringstream h;
  h << "spikemesh train: model " << m.info.name << " (" << m.num_parameters() << " parameters, T " << m.info.T << ", "
    << cfg.precision << "), data " << cfg.data << " (" << ds.size(Split::Train) << " train / " << ds.size(Split::Test)
    << " test), batch " << plan.batch;
  if (layout.pipeline())
    h << " per microbatch (global " << plan.global_batch << " = " << plan.batch << " x dp " << dp << " x "
      << plan.accum << " microbatches)";
  else if (layout.distributed() || plan.accum > 1)
    h << " per rank (global " << plan.global_batch << " = " << plan.batch << " x dp " << dp << " x accum "
      << plan.accum << ")";
  h << ", " << plan.per_epoch << " steps/epoch, ";
  if (parts.device.is_cuda())
    h << parts.device.str()
      << (parts.activations != parts.dtype ? std::string(" (") + dtype_name(parts.activations) + " activations)" : "");
  else
    h << omp_get_max_threads() << " threads";
  if (layout.distributed()) h << " per rank, " << layout.world_size() << " ranks (" << layout.describe() << ")";
  h << ", output " << run_dir;
  return h.str();
}
}  // namespace

TrainSummary run_training(const TrainConfig& cfg, const std::string& config_toml, Mesh* mesh) {
  Comm* world = mesh ? &mesh->world() : nullptr;
  // ---- set-up: data first (a bad file fails before anything is written), then the parts.
  H5Dataset ds = H5Dataset::open(cfg.data, data_group_of(mesh));  // collective over the data group
  RunRequest req;
  int pp_micro = 0;  // pipelines: microbatches per step
  agree_on_error(world, [&] {
    req = run_request_of(cfg, ds.info());
    // the dry run that balances the stages runs one real-size microbatch
    pp_micro = pipeline_microbatches(cfg, data_ranks_of(mesh), mesh ? mesh->shape().pp : 1, &req.layout.pp_cost_samples);
    req.layout.pp_microbatches = pp_micro;
  });
  TrainPlan plan;
  RunParts parts = setup_run(req, mesh, [&](Model& m) { plan = plan_training(cfg, ds, m, data_ranks_of(mesh), pp_micro); });
  Model& model = *parts.model;
  Layout& layout = *parts.layout;
  Optimizer& opt = *parts.optimizer;
  LossScaler& scaler = parts.scaler;
  const bool root = layout.is_root();
  const LrSchedule sched(plan.lr);
  const int T = model.info.T;
  std::string run_name = cfg.run_name.empty() ? default_run_name(model.info.name) : cfg.run_name;
  if (world) run_name = broadcast_string(*world, run_name, 0);  // rank 0's clock names it
  const std::string run_dir = cfg.output + "/" + run_name;
  EpochSampler sampler(ds.size(Split::Train), plan.global_batch, static_cast<uint64_t>(cfg.seed), cfg.shuffle, true);
  std::unique_ptr<RunLog> run_log;  // only now, with every setting validated: a bad one writes nothing
  agree_on_error(world, [&] {
    if (root) make_dirs(run_dir, "--output");
  });
  check_shared_directory(world, run_dir, "--output");  // checkpoints are written collectively
  agree_on_error(world, [&] { run_log = std::make_unique<RunLog>(run_dir + "/log.txt", root); });
  RunLog& log = *run_log;
  CheckpointManager ckpt(layout, opt, run_dir, config_toml, cfg.precision, static_cast<int>(cfg.keep));
  ckpt.allow_nonfinite(cfg.allow_nonfinite_checkpoint);
  TrainState st;
  st.seed = cfg.seed;
  const std::string latest = ckpt.latest();
  std::string resume_from = cfg.resume == "auto" ? latest : cfg.resume;
  if (cfg.resume == "auto" && latest.empty())
    log.line("resume auto: no complete checkpoint in " + run_dir + ", starting fresh");
  if (resume_from.empty() && !latest.empty())
    SM_INPUT_ERROR(run_dir << " already holds checkpoints of an earlier run: continue it with --resume auto, "
                              "or choose another --run-name");
  if (!resume_from.empty()) st = resume(ckpt, resume_from, scaler, cfg, plan, root, log);
  std::unique_ptr<MetricsWriter> metrics;  // written only now: a failed resume leaves the files as they were
  agree_on_error(world, [&] {
    if (!root) return;
    std::ofstream c(run_dir + "/config.toml");
    c << config_toml;
    if (!c) SM_INPUT_ERROR(run_dir << "/config.toml: cannot write");
    metrics = std::make_unique<MetricsWriter>(run_dir + "/metrics.h5", resume_from.empty() ? -1 : st.step);
  });
  log.line(header_line(cfg, ds, layout, parts, plan, run_dir));

  // ---- the parts the loop calls.
  TrainSummary sum;
  sum.run_dir = run_dir;
  auto save = [&] {
    std::lock_guard<std::mutex> l(hdf5_mutex());
    if (metrics) metrics->flush();
    sum.last_checkpoint = ckpt.save(st, scaler);
    log.line("checkpoint " + sum.last_checkpoint, false);
  };
  EvalSettings es{cfg.eval_batch_size > 0 ? cfg.eval_batch_size : cfg.batch_size, T, plan.encoding, parts.dtype,
                  parts.activations, static_cast<uint64_t>(cfg.seed)};
  int64_t last_eval_step = -1;
  auto evaluate = [&] {
    const EvalOutcome e = evaluate_test_split(layout, ds, es);
    if (metrics) {
      std::lock_guard<std::mutex> l(hdf5_mutex());
      metrics->log_eval(st.step, st.epoch, e.loss, e.accuracy, e.firing_rate, e.layer_names);
    }
    sum.final_test_accuracy = e.accuracy;
    sum.final_test_loss = e.loss;
    last_eval_step = st.step;
    std::ostringstream os;
    os << "eval  step " << st.step << " | test loss " << std::fixed << std::setprecision(4) << e.loss
       << " | test accuracy " << std::setprecision(2) << 100.0 * e.accuracy << "% (" << e.correct << "/" << e.count
       << ")";
    log.line(os.str());
  };
  const bool tty = root && isatty(STDOUT_FILENO);
  const int dp_rank = layout.data_rank(), dp_size = layout.data_size();
  const DType dt = parts.dtype;
  const Device dev = parts.device;
  Allocator& mem = allocator_for(dev);  // the device's (CPU: the host allocator)
  mem.reset_peak();
  CommCounters comm_before = layout.all_comm_counters();
  PipelineRecorder pipe_rec(layout, cfg.pp_timeline_steps);  // pipelines: <run>/pipeline.h5
  auto write_pipeline = [&] {
    std::lock_guard<std::mutex> l(hdf5_mutex());
    pipe_rec.write(run_dir + "/pipeline.h5");
  };
  ProgressWindow window;
  Timer run_timer;
  bool stop = false;
  auto limit_reached = [&] { return cfg.max_steps > 0 && st.step >= cfg.max_steps; };
  const int64_t first_step = st.step;  // > 0 when resumed
  // --cuda-graphs (train/graph_step_cuda.h): replays the steady-state step on one GPU.
  CudaGraphStep graphs(parse_cuda_graphs(cfg.cuda_graphs),
                       GraphConditions{dev.is_cuda(), layout.world_size(), cfg.distributed_mode, plan.accum,
                                       scaler.enabled()});
  if (dev.is_cuda()) log.line("cuda graphs: " + graphs.describe(), false);

  // ---- epoch → step → microbatches → layout step → metrics → checkpoint.
  while (!stop && st.epoch < cfg.epochs && !limit_reached()) {
    const int64_t epoch = st.epoch, first = st.batch_in_epoch;
    int64_t n_batches = plan.per_epoch - first;
    if (cfg.max_steps > 0) n_batches = std::min(n_batches, cfg.max_steps - st.step);
    bool epoch_done = false;
    {
      Prefetcher<Batch> pf(
          [&, epoch, first](int64_t k) {
            Timer t;
            Batch b;
            make_device_current(dev);  // this thread pins memory for `dev`, not for GPU 0
            for (int64_t m = 0; m < plan.accum; ++m) {
              // Micro-step m of data rank r holds part m·dp + r of the global batch.
              const int part = static_cast<int>(m * dp_size + dp_rank), parts_n = static_cast<int>(plan.accum * dp_size);
              auto idx = sampler.batch_indices(epoch, first + k, part, parts_n);
              b.micro.push_back(load_micro(ds, Split::Train, idx, T, plan.encoding, dt, static_cast<uint64_t>(cfg.seed),
                                           epoch, dev.is_cuda()));
              b.micro.back().sample_offset = part * plan.batch;
            }
            b.data_ms = t.ms();
            return b;
          },
          n_batches, 2);
      Timer wait;
      while (auto bt = pf.next()) {
        StepReport rep;
        rep.wait_ms = wait.ms();
        Ctx ctx;
        ctx.seed = static_cast<uint64_t>(cfg.seed);
        ctx.step = st.step;
        const double lr = sched.lr_at(st.step);
        opt.set_lr(lr);
        Timer step_t;
        layout.sync_buffers();  // every rank steps with dp rank 0's BN statistics (unless synced BN)
        std::vector<MicroBatch> micro;
        for (const MicroBatch& m : bt->micro) micro.push_back(to_device(m, dev, parts.activations));
        rep.r = graphs.step(layout, opt, micro, ctx, StepOptions{cfg.clip_grad_norm, &scaler});
        rep.step_ms = step_t.ms() + rep.wait_ms;
        ++st.step;
        if (++st.batch_in_epoch == plan.per_epoch) {
          ++st.epoch;
          st.batch_in_epoch = 0;
          epoch_done = true;
        }
        if (pipe_rec.active()) {
          pipe_rec.after_step(st.step);  // collective over pp
          if (!pipe_rec.active()) write_pipeline();
        }
        for (const LayerStat& s : layout.layer_stats()) {  // pp: every stage's, gathered
          rep.firing_rate.push_back(s.value);
          rep.layer_names.push_back(s.layer);
        }
        rep.peak_mb = mem.peak_bytes() / 1048576.0;
        rep.rss_mb = peak_rss_mb();
        rep.load_ms = bt->data_ms;
        const CommCounters now = layout.all_comm_counters();
        rep.comm_ms = 1000.0 * (now.total_wait_seconds() - comm_before.total_wait_seconds());
        rep.comm_mb = static_cast<double>(now.total_bus_bytes() - comm_before.total_bus_bytes()) / 1048576.0;
        rep.stop = stop_signal() != 0;
        if (!layout.counts_in_metrics()) rep.r.count = rep.r.correct = 0;  // tp peers: tp rank 0 counts
        reduce_step_report(layout.metrics_comm(), rep);  // collective: every rank agrees on the stop too
        if (cfg.check_replicas > 0 && st.step % cfg.check_replicas == 0)
          layout.check_replicas("parameters after step " + std::to_string(st.step));
        comm_before = layout.all_comm_counters();
        window.add(rep);
        if (metrics) {
          std::map<std::string, double> row = step_row(rep, st.step, epoch, lr, layout.distributed());
          if (scaler.enabled()) {  // fp16: the loss scale after this step and the steps skipped so far
            row["loss_scale"] = scaler.scale();
            row["skipped_steps"] = static_cast<double>(scaler.skipped_steps());
          }
          std::lock_guard<std::mutex> l(hdf5_mutex());
          metrics->log_step(row, rep.firing_rate, rep.layer_names);
        }
        if (st.step % cfg.log_every == 0 || st.step == plan.total_steps) {
          const std::string line = window.line(epoch, cfg.epochs, st.step, plan.total_steps, plan.global_batch);
          if (tty) {
            std::printf("\r%s   ", line.c_str());
            std::fflush(stdout);
          }
          log.line(line, !tty);
        }
        stop = rep.stop;
        if (stop || limit_reached()) break;
        if (cfg.ckpt_every > 0 && st.step % cfg.ckpt_every == 0) save();
        wait.reset();
      }
    }  // prefetcher joined: no HDF5 reads run concurrently from here on
    if (tty) std::printf("\n");
    if (epoch_done) evaluate();  // an epoch's evaluation belongs to it, even when a stop follows
    if (stop) break;
  }
  if (stop) {
    const int sig = stop_signal();
    log.line(sig ? "stop requested (signal " + std::to_string(sig) + "): checkpointing at step " + std::to_string(st.step)
                 : "stop requested (signal on another rank): checkpointing at step " + std::to_string(st.step));
    if (st.step == plan.total_steps && last_eval_step != st.step) evaluate();  // the run is complete anyway
    save();
    sum.interrupted = true;
  } else if (st.step == first_step && first_step > 0 && st.step == plan.total_steps) {
    // Resumed from the final checkpoint of a finished run: it already holds the final
    // evaluation (every checkpoint at the last step is written after one), so add nothing.
    log.line("nothing to do: the run is already complete at step " + std::to_string(st.step));
  } else {
    if (last_eval_step != st.step) evaluate();
    save();
  }
  if (pipe_rec.active()) write_pipeline();  // fewer steps than --pp-timeline-steps
  sum.steps = st.step;
  std::ostringstream os;
  os << "done: " << st.step << " steps in " << format_duration(run_timer.ms() / 1000.0);
  if (sum.final_test_accuracy >= 0)
    os << ", test accuracy " << std::fixed << std::setprecision(2) << 100.0 * sum.final_test_accuracy << "%";
  os << "; output in " << run_dir;
  log.line(os.str());
  return sum;
}

}  // namespace sm
