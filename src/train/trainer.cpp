// trainer.cpp — the training loop (DESIGN §2 data path), one rank or data parallel.
// Invariants: with no mesh the run makes no MPI call; with a mesh every rank executes the
// same sequence of collectives (checks, strategy hooks, metric reductions, stop agreement,
// evaluation, checkpoints), so a failure or a signal on one rank never leaves another waiting.
// Devices: each rank runs on its --device (a GPU: local_rank % visible); batches are prefetched
// on the host (pinned for a GPU) and moved to the device by the main thread (batch_io.h).
#include "spikemesh/train/trainer.h"

#include <omp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "spikemesh/app/model_options.h"
#include "spikemesh/comm/comm_collectives.h"
#include "spikemesh/comm/mesh.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/cuda_amp.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/log.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/data/encoder.h"
#include "spikemesh/data/h5_dataset.h"
#include "spikemesh/data/prefetcher.h"
#include "spikemesh/data/sampler.h"
#include "spikemesh/io/checkpoint.h"
#include "spikemesh/io/h5_lock.h"
#include "spikemesh/io/metrics.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/spec_loader.h"
#include "spikemesh/parallel/dist_run.h"
#include "spikemesh/parallel/replica_check.h"
#include "spikemesh/parallel/strategy.h"
#include "spikemesh/train/lr_schedule.h"
#include "spikemesh/train/optimizer.h"
#include "spikemesh/train/train_step.h"
#include "batch_io.h"

namespace sm {

namespace {
std::atomic<int> g_stop{0};
void on_stop_signal(int sig) { g_stop.store(sig); }

struct Batch {
  std::vector<MicroBatch> micro;  // x [T, n, ...] model dtype; y [n] i64; one per micro-step
  double data_ms = 0;
};

// Writes to stdout (rank 0) and to the run's log.txt; inactive on other ranks.
class RunLog {
 public:
  RunLog(const std::string& path, bool active) {
    if (!active) return;
    f_.open(path, std::ios::app);
    if (!f_) SM_INPUT_ERROR(path << ": cannot write the run log (" << std::strerror(errno) << ")");
  }
  void line(const std::string& s, bool to_stdout = true) {
    if (!f_.is_open()) return;
    if (to_stdout) SM_INFO(s);
    f_ << s << "\n";
    f_.flush();
  }

 private:
  std::ofstream f_;
};

void make_dirs(const std::string& path, const std::string& flag) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0775) != 0 && errno != EEXIST)
      SM_INPUT_ERROR(flag << " " << path << ": cannot create " << cur << " (" << std::strerror(errno) << ")");
  }
  if (access(path.c_str(), W_OK) != 0)
    SM_INPUT_ERROR(flag << " " << path << ": directory is not writable (" << std::strerror(errno) << ")");
}

std::string default_run_name(const std::string& model_name) {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&now));
  return model_name + "-" + buf;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

std::string fmt_duration(double s) {
  std::ostringstream os;
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) os << t / 3600 << "h" << std::setw(2) << std::setfill('0') << (t % 3600) / 60 << "m";
  else if (t >= 60) os << t / 60 << "m" << std::setw(2) << std::setfill('0') << t % 60 << "s";
  else os << t << "s";
  return os.str();
}

void configure_threads(const TrainConfig& c, bool multi_rank) {
  int threads = static_cast<int>(c.threads);
  // Several ranks: main.cpp already divided the node's cores among its ranks.
  if (threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr && !multi_rank) threads = omp_get_num_procs();
  if (threads > 0) omp_set_num_threads(threads);
}

DType fsdp_dtype(const std::string& name, DType model) {
  if (name.empty()) return model;
  return name == "fp64" ? DType::F64 : name == "bf16" ? DType::BF16 : DType::F32;
}
}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGPIPE, SIG_IGN);  // `spikemesh train | head` must not kill the run mid-checkpoint
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}
bool stop_requested() { return g_stop.load() != 0; }
void request_stop_for_testing() { g_stop.store(SIGUSR1); }
void clear_stop_request() { g_stop.store(0); }

TrainSummary run_training(const TrainConfig& cfg, const std::string& config_toml, Mesh* mesh) {
  const bool dist = mesh != nullptr;
  Comm* world = dist ? &mesh->world() : nullptr;
  Comm* dp = dist ? &mesh->dp() : nullptr;
  const int dp_rank = dist ? dp->rank() : 0, dp_size = dist ? dp->size() : 1;
  const bool root = !dist || world->rank() == 0;
  // Work that fails identically (or on some ranks only): in a multi-rank run every rank gets
  // the first failing rank's message. `f` must not communicate.
  auto agreed = [&](const std::function<void()>& f) {
    if (dist)
      collective_check(*world, f);
    else
      f();
  };
  agreed([&] {
    if (dist && (mesh->shape().tp > 1 || mesh->shape().pp > 1))
      SM_INPUT_ERROR("--mesh-shape " << mesh->shape().str()
                                     << ": tensor and pipeline parallelism are not implemented yet (use tp = pp = 1)");
    if (dist && cfg.distributed_mode == "none")
      SM_INPUT_ERROR("--distributed-mode none runs on one rank; with " << world->size()
                                                                       << " ranks use --distributed-mode dp or fsdp");
  });
  // The device: rank r of a node takes GPU local_rank % visible (--device cuda, or auto when
  // one is visible); fp64, the exact reference, runs on the CPU. Any rank's failure (no GPU,
  // a precision the device cannot run) is every rank's, before any GPU or checkpoint work.
  const Precision prec = precision_from_name(cfg.precision);
  Device dev = Device::cpu();
  agreed([&] {
    DeviceRequest req = device_request_from_name(cfg.device);
    if (req == DeviceRequest::Auto && prec == Precision::FP64) req = DeviceRequest::Cpu;
    if (req == DeviceRequest::Auto && (prec == Precision::BF16 || prec == Precision::FP16) && cuda_device_count() == 0)
      SM_INPUT_ERROR("--precision " << cfg.precision << " needs a GPU (" << cuda_unavailable_reason()
                                    << "); the CPU runs fp32 or fp64");
    dev = select_device(req, dist ? mesh->local_rank() : 0);
    check_precision_for_device(prec, dev);
  });
  configure_threads(cfg, dist);
  const DType dt = master_dtype(prec);        // parameters, gradients, optimizer state
  const DType act = activation_dtype(prec);   // activations (= dt on the CPU)
  const bool gpu = dev.is_cuda();

  // Data first: a bad file fails before anything is written (collective open: rank 0 checks).
  H5Dataset ds = dist ? H5Dataset::open(cfg.data, world->mpi_comm()) : H5Dataset::open(cfg.data);
  const DatasetInfo& di = ds.info();

  const int64_t accum = cfg.grad_accum;
  int64_t batch = cfg.batch_size;  // per rank, per micro-step
  std::unique_ptr<Model> model;
  std::optional<LrSchedule> sched;
  OptimizerConfig oc;
  int64_t per_epoch = 0, total_steps = 0;
  agreed([&] {
    ModelSelection sel;
    sel.model = cfg.model_spec.empty() ? cfg.model : "";
    sel.spec = cfg.model_spec;
    sel.vars = cfg.vars;
    sel.dropout = cfg.dropout;
    sel.T = static_cast<int>(cfg.T);
    if (di.is_events()) {
      if (cfg.T > 0 && cfg.T != di.T)
        SM_INPUT_ERROR("--T " << cfg.T << " but " << cfg.data << " holds event frames with T = " << di.T);
      sel.T = di.T;
    }
    model = sel.build();
    const ModelInfo& mi = model->info;
    Shape want = mi.input_shape;
    Shape have = di.is_events() ? Shape(di.sample_shape.begin() + 1, di.sample_shape.end()) : di.sample_shape;
    if (want != have)
      SM_INPUT_ERROR(cfg.data << ": samples are " << shape_str(have) << " per time step but model '" << mi.name
                              << "' expects " << shape_str(want));
    if (di.num_classes != mi.num_classes)
      SM_INPUT_ERROR(cfg.data << " has " << di.num_classes << " classes but model '" << mi.name << "' outputs "
                              << mi.num_classes);
    encoding_from_name(cfg.encoding);
    if (cfg.global_batch_size > 0) {
      if (cfg.global_batch_size % (dp_size * accum) != 0)
        SM_INPUT_ERROR("--global-batch-size " << cfg.global_batch_size << " is not divisible by dp " << dp_size
                                              << " x --grad-accum " << accum << " = " << dp_size * accum);
      batch = cfg.global_batch_size / (dp_size * accum);
    }
    const int64_t global = batch * dp_size * accum;
    if (!dist && accum == 1 && ds.size(Split::Train) < batch)
      SM_INPUT_ERROR(cfg.data << ": " << ds.size(Split::Train) << " training samples, fewer than one batch of "
                              << batch);
    if (ds.size(Split::Train) < global)
      SM_INPUT_ERROR(cfg.data << ": " << ds.size(Split::Train) << " training samples, fewer than one global batch of "
                              << global << " (--batch-size " << batch << " per rank x dp " << dp_size
                              << " x --grad-accum " << accum << ")");
    oc.name = cfg.optimizer;
    oc.lr = cfg.lr;
    oc.weight_decay = cfg.weight_decay;
    oc.momentum = cfg.momentum;
    oc.nesterov = cfg.nesterov;
    make_optimizer(oc, {});  // validates the hyper-parameters before any state exists
    per_epoch = ds.size(Split::Train) / global;
    total_steps = per_epoch * cfg.epochs;
    if (cfg.max_steps > 0) total_steps = std::min(total_steps, cfg.max_steps);
    LrScheduleConfig lc;
    lc.kind = cfg.lr_schedule;
    lc.base_lr = cfg.lr;
    lc.warmup_steps = cfg.warmup_steps;
    lc.warmup_start_factor = 1.0 / (cfg.warmup_steps + 1);  // the first step already learns
    lc.total_steps = std::max<int64_t>(1, total_steps - cfg.warmup_steps);
    lc.step_size = cfg.lr_step_size;
    lc.gamma = cfg.lr_gamma;
    lc.min_lr = cfg.min_lr;
    sched.emplace(lc);
  });
  const ModelInfo& mi = model->info;
  const int T = mi.T;
  const Encoding enc = encoding_from_name(cfg.encoding);
  const int64_t global_batch = batch * dp_size * accum;

  // Run directory: rank 0 names it (the default carries the time).
  std::string run_name = cfg.run_name.empty() ? default_run_name(mi.name) : cfg.run_name;
  if (dist) run_name = broadcast_string(*world, run_name, 0);
  const std::string run_dir = cfg.output + "/" + run_name;

  model->finalize(dt, dev, static_cast<uint64_t>(cfg.seed));
  LossScaler scaler = LossScaler::for_precision(prec);  // dynamic for fp16 only
  std::unique_ptr<ParallelStrategy> strategy;
  std::unique_ptr<CommCollectives> bn_sync;
  if (dist) {
    StrategyOptions so;
    so.mode = cfg.distributed_mode;
    so.sharding = cfg.optimizer_sharding;
    so.bucket_mb = cfg.bucket_mb;
    so.reshard_after_forward = cfg.fsdp_reshard_after_forward;
    so.param_dtype = fsdp_dtype(cfg.fsdp_param_dtype, dt);
    so.reduce_dtype = fsdp_dtype(cfg.fsdp_reduce_dtype, dt);
    strategy = make_strategy(*model, *dp, so);  // collective over dp: identical replicas checked
    if (cfg.sync_bn) bn_sync = std::make_unique<CommCollectives>(*dp);
  }
  auto opt = make_optimizer(oc, strategy ? strategy->optimizer_params() : model->params());
  EpochSampler sampler(ds.size(Split::Train), global_batch, static_cast<uint64_t>(cfg.seed), cfg.shuffle, true);
  // Only now, with every setting validated (optimizer, schedule): a bad one writes nothing.
  std::unique_ptr<RunLog> run_log;
  agreed([&] {
    if (root) make_dirs(run_dir, "--output");
    run_log = std::make_unique<RunLog>(run_dir + "/log.txt", root);
  });
  RunLog& log = *run_log;

  TrainState st;
  st.seed = cfg.seed;
  std::string resume_from;
  const std::string latest = dist ? find_latest_checkpoint(world->mpi_comm(), run_dir) : find_latest_checkpoint(run_dir);
  if (cfg.resume == "auto") {
    resume_from = latest;
    if (resume_from.empty()) log.line("resume auto: no complete checkpoint in " + run_dir + ", starting fresh");
  } else if (!cfg.resume.empty()) {
    resume_from = cfg.resume;
  }
  if (resume_from.empty() && !latest.empty())
    SM_INPUT_ERROR(run_dir << " already holds checkpoints of an earlier run: continue it with --resume auto, "
                              "or choose another --run-name");
  const std::string mesh_text =
      dist ? mesh->shape().str() + " " + strategy->name() + (cfg.sync_bn ? " sync-bn" : "") : "dp=1 tp=1 pp=1";
  if (!resume_from.empty()) {
    CheckpointInfo ci;
    if (dist) {
      std::vector<TensorShard> shards = strategy->checkpoint_shards(*opt, false);
      ci = load_checkpoint_sharded(world->mpi_comm(), resume_from, shards, checkpoint_meta_of(*model, *opt));
      strategy->after_load();
      opt->set_step_count(ci.optimizer_step);
    } else {
      ci = load_checkpoint(resume_from, *model, *opt);
    }
    st = ci.state;
    if (!scaler.enabled()) st.loss_scale = 0;  // an fp16 run resumed in another precision drops the scale
    if (scaler.enabled() && st.loss_scale > 0)  // fp16: continue with the saved loss scale
      scaler.set_state(st.loss_scale, st.loss_scale_finite_in_row, st.skipped_steps);
    if (st.seed != cfg.seed && root)
      SM_WARN("resuming with --seed " << cfg.seed << " but " << resume_from << " was written with seed " << st.seed
                                      << ": data order and dropout now differ from the original run");
    st.seed = cfg.seed;
    const int64_t was = checkpoint_global_batch(ci.config_toml, ci.mesh);
    if (st.batch_in_epoch >= per_epoch)
      SM_INPUT_ERROR(resume_from << ": its data cursor (batch " << st.batch_in_epoch << " of the epoch) is beyond this run's "
                                 << per_epoch << " global batches per epoch; resume with the global batch it was "
                                 << "trained with" << (was > 0 ? " (" + std::to_string(was) + ", --global-batch-size)" : ""));
    if (was > 0 && was != global_batch && root)
      SM_WARN("resuming a run trained with global batch " << was << " with global batch " << global_batch
                                                         << ": the data order differs from the original run");
    log.line("resumed from " + resume_from + " at step " + std::to_string(st.step) + " (epoch " +
             std::to_string(st.epoch + 1) + ", batch " + std::to_string(st.batch_in_epoch) + ")");
  }
  // Written only now: a resume that fails (bad or foreign checkpoint) leaves the run's files as they were.
  std::unique_ptr<MetricsWriter> metrics;
  agreed([&] {
    if (!root) return;
    std::ofstream c(run_dir + "/config.toml");
    c << config_toml;
    if (!c) SM_INPUT_ERROR(run_dir << "/config.toml: cannot write");
    metrics = std::make_unique<MetricsWriter>(run_dir + "/metrics.h5", resume_from.empty() ? -1 : st.step);
  });

  std::ostringstream hdr;
  hdr << "spikemesh train: model " << mi.name << " (" << model->num_parameters() << " parameters, T " << T << ", "
      << cfg.precision << "), data " << cfg.data << " (" << ds.size(Split::Train) << " train / "
      << ds.size(Split::Test) << " test), batch " << batch;
  if (dist || accum > 1)
    hdr << " per rank (global " << global_batch << " = " << batch << " x dp " << dp_size << " x accum " << accum << ")";
  hdr << ", " << per_epoch << " steps/epoch, ";
  if (gpu) hdr << dev.str() << (act != dt ? std::string(" (") + dtype_name(act) + " activations)" : "");
  else hdr << omp_get_max_threads() << " threads";
  if (dist) hdr << " per rank, " << world->size() << " ranks (" << mesh_text << ")";
  hdr << ", output " << run_dir;
  log.line(hdr.str());

  TrainSummary sum;
  sum.run_dir = run_dir;
  const bool tty = root && isatty(STDOUT_FILENO);
  const int64_t eval_bs = cfg.eval_batch_size > 0 ? cfg.eval_batch_size : cfg.batch_size;
  std::vector<std::string> layer_names;
  // Without --sync-bn every rank updates its own BN running statistics; like DDP's
  // broadcast_buffers, dp rank 0's are copied to every rank before each step and evaluation,
  // so all ranks use (and checkpoints hold) the same statistics.
  auto sync_buffers = [&] {
    if (dist && !cfg.sync_bn) broadcast_buffers(*model, *dp, 0);
  };

  auto save = [&]() {
    if (scaler.enabled()) {
      st.loss_scale = scaler.scale();
      st.loss_scale_finite_in_row = scaler.finite_in_row();
      st.skipped_steps = scaler.skipped_steps();
    }
    std::lock_guard<std::mutex> l(hdf5_mutex());
    if (metrics) metrics->flush();
    if (dist) {
      CheckpointMeta meta = checkpoint_meta_of(*model, *opt);
      meta.state = st;
      meta.precision = cfg.precision;
      meta.mesh = mesh_text;
      meta.config_toml = config_toml;
      sum.last_checkpoint = save_checkpoint_sharded(world->mpi_comm(), run_dir, strategy->checkpoint_shards(*opt, true),
                                                    meta, static_cast<int>(cfg.keep));
    } else {
      sum.last_checkpoint =
          save_checkpoint(run_dir, *model, *opt, st, config_toml, cfg.precision, static_cast<int>(cfg.keep));
    }
    log.line("checkpoint " + sum.last_checkpoint, false);
  };

  auto evaluate = [&]() {
    sync_buffers();
    EpochSampler es(ds.size(Split::Test), eval_bs * dp_size, 0, false, false);
    Ctx ctx;
    ctx.seed = cfg.seed;
    ctx.training = false;
    double loss_sum = 0;
    int64_t correct = 0, count = 0;
    std::vector<double> fr;
    if (dist) {  // every rank needs the layer count before the reduction, whatever its data
      layer_names.clear();
      for (auto& s : model->stats()) layer_names.push_back(s.layer);
      fr.assign(layer_names.size(), 0.0);
    }
    for (int64_t b = 0; b < es.batches_per_epoch(); ++b) {
      auto idx = es.batch_indices(0, b, dp_rank, dp_size);
      StepResult r;
      if (dist) {  // collective read (possibly of nothing), then this rank's part of the batch
        Tensor raw, y, x;
        ds.read_collective(Split::Test, idx, raw, y);
        if (!idx.empty()) {
          MicroBatch d = to_device(MicroBatch{encode(ds, raw, idx, T, enc, dt, cfg.seed, 0), y, 0}, dev, act);
          x = d.x;
          y = d.y;
        }
        r = eval_step_micro(*model, x, y, ctx, strategy.get());
        if (r.count == 0) continue;
      } else {
        MicroBatch bt = to_device(load_micro(ds, Split::Test, idx, T, enc, dt, cfg.seed, 0, gpu), dev, act);
        r = eval_step(*model, bt.x, bt.y, ctx);
      }
      loss_sum += r.loss * r.count;
      correct += r.correct;
      count += r.count;
      auto stats = model->stats();
      if (fr.empty()) {
        fr.assign(stats.size(), 0.0);
        layer_names.clear();
        for (auto& s : stats) layer_names.push_back(s.layer);
      }
      for (size_t i = 0; i < stats.size() && i < fr.size(); ++i) fr[i] += stats[i].value * r.count;
    }
    if (dist) {
      layer_names.resize(fr.size());
      std::vector<double> v{loss_sum, static_cast<double>(correct), static_cast<double>(count)};
      v.insert(v.end(), fr.begin(), fr.end());
      all_reduce_doubles(*world, v, ReduceOp::Sum);
      loss_sum = v[0];
      correct = static_cast<int64_t>(v[1]);
      count = static_cast<int64_t>(v[2]);
      std::copy(v.begin() + 3, v.end(), fr.begin());
    }
    for (double& f : fr) f /= std::max<int64_t>(1, count);
    double acc = count ? static_cast<double>(correct) / count : 0.0;
    double loss = count ? loss_sum / count : 0.0;
    if (metrics) {
      std::lock_guard<std::mutex> l(hdf5_mutex());
      metrics->log_eval(st.step, st.epoch, loss, acc, fr, layer_names);
    }
    sum.final_test_accuracy = acc;
    sum.final_test_loss = loss;
    std::ostringstream os;
    os << "eval  step " << st.step << " | test loss " << std::fixed << std::setprecision(4) << loss << " | test accuracy "
       << std::setprecision(2) << 100.0 * acc << "% (" << correct << "/" << count << ")";
    log.line(os.str());
  };

  Timer run_timer;
  double window_samples = 0, window_ms = 0, window_loss = 0;
  int64_t window_correct = 0, window_count = 0, window_steps = 0, last_eval_step = -1;
  Allocator& mem = allocator_for(dev);  // the device's (CPU: the host allocator)
  mem.reset_peak();
  CommCounters comm_before = dist ? dp->counters() : CommCounters{};
  bool stop = false;
  auto limit_reached = [&] { return cfg.max_steps > 0 && st.step >= cfg.max_steps; };
  const int64_t first_step = st.step;  // > 0 when resumed
  while (!stop && st.epoch < cfg.epochs && !limit_reached()) {
    const int64_t epoch = st.epoch, first = st.batch_in_epoch;
    int64_t n_batches = per_epoch - first;
    if (cfg.max_steps > 0) n_batches = std::min(n_batches, cfg.max_steps - st.step);
    bool epoch_done = false;
    {
      Prefetcher<Batch> pf(
          [&, epoch, first](int64_t k) {
            Timer t;
            Batch b;
            make_device_current(dev);  // this thread pins memory for `dev`, not for GPU 0
            for (int64_t m = 0; m < accum; ++m) {
              // Micro-step m of dp rank r holds part m·dp + r of the global batch.
              const int part = static_cast<int>(m * dp_size + dp_rank), parts = static_cast<int>(accum * dp_size);
              auto idx = sampler.batch_indices(epoch, first + k, part, parts);
              b.micro.push_back(
                  load_micro(ds, Split::Train, idx, T, enc, dt, static_cast<uint64_t>(cfg.seed), epoch, gpu));
              b.micro.back().sample_offset = part * batch;
            }
            b.data_ms = t.ms();
            return b;
          },
          n_batches, 2);
      Timer wait;
      while (auto bt = pf.next()) {
        double wait_ms = wait.ms();
        Ctx ctx;
        ctx.seed = static_cast<uint64_t>(cfg.seed);
        ctx.step = st.step;
        ctx.bn_sync = bn_sync.get();
        const double lr = sched->lr_at(st.step);
        opt->set_lr(lr);
        Timer step_t;
        sync_buffers();
        StepOptions so;
        so.clip_norm = cfg.clip_grad_norm;
        so.strategy = strategy.get();
        so.scaler = &scaler;
        std::vector<MicroBatch> micro;
        for (const MicroBatch& m : bt->micro) micro.push_back(to_device(m, dev, act));
        StepResult r = train_step_micro(*model, *opt, micro, ctx, so);
        double step_ms = step_t.ms() + wait_ms;
        ++st.step;
        ++st.batch_in_epoch;
        if (st.batch_in_epoch == per_epoch) {
          ++st.epoch;
          st.batch_in_epoch = 0;
          epoch_done = true;
        }
        std::vector<double> fr;
        std::vector<std::string> names;
        for (auto& s : model->stats()) {
          fr.push_back(s.value);
          names.push_back(s.layer);
        }
        double peak_mb = mem.peak_bytes() / 1048576.0, rss_mb = peak_rss_mb(), load_ms = bt->data_ms;
        double comm_ms = 0, comm_mb = 0;
        bool local_stop = stop_requested();
        if (dist) {  // metrics over the ranks: sums (loss, counts, firing rates) and maxima (times, memory)
          const CommCounters now = dp->counters();
          comm_ms = 1000.0 * (now.total_wait_seconds() - comm_before.total_wait_seconds());
          comm_mb = static_cast<double>(now.total_bus_bytes() - comm_before.total_bus_bytes()) / 1048576.0;
          std::vector<double> s{r.loss * r.count, double(r.correct), double(r.count)};
          for (double f : fr) s.push_back(f * r.count);
          all_reduce_doubles(*world, s, ReduceOp::Sum);
          r.count = static_cast<int64_t>(s[2]);
          r.loss = s[0] / std::max<int64_t>(1, r.count);
          r.correct = static_cast<int64_t>(s[1]);
          for (size_t i = 0; i < fr.size(); ++i) fr[i] = s[3 + i] / std::max<int64_t>(1, r.count);
          std::vector<double> m{step_ms, r.forward_ms, r.backward_ms, r.optimizer_ms, r.reset_ms, wait_ms,
                                load_ms, peak_mb, rss_mb, comm_ms, comm_mb, local_stop ? 1.0 : 0.0};
          all_reduce_doubles(*world, m, ReduceOp::Max);
          step_ms = m[0], r.forward_ms = m[1], r.backward_ms = m[2], r.optimizer_ms = m[3], r.reset_ms = m[4], wait_ms = m[5];
          load_ms = m[6], peak_mb = m[7], rss_mb = m[8], comm_ms = m[9], comm_mb = m[10];
          local_stop = m[11] > 0;
          if (cfg.check_replicas > 0 && st.step % cfg.check_replicas == 0 && strategy->name() != "fsdp")
            check_replicas_identical(*dp, params_checksum(model->params()),  // fsdp ranks hold distinct shards
                                     "parameters after step " + std::to_string(st.step));
          comm_before = dp->counters();
        }
        window_samples += r.count;
        window_ms += step_ms;
        window_loss += r.loss;
        window_correct += r.correct;
        window_count += r.count;
        ++window_steps;
        if (metrics) {
          std::map<std::string, double> row{{"step", double(st.step)},
                                            {"epoch", double(epoch)},
                                            {"loss", r.loss},
                                            {"accuracy", r.count ? double(r.correct) / r.count : 0.0},
                                            {"lr", lr},
                                            {"time_ms", step_ms},
                                            {"forward_ms", r.forward_ms},
                                            {"backward_ms", r.backward_ms},
                                            {"optimizer_ms", r.optimizer_ms},
                                            {"reset_ms", r.reset_ms},
                                            {"data_ms", wait_ms},
                                            {"load_ms", load_ms},
                                            {"samples_per_s", step_ms > 0 ? 1000.0 * r.count / step_ms : 0.0},
                                            {"peak_mem_mb", peak_mb},
                                            {"peak_rss_mb", rss_mb}};
          if (scaler.enabled()) {  // fp16: the loss scale after this step and the steps skipped so far
            row["loss_scale"] = scaler.scale();
            row["skipped_steps"] = static_cast<double>(scaler.skipped_steps());
          }
          if (dist) {
            row["comm_ms"] = comm_ms;
            row["comm_mb"] = comm_mb;
          }
          std::lock_guard<std::mutex> l(hdf5_mutex());
          metrics->log_step(row, fr, names);
        }
        if (st.step % cfg.log_every == 0 || st.step == total_steps) {
          const double sps = window_ms > 0 ? 1000.0 * window_samples / window_ms : 0;
          const double eta = sps > 0 ? (total_steps - st.step) * global_batch / sps : 0;
          std::ostringstream os;
          os << "epoch " << epoch + 1 << "/" << cfg.epochs << " step " << st.step << "/" << total_steps << " | loss "
             << std::fixed << std::setprecision(4) << window_loss / window_steps << " acc " << std::setprecision(1)
             << 100.0 * window_correct / std::max<int64_t>(1, window_count) << "% | " << sps << " samples/s | ETA "
             << fmt_duration(eta);
          if (tty) {
            std::printf("\r%s   ", os.str().c_str());
            std::fflush(stdout);
            log.line(os.str(), false);
          } else {
            log.line(os.str());
          }
          window_samples = window_ms = window_loss = 0;
          window_correct = window_count = window_steps = 0;
        }
        stop = local_stop;
        if (stop || limit_reached()) break;
        if (cfg.ckpt_every > 0 && st.step % cfg.ckpt_every == 0) save();
        wait.reset();
      }
    }  // prefetcher joined: no HDF5 reads run concurrently from here on
    if (tty) std::printf("\n");
    if (epoch_done) {  // an epoch's evaluation belongs to it, even when a stop follows
      evaluate();
      last_eval_step = st.step;
    }
    if (stop) break;
  }
  if (stop) {
    const int sig = g_stop.load();
    log.line(sig ? "stop requested (signal " + std::to_string(sig) + "): checkpointing at step " + std::to_string(st.step)
                 : "stop requested (signal on another rank): checkpointing at step " + std::to_string(st.step));
    if (st.step == total_steps && last_eval_step != st.step) evaluate();  // the run is complete anyway
    save();
    sum.interrupted = true;
  } else if (st.step == first_step && first_step > 0 && st.step == total_steps) {
    // Resumed from the final checkpoint of a finished run: it already holds the final
    // evaluation (every checkpoint at the last step is written after one), so add nothing.
    log.line("nothing to do: the run is already complete at step " + std::to_string(st.step));
  } else {
    if (last_eval_step != st.step) evaluate();
    save();
  }
  sum.steps = st.step;
  std::ostringstream os;
  os << "done: " << st.step << " steps in " << fmt_duration(run_timer.ms() / 1000.0);
  if (sum.final_test_accuracy >= 0)
    os << ", test accuracy " << std::fixed << std::setprecision(2) << 100.0 * sum.final_test_accuracy << "%";
  os << "; output in " << run_dir;
  log.line(os.str());
  return sum;
}

}  // namespace sm
