// calibration.cpp — measuring and caching the cost model's pieces (calibration.h).
#include "spikemesh/planner/calibration.h"

#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "spikemesh/comm/agree.h"
#include "spikemesh/comm/comm.h"
#include "spikemesh/core/allocator.h"
#include "spikemesh/core/device.h"
#include "spikemesh/core/error.h"
#include "spikemesh/core/text_file.h"
#include "spikemesh/core/timer.h"
#include "spikemesh/layers/collectives.h"
#include "spikemesh/layers/ctx.h"
#include "spikemesh/layers/param.h"
#include "spikemesh/models/memopt_plan.h"
#include "spikemesh/models/model.h"
#include "spikemesh/models/stage.h"
#include "spikemesh/parallel/pipeline/pp_costs.h"
#include "spikemesh/parallel/tp_plan.h"
#include "spikemesh/optim/optimizer.h"

namespace sm {

namespace {
using json = nlohmann::json;
constexpr double kMiB = 1048576.0;
constexpr int kFormatVersion = 3;  // 2: tp dry runs shard their regions, kept inputs; 3: output bytes

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown CPU";
}

// Ranks sharing this node's memory (collective over `world`).
int ranks_per_node(Comm* world) {
  if (!world) return 1;
  MPI_Comm node;
  MPI_Comm_split_type(world->mpi_comm(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

double max_over(Comm* world, double v) {
  if (!world) return v;
  std::vector<double> x{v};
  all_reduce_doubles(*world, x, ReduceOp::Max);
  return x[0];
}

// Least squares t = a + b·mb over the points, both clamped at >= 0.
LinkCost fit(const std::vector<double>& mb, const std::vector<double>& ms) {
  const double n = static_cast<double>(mb.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < mb.size(); ++i) sx += mb[i], sy += ms[i], sxx += mb[i] * mb[i], sxy += mb[i] * ms[i];
  const double den = n * sxx - sx * sx;
  double b = den > 0 ? (n * sxy - sx * sy) / den : 0.0;
  b = std::max(0.0, b);
  const double a = std::max(0.0, (sy - b * sx) / n);
  return LinkCost{a, b};
}

// One collective of `bytes` payload on `g`, timed over `iters` calls after one warm-up, the
// maximum over the world (collective over `world`).
// `scratch` receives the allocator's peak during the calls above what was live, per payload byte
// (the maximum over the world).
double time_collective(Comm* world, Comm& g, CollectiveKind k, int64_t bytes, Device dev, int iters, double& scratch) {
  const int p = g.size();
  const int64_t n = std::max<int64_t>(p, bytes / 4 / p * p);
  Tensor big = Tensor::zeros({n}, DType::F32, dev), small = Tensor::zeros({n / p}, DType::F32, dev);
  auto once = [&] {
    switch (k) {
      case CollectiveKind::AllReduce: g.all_reduce(big); break;
      case CollectiveKind::ReduceScatter: g.reduce_scatter(big, small); break;
      case CollectiveKind::AllGather: g.all_gather(small, big); break;
      case CollectiveKind::SendRecv: {
        const int peer = g.rank() ^ 1;
        if (peer >= p) break;
        if (g.rank() % 2 == 0) g.send(big, peer), g.recv(big, peer);
        else g.recv(big, peer), g.send(big, peer);
        break;
      }
    }
  };
  Allocator& mem = allocator_for(dev);
  const size_t live = mem.current_bytes(), peak_before = mem.peak_bytes();
  mem.reset_peak();
  once();
  synchronize(dev);
  scratch = max_over(world, static_cast<double>(mem.peak_bytes() - live) / static_cast<double>(big.nbytes()));
  mem.raise_peak(peak_before);
  if (world) world->barrier();
  Timer t;
  for (int i = 0; i < iters; ++i) once();
  synchronize(dev);
  double ms = t.ms() / iters;
  if (k == CollectiveKind::SendRecv) ms /= 2;  // a round trip: two messages
  return max_over(world, ms);
}

json link_json(const LinkCost& l) {
  return json{{"alpha_ms", l.alpha_ms}, {"ms_per_mb", l.ms_per_mb}, {"scratch_per_mb", l.scratch_per_mb}};
}

json sample_json(const UnitSample& s) {
  return json{s.forward_ms, s.backward_ms, s.saved_mb, s.work_mb, s.input_kept_mb, s.out_mb};
}
UnitSample sample_of(const json& j) { return UnitSample{j.at(0), j.at(1), j.at(2), j.at(3), j.at(4), j.at(5)}; }

json profile_json(const ModelProfile& m) {
  json e = json::array();
  for (const TpProfile& t : m.entries) {
    json lo = json::array(), hi = json::array();
    for (const UnitSample& s : t.lo) lo.push_back(sample_json(s));
    for (const UnitSample& s : t.hi) hi.push_back(sample_json(s));
    e.push_back(json{{"tp", t.tp}, {"memopt_level", t.memopt_level}, {"param_mb", t.param_mb},
                     {"out_elements", t.out_elements}, {"out_binary", t.out_binary}, {"tp_calls", t.tp_calls},
                     {"tp_elements", t.tp_elements}, {"input_elements", t.input_elements}, {"n_lo", t.n_lo},
                     {"n_hi", t.n_hi}, {"lo", lo}, {"hi", hi}});
  }
  return json{{"model", m.model}, {"T", m.T}, {"elem_bytes", m.elem_bytes},
              {"optimizer_states", m.optimizer_states}, {"entries", e}};
}

ModelProfile profile_of(const json& j) {
  ModelProfile m;
  m.model = j.at("model");
  m.T = j.at("T");
  m.elem_bytes = j.at("elem_bytes");
  m.optimizer_states = j.at("optimizer_states");
  for (const json& e : j.at("entries")) {
    TpProfile t;
    t.tp = e.at("tp");
    t.memopt_level = e.at("memopt_level");
    t.param_mb = e.at("param_mb").get<std::vector<double>>();
    t.out_elements = e.at("out_elements").get<std::vector<double>>();
    t.out_binary = e.at("out_binary").get<std::vector<bool>>();
    t.tp_calls = e.at("tp_calls").get<std::vector<double>>();
    t.tp_elements = e.at("tp_elements").get<std::vector<double>>();
    t.input_elements = e.at("input_elements");
    t.n_lo = e.at("n_lo");
    t.n_hi = e.at("n_hi");
    for (const json& s : e.at("lo")) t.lo.push_back(sample_of(s));
    for (const json& s : e.at("hi")) t.hi.push_back(sample_of(s));
    m.entries.push_back(std::move(t));
  }
  return m;
}

// The layers' collectives as one rank of a tp group of `p` whose ranks all hold this rank's
// tensors, without communicating: the dry run of the tp-local model then runs its sample-sharded
// regions (layers/sequence_parallel.h) on one shard, as in the run, and the cost model adds the
// collectives' time from the measured links. Values are not those of a run (sums are not
// multiplied); shapes, allocations and compute are.
class LoopbackCollectives final : public Collectives {
 public:
  explicit LoopbackCollectives(int p) : p_(p) {}
  int size() const override { return p_; }
  int rank() const override { return 0; }
  void all_reduce_sum(Tensor&) override {}
  void all_gather(const Tensor& in, Tensor& out) override {  // in: [n], out: [p·n]
    const Tensor flat = out.view({p_, in.numel()});
    for (int r = 0; r < p_; ++r) flat.slice0(r, r + 1).copy_from(in);
  }
  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {  // in: [p·n], out: [n]: chunk 0
    out.copy_from(in.view({p_, out.numel()}).slice0(0, 1));
  }
  void broadcast(Tensor&, int) override {}

 private:
  int p_;
};

// The model of `r` with its tp plan for `tp` applied as tp rank 0 and finalised: what one rank
// of a tp group holds. Its dry run gets LoopbackCollectives: no communication (the cost model
// adds it from the measured links), the regions sharded as in the run. `plan` receives the tp plan.
std::unique_ptr<Model> tp_local_model(const ProfileRequest& r, int tp, TpPlan& plan) {
  std::unique_ptr<Model> m = r.build();
  plan = make_tp_plan(*m, TpOptions{tp, r.tp_keep_first, r.tp_keep_classifier});
  if (tp > 1) apply_tp_plan(plan, 0);
  m->finalize(r.dtype, r.device, 1);
  return m;
}
}  // namespace

std::string machine_fingerprint(Comm* world, Device dev) {
  std::ostringstream os;
  os << "cpu=" << cpu_model() << "; cores=" << omp_get_num_procs() << "; threads=" << omp_get_max_threads()
     << "; device=" << (dev.is_cuda() ? dev.str() : "cpu");
  if (dev.is_cuda()) os << " (" << cuda_device_count() << " visible)";
  const int world_size = world ? world->size() : 1, per_node = ranks_per_node(world);
  os << "; world=" << world_size << "; ranks_per_node=" << per_node;
  std::string s = os.str();
  return world ? broadcast_string(*world, s, 0) : s;
}

MachineCosts measure_machine(Comm* world, Device dev) {
  MachineCosts m;
  const int W = world ? world->size() : 1;
  const int rank = world ? world->rank() : 0;
  const int64_t payloads[] = {int64_t{16} << 10, int64_t{512} << 10, int64_t{4} << 20};
  for (int p = 2; p <= W; ++p) {
    if (W % p != 0) continue;
    MPI_Comm sub;
    MPI_Comm_split(world->mpi_comm(), rank / p, rank, &sub);
    {
      Comm g(sub, "calibrate-" + std::to_string(p));
      for (int k = 0; k < kCollectiveKinds; ++k) {
        std::vector<double> mb, ms;
        double scratch = 0;
        for (int64_t b : payloads) {
          mb.push_back(static_cast<double>(b) / kMiB);
          ms.push_back(time_collective(world, g, static_cast<CollectiveKind>(k), b, dev, 5, scratch));
        }
        m.links[{k, p}] = fit(mb, ms);
        m.links[{k, p}].scratch_per_mb = scratch;  // at the largest payload
      }
    }
    MPI_Comm_free(&sub);
  }
  {  // the optimizer (Adam, the default) per element on this rank's threads
    const int64_t n = int64_t{1} << 20;
    Param p;
    p.name = p.local_name = "calibration";
    p.shape = p.local_shape = {n};
    p.value = Tensor::zeros({n}, DType::F32, Device::cpu());
    p.grad = Tensor::zeros({n}, DType::F32, Device::cpu());
    OptimizerConfig cfg;
    cfg.name = "adam";
    auto opt = make_optimizer(cfg, {&p});
    Allocator& mem = allocator_for(Device::cpu());
    const size_t peak_before = mem.peak_bytes();
    mem.reset_peak();
    opt->step();  // its state is allocated here: measured from the second step
    const size_t with_state = mem.current_bytes();
    mem.reset_peak();
    opt->step();
    m.optimizer_scratch = max_over(world, static_cast<double>(mem.peak_bytes() - with_state) / static_cast<double>(p.value.nbytes()));
    mem.raise_peak(peak_before);
    Timer t;
    for (int i = 0; i < 4; ++i) opt->step();
    m.optimizer_ns_per_element = max_over(world, t.ms() / 4 * 1e6 / static_cast<double>(n));
  }
  m.oversubscription = dev.is_cuda() ? 1.0
                                     : static_cast<double>(ranks_per_node(world)) * omp_get_max_threads() /
                                           std::max(1, omp_get_num_procs());
  m.oversubscription = max_over(world, m.oversubscription);
  if (!dev.is_cuda()) {
    const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    m.capacity_mb = phys / kMiB / std::max(1, ranks_per_node(world));
  } else {
    m.capacity_mb = static_cast<double>(device_memory_bytes(dev)) / kMiB;
  }
  m.capacity_mb = -max_over(world, -m.capacity_mb);  // the smallest over the ranks
  return m;
}

std::string ProfileRequest::cache_key() const {
  std::ostringstream os;
  os << key << " | " << dtype_name(dtype) << "/" << dtype_name(activations) << " on " << device.str();
  if (tp_keep_first) os << " keep-first";
  if (tp_keep_classifier) os << " keep-classifier";
  for (const auto& [tp, s] : sizes) os << " | tp" << tp << " n" << s.first << "-" << s.second;
  os << " | memopt";
  for (int l : memopt_levels) os << " " << l;
  return os.str();
}

std::vector<int> splittable_tp_sizes(const ProfileRequest& r, int world) {
  std::vector<int> out;
  for (int tp = 2; tp <= world; ++tp) {
    if (world % tp != 0) continue;
    std::unique_ptr<Model> m = r.build();
    if (make_tp_plan(*m, TpOptions{tp, r.tp_keep_first, r.tp_keep_classifier}).sharded_layers() > 0) out.push_back(tp);
  }
  return out;
}

ModelProfile measure_model_profile(Comm* world, const ProfileRequest& r) {
  ModelProfile out;
  out.model = r.key;
  out.elem_bytes = static_cast<double>(dtype_size(r.activations));
  out.optimizer_states = r.optimizer_states;
  const bool talk = !world || world->rank() == 0;
  for (const auto& [tp, sizes] : r.sizes)
    for (int level : r.memopt_levels) {
      TpPlan plan;
      std::unique_ptr<Model> m = tp_local_model(r, tp, plan);
      out.T = m->info.T;
      const size_t U = m->units.size();
      TpProfile t;
      t.tp = tp;
      t.memopt_level = level;
      t.n_lo = sizes.first;
      t.n_hi = sizes.second;
      for (auto& u : m->units) t.param_mb.push_back(static_cast<double>(u->flat_value().nbytes()) / kMiB);
      t.tp_calls.assign(U, 0.0);
      t.tp_elements.assign(U, 0.0);
      for (const TpLayerPlan& l : plan.layers) {
        if (tp == 1) break;
        // per sample and step, in all-reduce equivalents: a reduce-scatter or an all-gather moves
        // half an all-reduce's bytes (tp samples: the regions shard; statistics are negligible)
        const TpPlan::Traffic tr = plan.layer_traffic(l, tp, out.T, 1);  // tp samples, T steps, 1 B each
        t.tp_calls[l.unit] += static_cast<double>(tr.all_reduce_calls + tr.reduce_scatter_calls + tr.all_gather_calls);
        t.tp_elements[l.unit] +=
            (static_cast<double>(tr.all_reduce_bytes) + 0.5 * static_cast<double>(tr.reduce_scatter_bytes + tr.all_gather_bytes)) /
            tp;
      }
      double input = out.T;
      for (int64_t d : m->info.input_shape) input *= static_cast<double>(d);
      t.input_elements = input;
      // memopt's level-1 configuration on a one-stage view of the model (the dry run runs it)
      Stage stage(*m, 0, U);
      if (level > 0) apply_memopt(stage, checkpoint_all(stage, true));
      for (int64_t n : {t.n_lo, t.n_hi}) {
        if (talk) {
          std::printf("calibrate: %s, tp %d, memopt %d, %lld sample%s per microbatch ...\n", r.key.c_str(), tp, level,
                      static_cast<long long>(n), n == 1 ? "" : "s");
          std::fflush(stdout);
        }
        if (world) world->barrier();  // every rank runs it at once: the contention of a real step
        Ctx ctx;
        ctx.seed = 1;
        LoopbackCollectives loop(tp);
        if (tp > 1) ctx.tp = &loop;  // regions shard as in the run (level <= 1: Layout::fill_ctx)
        const UnitDryRun d = dry_run_units(*m, n, ctx, true, r.activations);
        std::vector<double> v;  // max over the ranks
        for (size_t u = 0; u < U; ++u)
          v.insert(v.end(),
                   {d.forward_ms[u], d.backward_ms[u], d.saved_mb[u], d.work_mb[u], d.input_kept_mb[u], d.out_mb[u]});
        if (world) all_reduce_doubles(*world, v, ReduceOp::Max);
        std::vector<UnitSample>& dst = n == t.n_lo ? t.lo : t.hi;
        dst.clear();
        for (size_t u = 0; u < U; ++u)
          dst.push_back(UnitSample{v[6 * u], v[6 * u + 1], v[6 * u + 2], v[6 * u + 3], v[6 * u + 4], v[6 * u + 5]});
        if (t.out_binary.empty()) {
          t.out_binary = d.out_binary;
          for (const Shape& s : d.out_shape) {  // whole: units hand on whole activations under tp (tp_plan.h)
            double e = out.T;
            for (int64_t x : s) e *= static_cast<double>(x);
            t.out_elements.push_back(e);
          }
        }
        if (t.n_lo == t.n_hi) {
          t.hi = t.lo;
          break;
        }
      }
      out.entries.push_back(std::move(t));
    }
  return out;
}

std::string default_calibration_path() {
  if (const char* p = std::getenv("SPIKEMESH_CALIBRATION"); p && *p) return p;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = xdg && *xdg ? std::string(xdg) : std::string(home && *home ? home : ".") + "/.cache";
  return dir + "/spikemesh/calibration.json";
}

std::string read_calibration_text(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  return read_text_file(path, "calibration file");
}

CalibrationCache read_calibration(const std::string& path) { return parse_calibration(read_calibration_text(path), path); }

CalibrationCache parse_calibration(const std::string& text, const std::string& path) {
  CalibrationCache c;
  if (text.empty()) return c;
  try {
    const json j = json::parse(text);
    const int version = j.value("format", "") == "spikemesh-calibration" ? j.value("version", 0) : 0;
    if (version > 0 && version < kFormatVersion) {  // an older spikemesh's: its pieces differ, measured again
      c.note = "calibration " + path + " was written by an older spikemesh (version " + std::to_string(version) +
               ", now " + std::to_string(kFormatVersion) + "): measured again";
      return c;
    }
    if (version != kFormatVersion)
      SM_INPUT_ERROR("calibration file " << path << " is not a spikemesh calibration file of version " << kFormatVersion
                                         << " (remove it, or run `spikemesh calibrate` to write a new one)");
    c.fingerprint = j.value("fingerprint", "");
    const json& m = j.at("machine");
    for (const json& l : m.at("links"))
      c.machine.links[{l.at("kind"), l.at("p")}] = LinkCost{l.at("alpha_ms"), l.at("ms_per_mb"), l.at("scratch_per_mb")};
    c.machine.optimizer_ns_per_element = m.at("optimizer_ns_per_element");
    c.machine.optimizer_scratch = m.at("optimizer_scratch");
    c.machine.oversubscription = m.at("oversubscription");
    c.machine.capacity_mb = m.at("capacity_mb");
    for (const auto& [key, p] : j.at("models").items()) c.models[key] = profile_of(p);
  } catch (const json::exception& e) {
    SM_INPUT_ERROR("calibration file " << path << " cannot be read: " << e.what()
                                       << " (remove it, or run `spikemesh calibrate` to write a new one)");
  }
  return c;
}

void write_calibration(const std::string& path, const CalibrationCache& c) {
  json links = json::array();
  for (const auto& [key, l] : c.machine.links) {
    json e = link_json(l);
    e["kind"] = key.first;
    e["op"] = collective_kind_name(static_cast<CollectiveKind>(key.first));
    e["p"] = key.second;
    links.push_back(e);
  }
  json models = json::object();
  for (const auto& [key, p] : c.models) models[key] = profile_json(p);
  const json j{{"format", "spikemesh-calibration"},
               {"version", kFormatVersion},
               {"fingerprint", c.fingerprint},
               {"machine",
                {{"links", links},
                 {"optimizer_ns_per_element", c.machine.optimizer_ns_per_element},
                 {"optimizer_scratch", c.machine.optimizer_scratch},
                 {"oversubscription", c.machine.oversubscription},
                 {"capacity_mb", c.machine.capacity_mb}}},
               {"models", models}};
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << j.dump(1) << "\n";
    if (!f) SM_INPUT_ERROR("calibration file " << path << ": cannot write " << tmp);
  }
  std::filesystem::rename(tmp, p, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    SM_INPUT_ERROR("calibration file " << path << ": cannot replace it (" << ec.message() << ")");
  }
}

}  // namespace sm
