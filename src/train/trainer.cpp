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

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <optional>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/heartbeat.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/train/memopt_search.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/data/prefetcher.h"
#include "spikemesh/data/sampler.h"
#include "spikemesh/io/hdf5_thread.h"
#include "spikemesh/io/metrics.h"
#include "spikemesh/models/model.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/train/checkpoint_writer.h"
#include "spikemesh/train/run_checkpoints.h"
#include "spikemesh/train/graph_step_cuda.h"
#include "spikemesh/train/pipeline_record.h"
#include "spikemesh/train/evaluation.h"
#include "spikemesh/train/run_dir.h"
#include "spikemesh/train/run_header.h"
#include "spikemesh/train/step_metrics.h"
#include "spikemesh/core/io_retry.h"
#include "spikemesh/core/process_stats.h"
#include "spikemesh/core/stop_signal.h"
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

}  // namespace

namespace {
// One training run: the parts built by the constructor (collective over the world), then
// run(): epochs of steps, evaluations, checkpoints, the end. Every method that communicates is
// collective over the world (or the layout's groups, which every rank joins in the same order).
class TrainingRun {
 public:
  ~TrainingRun() { stop_heartbeat(); }
  TrainingRun(const TrainConfig& cfg, const std::string& config_toml, Mesh* mesh, const LayoutPlan& layout_plan)
      : cfg_(cfg), toml_(config_toml), mesh_(mesh), world_(mesh ? &mesh->world() : nullptr),
        // data first: a bad file fails before anything is written (collective over the data group)
        ds_(open_run_dataset(cfg, data_group_of(mesh))) {
    if (hdf5_thread_allowed()) hdf5_thread_.emplace();
    set_up_parts(layout_plan);
    set_up_output();
  }
  TrainSummary run();

 private:
  void set_up_parts(const LayoutPlan& layout_plan);
  void set_up_output();
  void resume_or_start();
  void set_up_checkpoint_writer();
  void save();
  void wait_for_checkpoint();
  void evaluate();
  Batch load_batch(int64_t epoch, int64_t first, int64_t k);
  bool run_epoch();  // true: stop (a signal, or --max-steps)
  StepReport train_step(const Batch& b, Timer& wait);
  void record_step(StepReport& rep, int64_t epoch, double lr);
  void finish();
  void search_memopt(const std::vector<MicroBatch>& micro, const Ctx& ctx, const MemoptTrial* observed);
  bool limit_reached() const { return cfg_.max_steps > 0 && st_.step >= cfg_.max_steps; }
  void write_pipeline() {
    hdf5_call([&] { pipe_rec_->write(run_dir_ + "/pipeline.h5"); });
  }

  const TrainConfig& cfg_;
  const std::string& toml_;
  Mesh* mesh_;
  Comm* world_;
  H5Dataset ds_;
  TrainPlan plan_;
  RunParts parts_;
  std::unique_ptr<LrSchedule> sched_;
  std::unique_ptr<EpochSampler> sampler_;
  std::string run_dir_;
  bool root_ = false, tty_ = false;
  std::unique_ptr<RunLog> log_;
  std::unique_ptr<CheckpointManager> ckpt_;
  std::unique_ptr<CheckpointWriter> writer_;  // synchronous or in the background (--ckpt-async)
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<PipelineRecorder> pipe_rec_;
  std::unique_ptr<CudaGraphStep> graphs_;
  TrainState st_;
  std::string resume_from_;
  std::string data_error_;  // a batch no retry could read (on some rank): checkpoint, then end with this
  TrainSummary sum_;
  EvalSettings es_;
  int64_t last_eval_step_ = -1, first_step_ = 0;
  bool memopt_done_ = false;
  CommCounters comm_before_;
  ProgressWindow window_;
  Timer run_timer_;
  // Last: started first thing in the constructor's body (the dataset above was opened before
  // it) and gone, with its queue run, before any member that holds HDF5 objects is destroyed.
  // Not started where MPI allows calls from one thread only (HDF5 then runs on the caller's).
  std::optional<Hdf5Thread> hdf5_thread_;
};

void TrainingRun::set_up_parts(const LayoutPlan& layout_plan) {
  RunRequest req;
  agree_on_error(world_, [&] { req = run_request_for(cfg_, ds_.info(), layout_plan); });
  parts_ = setup_run(req, mesh_, [&](Model& m) { plan_ = plan_training(cfg_, ds_, m, layout_plan.batch); });
  sched_ = std::make_unique<LrSchedule>(plan_.lr);
  sampler_ = std::make_unique<EpochSampler>(ds_.size(Split::Train), plan_.global_batch, static_cast<uint64_t>(cfg_.seed),
                                            cfg_.shuffle, true);
  root_ = parts_.layout->groups().is_root();
  tty_ = root_ && isatty(STDOUT_FILENO);
  hdf5_call([&] { make_device_current(parts_.device); });  // the HDF5 thread stages device tensors
}

// The run directory, log, checkpoints (a resume), config.toml and metrics.h5 — only now, with
// every setting validated: a bad one writes nothing. Collective over the world.
void TrainingRun::set_up_output() {
  const Model& model = *parts_.model;
  std::string run_name = cfg_.run_name.empty() ? default_run_name(model.info.name) : cfg_.run_name;
  if (world_) run_name = broadcast_string(*world_, run_name, 0);  // rank 0's clock names it
  run_dir_ = cfg_.output + "/" + run_name;
  agree_on_error(world_, [&] {
    if (root_) make_dirs(run_dir_, "--output");
  });
  check_shared_directory(world_, run_dir_, "--output");  // checkpoints are written collectively
  if (world_ && comm_timeout_seconds() > 0) {  // so that a comm timeout can name ranks that stopped (a lost node)
    const std::string beats = run_dir_ + "/.heartbeat";
    agree_on_error(world_, [&] {
      if (root_) make_dirs(beats, "--output");
    });
    start_heartbeat(beats, mesh_->world_rank(), mesh_->world_size(), std::clamp(comm_timeout_seconds() / 4, 0.5, 30.0));
  }
  agree_on_error(world_, [&] { log_ = std::make_unique<RunLog>(run_dir_ + "/log.txt", root_); });
  ckpt_ = std::make_unique<CheckpointManager>(*parts_.layout, *parts_.optimizer, run_dir_, toml_, cfg_.precision,
                                              static_cast<int>(cfg_.keep));
  ckpt_->allow_nonfinite(cfg_.allow_nonfinite_checkpoint);
  set_up_checkpoint_writer();
  resume_or_start();
  agree_on_error(world_, [&] {  // written only now: a failed resume leaves the files as they were
    if (!root_) return;
    std::ofstream c(run_dir_ + "/config.toml");
    c << toml_;
    if (!c) SM_INPUT_ERROR(run_dir_ << "/config.toml: cannot write");
    metrics_ = hdf5_call([&] {
      return std::make_unique<MetricsWriter>(run_dir_ + "/metrics.h5", resume_from_.empty() ? -1 : st_.step);
    });
  });
  log_->line(header_line(cfg_, ds_, *parts_.layout, parts_, plan_, run_dir_));
  if (mesh_ && mesh_->world_size() > 1) log_->line(placement_lines(*mesh_, parts_.device));  // collective over the world
  std::string plan_text = parts_.layout->plan().describe();  // the resolved layout plan
  plan_text.pop_back();                                      // its last newline: log.line adds one
  log_->line(plan_text);
  sum_.run_dir = run_dir_;
  es_ = EvalSettings{cfg_.eval_batch_size > 0 ? cfg_.eval_batch_size : cfg_.batch_size, model.info.T, plan_.encoding,
                     parts_.dtype, parts_.activations, static_cast<uint64_t>(cfg_.seed), Split::Test, {}};
  es_.independent_reads = writer_->async();  // so that they interleave with a background write
  pipe_rec_ = std::make_unique<PipelineRecorder>(*parts_.layout, cfg_.parallel.pp_timeline_steps);  // <run>/pipeline.h5
  // --cuda-graphs (train/graph_step_cuda.h): replays the steady-state step on one GPU.
  graphs_ = std::make_unique<CudaGraphStep>(
      parse_cuda_graphs(cfg_.cuda_graphs),
      GraphConditions{parts_.device.is_cuda(), parts_.layout->groups().world_size(), parts_.layout->plan().mode,
                      plan_.accum, parts_.scaler.enabled(), parts_.layout->plan().options.memopt.enabled(),
                      plan_.augment && plan_.augment->mixes()});
  if (parts_.device.is_cuda()) log_->line("cuda graphs: " + graphs_->describe(), false);
}

void TrainingRun::resume_or_start() {
  st_.seed = cfg_.seed;
  const std::string latest = ckpt_->latest();
  resume_from_ = cfg_.resume == "auto" ? latest : cfg_.resume;
  if (cfg_.resume == "auto" && latest.empty())
    log_->line("resume auto: no complete checkpoint in " + run_dir_ + ", starting fresh");
  if (resume_from_.empty() && !latest.empty())
    SM_INPUT_ERROR(run_dir_ << " already holds checkpoints of an earlier run: continue it with --resume auto, "
                               "or choose another --run-name");
  if (!resume_from_.empty()) st_ = resume(*ckpt_, resume_from_, parts_.scaler, cfg_, plan_, root_, *log_);
  if (cfg_.init.empty()) return;
  if (!resume_from_.empty()) {
    log_->line("--init " + cfg_.init + " ignored: the run continues from its own checkpoint");
    return;
  }
  CheckpointInfo ci;
  try {
    ci = ckpt_->load_weights(cfg_.init);  // collective: every rank throws the same message
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Input) throw;
    SM_INPUT_ERROR("--init " << cfg_.init << ": " << e.what()
                             << " (--init takes a spikemesh checkpoint; turn a state dict into one with "
                                "`spikemesh ckpt import`)");
  }
  log_->line("initialised from " + cfg_.init + ": the parameters and buffers of model " + ci.model + " (step " +
             std::to_string(ci.state.step) + " of the run that wrote it); fresh optimizer, step 0");
}

// The checkpoint writer (train/checkpoint_writer.h): --ckpt-async resolved against the MPI
// library's thread level, the retry policy of rank 0 on every rank (the environment may
// differ). Collective over the world.
void TrainingRun::set_up_checkpoint_writer() {
  IoRetryPolicy policy = io_retry_policy();
  if (world_) {
    std::vector<int64_t> p{policy.attempts, static_cast<int64_t>(policy.first_delay_ms)};
    broadcast_i64s(*world_, p, 0);
    policy.attempts = static_cast<int>(p[0]);
    policy.first_delay_ms = static_cast<double>(p[1]);
  }
  Comm* group = parts_.layout->groups().checkpoint_comm();
  std::string why;
  bool async = false;
  agree_on_error(world_, [&] { async = resolve_ckpt_async(ckpt_async_mode_from_name(cfg_.ckpt_async), group, &why); });
  if (!why.empty()) log_->line("--ckpt-async " + cfg_.ckpt_async + ": " + why);
  writer_ = std::make_unique<CheckpointWriter>(*ckpt_, group, async, policy, root_,
                                               [this](const std::string& l) { log_->line(l, false); });
}

// Collective over the world: the checkpoint of this step, written now or in the background.
void TrainingRun::save() {
  if (metrics_) hdf5_call([&] { metrics_->flush(); });
  writer_->save(st_, parts_.scaler);
  if (!writer_->last_path().empty()) sum_.last_checkpoint = writer_->last_path();
}

// Collective over the world: waits for the checkpoint written in the background, if any.
void TrainingRun::wait_for_checkpoint() {
  writer_->wait();
  if (!writer_->last_path().empty()) sum_.last_checkpoint = writer_->last_path();
}

void TrainingRun::evaluate() {
  const EvalOutcome e = evaluate_split(*parts_.layout, ds_, es_);
  if (metrics_)
    hdf5_call([&] { metrics_->log_eval(st_.step, st_.epoch, e.loss, e.accuracy, e.firing_rate, e.layer_names); });
  sum_.final_test_accuracy = e.accuracy;
  sum_.final_test_loss = e.loss;
  last_eval_step_ = st_.step;
  std::ostringstream os;
  os << "eval  step " << st_.step << " | test loss " << std::fixed << std::setprecision(4) << e.loss
     << " | test accuracy " << std::setprecision(2) << 100.0 * e.accuracy << "% (" << e.correct << "/" << e.count << ")";
  log_->line(os.str());
}

// Batch k of the epoch's remaining batches (the prefetch thread): micro-step m of data rank r
// holds part m·dp + r of the global batch.
Batch TrainingRun::load_batch(int64_t epoch, int64_t first, int64_t k) {
  Timer t;
  Batch b;
  const LayoutGroups& groups = parts_.layout->groups();
  const int dp_rank = groups.data_rank(), dp_size = groups.data_size();
  make_device_current(parts_.device);  // this thread pins memory for the run's device, not for GPU 0
  for (int64_t m = 0; m < plan_.accum; ++m) {
    const int part = static_cast<int>(m * dp_size + dp_rank), parts_n = static_cast<int>(plan_.accum * dp_size);
    auto idx = sampler_->batch_indices(epoch, first + k, part, parts_n);
    b.micro.push_back(load_micro(ds_, Split::Train, idx, parts_.model->info.T, plan_.encoding, parts_.dtype,
                                 static_cast<uint64_t>(cfg_.seed), epoch, parts_.device.is_cuda(), plan_.augment.get()));
    b.micro.back().sample_offset = part * plan_.batch;
  }
  b.data_ms = t.ms();
  return b;
}

// memopt (train/memopt_search.h) after the run's first step, on its batch: the search of
// levels 2-4 or a budget from that step's measurement, then what every unit runs, in the log.
// Collective over the layout's groups.
void TrainingRun::search_memopt(const std::vector<MicroBatch>& micro, const Ctx& ctx, const MemoptTrial* observed) {
  Layout& layout = *parts_.layout;
  if (!layout.plan().options.memopt.enabled()) return;
  const MemoptSearchResult r = optimize_memopt(layout, micro, ctx, observed);
  if (r.searched) {
    std::ostringstream os;
    os << "memopt search: " << r.trial_steps << " trial steps, " << static_cast<int64_t>(r.optimize_ms)
       << " ms, peak " << r.peak_mb << " MB";
    log_->line(os.str(), true);
    for (const std::string& l : r.log) log_->line("  " + l, true);
  }
  log_->line("memopt per unit (world rank 0's stage):\n" + describe_memopt(layout.stage(), layout.memopt()), true);
}

// One optimizer step on a prefetched batch (collective over the layout's groups).
StepReport TrainingRun::train_step(const Batch& b, Timer& wait) {
  Layout& layout = *parts_.layout;
  StepReport rep;
  rep.wait_ms = wait.ms();
  Ctx ctx;
  ctx.seed = static_cast<uint64_t>(cfg_.seed);
  ctx.step = st_.step;
  parts_.optimizer->set_lr(sched_->lr_at(st_.step));
  Timer step_t;
  layout.sync_buffers();  // every rank steps with dp rank 0's BN statistics (unless synced BN)
  std::vector<MicroBatch> micro;
  for (const MicroBatch& m : b.micro) micro.push_back(to_device(m, parts_.device, parts_.activations));
  Allocator& alloc = allocator_for(parts_.device);  // this step's peak, then the run's again
  const size_t run_peak = alloc.peak_bytes();
  alloc.reset_peak();
  // memopt levels 2-4 / a budget: the search starts from a measured step, this process's second
  // (its first creates the optimizer's state and the kernels' first-call caches while it runs,
  // which no single figure can add to its segments' measures), or its first when that is the last
  const bool settle_memopt = !memopt_done_ && (st_.step > first_step_ || st_.step + 1 >= plan_.total_steps);
  std::unique_ptr<MemoptStepObserver> observer;
  if (settle_memopt && memopt_search_needed(layout)) observer = std::make_unique<MemoptStepObserver>(layout);
  rep.r = graphs_->step(layout, *parts_.optimizer, micro, ctx, StepOptions{cfg_.clip_grad_norm, &parts_.scaler});
  rep.step_peak_mb = alloc.peak_bytes() / 1048576.0;
  if (settle_memopt) {
    memopt_done_ = true;
    const MemoptTrial observed = observer ? observer->finish() : MemoptTrial{};
    search_memopt(micro, ctx, observer ? &observed : nullptr);
  }
  alloc.raise_peak(run_peak);
  rep.step_ms = step_t.ms() + rep.wait_ms;
  rep.load_ms = b.data_ms;
  return rep;
}

// After a step: the pipeline timeline, statistics, the metric reduction (every rank agrees on
// the stop too), replica checks, metrics.h5 and the progress line. Collective over the world.
void TrainingRun::record_step(StepReport& rep, int64_t epoch, double lr) {
  Layout& layout = *parts_.layout;
  if (pipe_rec_->active()) {
    pipe_rec_->after_step(st_.step);  // collective over pp
    if (!pipe_rec_->active()) write_pipeline();
  }
  for (const LayerStat& s : layout.layer_stats()) {  // pp: every stage's, gathered
    rep.firing_rate.push_back(s.value);
    rep.layer_names.push_back(s.layer);
  }
  rep.peak_mb = allocator_for(parts_.device).peak_bytes() / 1048576.0;
  rep.rss_mb = peak_rss_mb();
  const ProcessStats ps = process_stats();
  rep.rss_now_mb = ps.rss_mb;
  rep.open_fds = ps.open_fds;
  rep.threads = ps.threads;
  const CommCounters now = layout.groups().all_comm_counters();
  rep.comm_ms = 1000.0 * (now.total_wait_seconds() - comm_before_.total_wait_seconds());
  rep.comm_mb = static_cast<double>(now.total_bus_bytes() - comm_before_.total_bus_bytes()) / 1048576.0;
  rep.stop = stop_signal() != 0;
  rep.ckpt_failed = writer_->failed();
  rep.ckpt_window_open = writer_->in_flight() && !writer_->window_waiting();
  if (!layout.counts_in_metrics()) rep.r.count = rep.r.correct = 0;  // tp peers: tp rank 0 counts
  reduce_step_report(layout.groups().metrics_comm(), rep);  // collective: every rank agrees on the stop too
  if (cfg_.parallel.check_replicas > 0 && st_.step % cfg_.parallel.check_replicas == 0)
    layout.check_replicas("parameters after step " + std::to_string(st_.step));
  comm_before_ = layout.groups().all_comm_counters();
  window_.add(rep);
  if (metrics_) {
    std::map<std::string, double> row = step_row(rep, st_.step, epoch, lr, layout.groups().distributed());
    if (parts_.scaler.enabled()) {  // fp16: the loss scale after this step and the steps skipped so far
      row["loss_scale"] = parts_.scaler.scale();
      row["skipped_steps"] = static_cast<double>(parts_.scaler.skipped_steps());
    }
    hdf5_call([&] { metrics_->log_step(row, rep.firing_rate, rep.layer_names); });
  }
  if (st_.step % cfg_.log_every == 0 || st_.step == plan_.total_steps) {
    const std::string line = window_.line(epoch, cfg_.epochs, st_.step, plan_.total_steps, plan_.global_batch);
    if (tty_) {
      std::printf("\r%s   ", line.c_str());
      std::fflush(stdout);
    }
    log_->line(line, !tty_);
  }
}

bool TrainingRun::run_epoch() {
  const int64_t epoch = st_.epoch, first = st_.batch_in_epoch;
  int64_t n_batches = plan_.per_epoch - first;
  if (cfg_.max_steps > 0) n_batches = std::min(n_batches, cfg_.max_steps - st_.step);
  bool epoch_done = false, stop = false;
  {
    Prefetcher<Batch> pf([&, epoch, first](int64_t k) { return load_batch(epoch, first, k); }, n_batches, 2);
    Timer wait;
    for (;;) {
      std::optional<Batch> bt;
      try {  // collective over the world: a rank without its batch stops every rank at this step
        agree_on_error(world_, [&] { bt = pf.next(); });
      } catch (const Error& e) {
        if (!io_gave_up(e)) throw;  // a NaN sample, a device failure...: no checkpoint can help
        data_error_ = e.what();
        stop = true;
        break;
      }
      if (!bt) break;
      const double lr = sched_->lr_at(st_.step);
      const bool writing = writer_->in_flight();
      StepReport rep = train_step(*bt, wait);
      rep.ckpt_writing = writing;
      ++st_.step;
      if (++st_.batch_in_epoch == plan_.per_epoch) {
        ++st_.epoch;
        st_.batch_in_epoch = 0;
        epoch_done = true;
      }
      record_step(rep, epoch, lr);
      if (rep.ckpt_failed) wait_for_checkpoint();  // every rank: rethrows the write's error
      // every rank's background write waits to finish (its collective close): hold still while it does
      if (writer_->in_flight() && !rep.ckpt_window_open) wait_for_checkpoint();
      writer_->poll();                             // a background write that ended: its log line
      stop = rep.stop;
      if (stop || limit_reached()) break;
      // (the last step's checkpoint is finish()'s, after the final evaluation)
      if (cfg_.ckpt_every > 0 && st_.step % cfg_.ckpt_every == 0 && st_.step != plan_.total_steps) save();
      wait.reset();
    }
  }  // prefetcher joined
  if (tty_) std::printf("\n");
  if (epoch_done) evaluate();  // an epoch's evaluation belongs to it, even when a stop follows
  return stop;
}

// The end of the run: a stop's checkpoint, or the final evaluation and checkpoint.
void TrainingRun::finish() {
  if (!data_error_.empty()) {  // every rank is here with the same error: checkpoint what was trained, then end
    const std::string step = std::to_string(st_.step);
    log_->line("a training batch could not be read after the retries: checkpointing at step " + step + " before ending");
    save();
    wait_for_checkpoint();
    // An Input error (the environment's, like a missing file): rank 0 prints it once, every rank exits 1.
    throw Error(ErrorKind::Input, data_error_ + " (checkpoint of step " + step + " written: " +
                                         sum_.last_checkpoint + "; rerun with --resume auto once the file system is back)");
  }
  if (sum_.interrupted) {
    const int sig = stop_signal();
    log_->line(sig ? "stop requested (signal " + std::to_string(sig) + "): checkpointing at step " + std::to_string(st_.step)
                   : "stop requested (signal on another rank): checkpointing at step " + std::to_string(st_.step));
    if (st_.step == plan_.total_steps && last_eval_step_ != st_.step) evaluate();  // the run is complete anyway
    save();
    wait_for_checkpoint();
  } else if (st_.step == first_step_ && first_step_ > 0 && st_.step == plan_.total_steps) {
    // Resumed from the final checkpoint of a finished run: it already holds the final
    // evaluation (every checkpoint at the last step is written after one), so add nothing.
    log_->line("nothing to do: the run is already complete at step " + std::to_string(st_.step));
  } else {
    if (last_eval_step_ != st_.step) evaluate();
    save();
    wait_for_checkpoint();
  }
  if (pipe_rec_->active()) write_pipeline();  // fewer steps than --pp-timeline-steps
  sum_.steps = st_.step;
  std::ostringstream os;
  os << "done: " << st_.step << " steps in " << format_duration(run_timer_.ms() / 1000.0);
  if (sum_.final_test_accuracy >= 0)
    os << ", test accuracy " << std::fixed << std::setprecision(2) << 100.0 * sum_.final_test_accuracy << "%";
  os << "; output in " << run_dir_;
  log_->line(os.str());
}

// epoch → step → microbatches → layout step → metrics → checkpoint.
TrainSummary TrainingRun::run() {
  allocator_for(parts_.device).reset_peak();  // the device's (CPU: the host allocator)
  comm_before_ = parts_.layout->groups().all_comm_counters();
  run_timer_.reset();
  first_step_ = st_.step;  // > 0 when resumed
  bool stop = false;
  while (!stop && st_.epoch < cfg_.epochs && !limit_reached()) stop = run_epoch();
  sum_.interrupted = stop;
  finish();
  return sum_;
}
}  // namespace

TrainSummary run_training(const TrainConfig& cfg, const std::string& config_toml, Mesh* mesh,
                          const LayoutPlan& layout_plan) {
  TrainingRun run(cfg, config_toml, mesh, layout_plan);
  return run.run();
}

}  // namespace sm
