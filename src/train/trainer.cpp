// trainer.cpp — the single-rank training loop (DESIGN §2 data path).
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
#include <iomanip>
#include <mutex>
#include <sstream>

#include "spikemesh/app/model_options.h"
#include "spikemesh/core/allocator.h"
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
#include "spikemesh/train/lr_schedule.h"
#include "spikemesh/train/optimizer.h"
#include "spikemesh/train/train_step.h"

namespace sm {

namespace {
std::atomic<int> g_stop{0};
void on_stop_signal(int sig) { g_stop.store(sig); }

struct Batch {
  Tensor x, y;        // [T, N, ...] model dtype; [N] i64
  double data_ms = 0;
};

// Writes to stdout (rank 0) and to the run's log.txt.
class RunLog {
 public:
  explicit RunLog(const std::string& path) : f_(path, std::ios::app) {
    if (!f_) SM_INPUT_ERROR(path << ": cannot write the run log (" << std::strerror(errno) << ")");
  }
  void line(const std::string& s, bool to_stdout = true) {
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

std::string default_run_name(const TrainConfig& c, const std::string& model_name) {
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

void configure_threads(const TrainConfig& c) {
  int threads = static_cast<int>(c.threads);
  if (threads == 0 && std::getenv("OMP_NUM_THREADS") == nullptr) threads = omp_get_num_procs();
  if (threads > 0) omp_set_num_threads(threads);
}

// Reads and encodes samples `idx` of `split` into the model's input layout.
Batch load_batch(const H5Dataset& ds, Split split, const std::vector<int64_t>& idx, const ModelInfo& mi, int T,
                 Encoding enc, DType dt, uint64_t seed, int64_t epoch) {
  Timer t;
  Batch b;
  Tensor raw;
  ds.read(split, idx, raw, b.y);
  if (ds.info().is_events())
    b.x = events_to_time_major(raw, dt);
  else
    b.x = encode_static(raw, T, enc, dt, seed, epoch, idx);
  (void)mi;
  b.data_ms = t.ms();
  return b;
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

TrainSummary run_training(const TrainConfig& cfg, const std::string& config_toml) {
  configure_threads(cfg);
  if (cfg.device == "cuda" && cuda_device_count() == 0)
    SM_INPUT_ERROR("--device cuda: no CUDA device is visible"
                   << (built_with_cuda() ? "" : " (this spikemesh was built without CUDA)"));
  if (cfg.precision == "bf16" || cfg.precision == "fp16")
    SM_INPUT_ERROR("--precision " << cfg.precision << " needs --device cuda (the CPU path runs fp32 or fp64)");
  if (cfg.device == "auto" && cuda_device_count() == 0 && built_with_cuda())
    SM_INFO("no GPU visible: running on the CPU");
  const DType dt = cfg.precision == "fp64" ? DType::F64 : DType::F32;

  // Data first: a bad file fails before anything is written.
  H5Dataset ds = H5Dataset::open(cfg.data);
  const DatasetInfo& di = ds.info();

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
  std::unique_ptr<Model> model = sel.build();
  const ModelInfo& mi = model->info;
  Shape want = mi.input_shape;
  Shape have = di.is_events() ? Shape(di.sample_shape.begin() + 1, di.sample_shape.end()) : di.sample_shape;
  if (want != have)
    SM_INPUT_ERROR(cfg.data << ": samples are " << shape_str(have) << " per time step but model '" << mi.name
                            << "' expects " << shape_str(want));
  if (di.num_classes != mi.num_classes)
    SM_INPUT_ERROR(cfg.data << " has " << di.num_classes << " classes but model '" << mi.name << "' outputs "
                            << mi.num_classes);
  const int T = mi.T;
  const Encoding enc = encoding_from_name(cfg.encoding);
  if (ds.size(Split::Train) < cfg.batch_size)
    SM_INPUT_ERROR(cfg.data << ": " << ds.size(Split::Train) << " training samples, fewer than one batch of "
                            << cfg.batch_size);

  // Run directory.
  const std::string run_name = cfg.run_name.empty() ? default_run_name(cfg, mi.name) : cfg.run_name;
  const std::string run_dir = cfg.output + "/" + run_name;

  model->finalize(dt, Device::cpu(), static_cast<uint64_t>(cfg.seed));
  OptimizerConfig oc;
  oc.name = cfg.optimizer;
  oc.lr = cfg.lr;
  oc.weight_decay = cfg.weight_decay;
  oc.momentum = cfg.momentum;
  oc.nesterov = cfg.nesterov;
  auto opt = make_optimizer(oc, model->params());

  EpochSampler sampler(ds.size(Split::Train), cfg.batch_size, static_cast<uint64_t>(cfg.seed), cfg.shuffle, true);
  const int64_t per_epoch = sampler.batches_per_epoch();
  int64_t total_steps = per_epoch * cfg.epochs;
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
  LrSchedule sched(lc);
  // Only now, with every setting validated (optimizer, schedule): a bad one writes nothing.
  make_dirs(run_dir, "--output");
  RunLog log(run_dir + "/log.txt");

  TrainState st;
  st.seed = cfg.seed;
  std::string resume_from;
  if (cfg.resume == "auto") {
    resume_from = find_latest_checkpoint(run_dir);
    if (resume_from.empty()) log.line("resume auto: no complete checkpoint in " + run_dir + ", starting fresh");
  } else if (!cfg.resume.empty()) {
    resume_from = cfg.resume;
  }
  if (resume_from.empty() && !find_latest_checkpoint(run_dir).empty())
    SM_INPUT_ERROR(run_dir << " already holds checkpoints of an earlier run: continue it with --resume auto, "
                              "or choose another --run-name");
  if (!resume_from.empty()) {
    CheckpointInfo ci = load_checkpoint(resume_from, *model, *opt);
    st = ci.state;
    if (st.seed != cfg.seed)
      SM_WARN("resuming with --seed " << cfg.seed << " but " << resume_from << " was written with seed " << st.seed
                                      << ": data order and dropout now differ from the original run");
    st.seed = cfg.seed;
    log.line("resumed from " + resume_from + " at step " + std::to_string(st.step) + " (epoch " +
             std::to_string(st.epoch + 1) + ", batch " + std::to_string(st.batch_in_epoch) + ")");
  }
  // Written only now: a resume that fails (bad or foreign checkpoint) leaves the run's files as they were.
  {
    std::ofstream c(run_dir + "/config.toml");
    c << config_toml;
    if (!c) SM_INPUT_ERROR(run_dir << "/config.toml: cannot write");
  }
  MetricsWriter metrics(run_dir + "/metrics.h5", resume_from.empty() ? -1 : st.step);

  std::ostringstream hdr;
  hdr << "spikemesh train: model " << mi.name << " (" << model->num_parameters() << " parameters, T " << T << ", "
      << cfg.precision << "), data " << cfg.data << " (" << ds.size(Split::Train) << " train / "
      << ds.size(Split::Test) << " test), batch " << cfg.batch_size << ", " << per_epoch << " steps/epoch, "
      << omp_get_max_threads() << " threads, output " << run_dir;
  log.line(hdr.str());

  TrainSummary sum;
  sum.run_dir = run_dir;
  const bool tty = isatty(STDOUT_FILENO);
  const int64_t eval_bs = cfg.eval_batch_size > 0 ? cfg.eval_batch_size : cfg.batch_size;
  std::vector<std::string> layer_names;

  auto save = [&]() {
    std::lock_guard<std::mutex> l(hdf5_mutex());
    metrics.flush();
    sum.last_checkpoint =
        save_checkpoint(run_dir, *model, *opt, st, config_toml, cfg.precision, static_cast<int>(cfg.keep));
    log.line("checkpoint " + sum.last_checkpoint, false);
  };

  auto evaluate = [&]() {
    EpochSampler es(ds.size(Split::Test), eval_bs, 0, false, false);
    Ctx ctx;
    ctx.seed = cfg.seed;
    ctx.training = false;
    double loss_sum = 0;
    int64_t correct = 0, count = 0;
    std::vector<double> fr;
    for (int64_t b = 0; b < es.batches_per_epoch(); ++b) {
      auto idx = es.batch_indices(0, b);
      Batch bt = load_batch(ds, Split::Test, idx, mi, T, enc, dt, cfg.seed, 0);
      StepResult r = eval_step(*model, bt.x, bt.y, ctx);
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
    for (double& f : fr) f /= std::max<int64_t>(1, count);
    double acc = count ? static_cast<double>(correct) / count : 0.0;
    double loss = count ? loss_sum / count : 0.0;
    {
      std::lock_guard<std::mutex> l(hdf5_mutex());
      metrics.log_eval(st.step, st.epoch, loss, acc, fr, layer_names);
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
  cpu_allocator().reset_peak();
  bool stop = false;
  auto limit_reached = [&] { return cfg.max_steps > 0 && st.step >= cfg.max_steps; };
  while (!stop && st.epoch < cfg.epochs && !limit_reached()) {
    const int64_t epoch = st.epoch, first = st.batch_in_epoch;
    int64_t n_batches = per_epoch - first;
    if (cfg.max_steps > 0) n_batches = std::min(n_batches, cfg.max_steps - st.step);
    bool epoch_done = false;
    {
      Prefetcher<Batch> pf(
          [&, epoch, first](int64_t k) {
            auto idx = sampler.batch_indices(epoch, first + k);
            return load_batch(ds, Split::Train, idx, mi, T, enc, dt, static_cast<uint64_t>(cfg.seed), epoch);
          },
          n_batches, 2);
      Timer wait;
      while (auto bt = pf.next()) {
        const double wait_ms = wait.ms();
        Ctx ctx;
        ctx.seed = static_cast<uint64_t>(cfg.seed);
        ctx.step = st.step;
        ctx.sample_offset = 0;  // this rank's first position in the global batch
        const double lr = sched.lr_at(st.step);
        opt->set_lr(lr);
        Timer step_t;
        StepResult r = train_step(*model, *opt, bt->x, bt->y, ctx, cfg.clip_grad_norm);
        const double step_ms = step_t.ms() + wait_ms;
        ++st.step;
        ++st.batch_in_epoch;
        if (st.batch_in_epoch == per_epoch) {
          ++st.epoch;
          st.batch_in_epoch = 0;
          epoch_done = true;
        }
        window_samples += r.count;
        window_ms += step_ms;
        window_loss += r.loss;
        window_correct += r.correct;
        window_count += r.count;
        ++window_steps;
        std::vector<double> fr;
        std::vector<std::string> names;
        for (auto& s : model->stats()) {
          fr.push_back(s.value);
          names.push_back(s.layer);
        }
        {
          std::lock_guard<std::mutex> l(hdf5_mutex());
          metrics.log_step({{"step", double(st.step)},
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
                            {"load_ms", bt->data_ms},
                            {"samples_per_s", step_ms > 0 ? 1000.0 * r.count / step_ms : 0.0},
                            {"peak_mem_mb", cpu_allocator().peak_bytes() / 1048576.0},
                            {"peak_rss_mb", peak_rss_mb()}},
                           fr, names);
        }
        if (st.step % cfg.log_every == 0 || st.step == total_steps) {
          const double sps = window_ms > 0 ? 1000.0 * window_samples / window_ms : 0;
          const double eta = sps > 0 ? (total_steps - st.step) * cfg.batch_size / sps : 0;
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
        stop = stop_requested();
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
    log.line("stop requested (signal " + std::to_string(g_stop.load()) + "): checkpointing at step " +
             std::to_string(st.step));
    save();
    sum.interrupted = true;
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
